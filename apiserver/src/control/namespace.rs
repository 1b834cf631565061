//! The namespace controller (kube's `namespace` package): a namespace being deleted (Terminating,
//! with the `kubernetes` finalizer) has everything in it deleted, resource by resource; its
//! status says what remains (kube's `NamespaceContentRemaining` and
//! `NamespaceFinalizersRemaining` conditions); once nothing remains, the controller removes its
//! finalizer through `finalize` and the namespace goes.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::informer::{self, key_of};
use super::{Failure, Queue};
use crate::meta;
use crate::resources::Resource;
use crate::rest::{Selectors, Target};

/// Every namespaced resource served now (custom ones included), each key space once.
fn namespaced(api: &crate::rest::Api) -> Vec<&'static Resource> {
    let mut seen = HashSet::new();
    api.served().into_iter().filter(|r| r.stored() && r.namespaced && seen.insert(r.key_prefix())).collect()
}

pub async fn run(client: Client) {
    let queue = Queue::new();
    let namespaces = resource("", "v1", "namespaces");
    let q = queue.clone();
    let watch = informer::run(client.cache(namespaces).clone(), Selectors::everything(), move |ch| {
        if ch.object().value(namespaces).pointer("/metadata/deletionTimestamp").is_some() {
            q.add(key_of(ch.object()));
        }
    });
    let work = queue.clone().work("namespace-controller", 5, move |name| {
        let (client, queue) = (client.clone(), queue.clone());
        async move { sync(&client, &queue, &name).await }
    });
    super::together(vec![Box::pin(watch), Box::pin(work)]).await;
}

async fn sync(client: &Client, queue: &Queue, name: &str) -> Result<(), Failure> {
    let namespaces = resource("", "v1", "namespaces");
    let Some(o) = client.cached(namespaces, None, name) else { return Ok(()) };
    let ns = o.value(namespaces);
    let finalizers: Vec<Value> = ns.pointer("/spec/finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
    if ns.pointer("/metadata/deletionTimestamp").is_none() || !finalizers.contains(&json!("kubernetes")) {
        return Ok(());
    }
    let mut remaining: Vec<(String, usize)> = Vec::new();
    let mut finalizers_left: Vec<String> = Vec::new();
    for r in namespaced(&client.api) {
        let mut objects = client.cached_list(r, Some(name));
        if objects.is_empty() {
            continue;
        }
        let live: Vec<_> =
            objects.iter().filter(|o| o.value(r).pointer("/metadata/deletionTimestamp").is_none()).collect();
        if !live.is_empty() {
            if r.serves("deletecollection") {
                let target = Target::Collection { namespace: Some(name.to_string()) };
                match client.call(r, http::Method::DELETE, target, &[], None).await {
                    Err(e) if !e.is("NotFound") => return Err(e),
                    _ => {}
                }
            } else {
                for o in live {
                    match client.delete(r, Some(name), meta::get(&o.value(r), "name"), &json!({})).await {
                        Err(e) if !e.is("NotFound") => return Err(e),
                        _ => {}
                    }
                }
            }
            objects = client.cached_list(r, Some(name));
        }
        if !objects.is_empty() {
            let plural = if r.group.is_empty() { r.plural.to_string() } else { format!("{}.{}", r.plural, r.group) };
            remaining.push((plural, objects.len()));
            for o in &objects {
                for f in o.value(r).pointer("/metadata/finalizers").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(f) = f.as_str().filter(|f| !finalizers_left.iter().any(|x| x == f)) {
                        finalizers_left.push(f.to_string());
                    }
                }
            }
        }
    }
    if !remaining.is_empty() {
        set_conditions(client, &ns, &remaining, &finalizers_left).await?;
        queue.add_after(name, Duration::from_secs(1));
        return Ok(());
    }
    let mut done = ns.clone();
    done["spec"]["finalizers"] = Value::Array(finalizers.into_iter().filter(|f| f != "kubernetes").collect());
    match client.update(namespaces, None, name, Some("finalize"), &done).await {
        Err(e) if !e.is("NotFound") => Err(e),
        _ => Ok(()),
    }
}

/// kube's deletion conditions: what content and which finalizers remain.
async fn set_conditions(
    client: &Client,
    ns: &Value,
    remaining: &[(String, usize)],
    finalizers: &[String],
) -> Result<(), Failure> {
    let namespaces = resource("", "v1", "namespaces");
    let now = meta::now();
    let content =
        remaining.iter().map(|(r, n)| format!("{r} has {n} resource instances")).collect::<Vec<_>>().join(", ");
    let resources = remaining.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>().join(", ");
    let cond = |kind: &str, status: &str, reason: &str, message: String| json!({"type": kind, "status": status, "lastTransitionTime": now, "reason": reason, "message": message});
    let mut conditions = vec![
        cond(
            "NamespaceDeletionDiscoveryFailure",
            "False",
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
        cond(
            "NamespaceDeletionGroupVersionParsingFailure",
            "False",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into(),
        ),
        cond(
            "NamespaceDeletionContentFailure",
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into(),
        ),
        cond(
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain",
            format!("Some resources are remaining: {content}"),
        ),
    ];
    conditions.push(if finalizers.is_empty() {
        cond(
            "NamespaceFinalizersRemaining",
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".into(),
        )
    } else {
        cond(
            "NamespaceFinalizersRemaining",
            "True",
            "SomeFinalizersRemain",
            format!("Some content in the namespace has finalizers remaining: {} in {resources}", finalizers.join(", ")),
        )
    });
    // Transition times stay while a condition's status does.
    let old = ns.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    for c in &mut conditions {
        if let Some(o) = old.iter().find(|o| o["type"] == c["type"] && o["status"] == c["status"]) {
            c["lastTransitionTime"] = o["lastTransitionTime"].clone();
        }
    }
    if ns.pointer("/status/conditions") == Some(&Value::Array(conditions.clone())) {
        return Ok(());
    }
    let mut updated = ns.clone();
    updated["status"]["conditions"] = Value::Array(conditions);
    match client.update(namespaces, None, meta::get(ns, "name"), Some("status"), &updated).await {
        Err(e) if !e.is("NotFound") && e.code != 409 => Err(e),
        _ => Ok(()),
    }
}
