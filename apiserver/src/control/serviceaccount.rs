//! The service account controller (kube's `serviceaccounts-controller`): every active namespace
//! has a `default` ServiceAccount; one deleted is made again.

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::informer::{self, key_of, Change};
use super::{Failure, Queue};
use crate::rest::Selectors;

pub const DEFAULT: &str = "default";

pub async fn run(client: Client) {
    let queue = Queue::new();
    let (namespaces, accounts) = (resource("", "v1", "namespaces"), resource("", "v1", "serviceaccounts"));
    let q = queue.clone();
    let ns_watch = informer::run(client.cache(namespaces).clone(), Selectors::everything(), move |ch| {
        if !matches!(ch, Change::Deleted(_)) {
            q.add(key_of(ch.object()));
        }
    });
    let q = queue.clone();
    let sa_watch = informer::run(client.cache(accounts).clone(), Selectors::everything(), move |ch| {
        if let Change::Deleted(o) = &ch {
            if o.key.ends_with(&format!("/{DEFAULT}")) {
                q.add(o.namespace.clone());
            }
        }
    });
    let work = queue.clone().work("serviceaccount-controller", 2, move |ns| {
        let client = client.clone();
        async move { sync(&client, &ns).await }
    });
    super::together(vec![Box::pin(ns_watch), Box::pin(sa_watch), Box::pin(work)]).await;
}

async fn sync(client: &Client, ns: &str) -> Result<(), Failure> {
    let (namespaces, accounts) = (resource("", "v1", "namespaces"), resource("", "v1", "serviceaccounts"));
    let Some(n) = client.cached(namespaces, None, ns) else { return Ok(()) };
    let active = n.value(namespaces).pointer("/status/phase").and_then(Value::as_str) != Some("Terminating");
    if !active || client.cached(accounts, Some(ns), DEFAULT).is_some() {
        return Ok(());
    }
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DEFAULT, "namespace": ns}});
    match client.create(accounts, Some(ns), &sa).await {
        // A namespace going away refuses new content: nothing to do.
        Err(e) if !e.is("AlreadyExists") && e.code != 403 && !e.is("NotFound") => Err(e),
        _ => Ok(()),
    }
}
