//! WATCH (`?watch=true`): newline-delimited JSON events over a streamed response, as
//! kube-apiserver writes them. This is the direct form (one store watch per request, as kube's
//! `etcd3` watcher without the watch cache); the watch cache that will serve every watch from one
//! store watch per resource is the next step of issue 9.
//!
//! - No resourceVersion, or `0`: ADDED events for every object there is (at the latest revision),
//!   then every change after it. `N`: every change after N; a compacted N gets an ERROR event
//!   with kube's 410 `too old resource version` and the stream ends.
//! - Selectors apply to each event; an object that starts or stops matching is ADDED or DELETED
//!   (the DELETED one carrying its previous content at the change's resourceVersion), as kube's
//!   watchers send it.
//! - `allowWatchBookmarks`: the store's progress notifications become BOOKMARK events.
//! - The stream ends after `timeoutSeconds`, or after kube's default of 30 to 60 minutes.

use std::time::Duration;

use axum::body::Body;
use futures::{Stream, StreamExt};
use http::{header, StatusCode};
use serde::Serialize;
use serde_json::{json, Value};

use crate::resources::Resource;
use crate::rest::{self, Api, Query, Selectors};
use crate::status::{self, Status};
use crate::storage::watch::Change;
use crate::storage::{At, ListOptions, StorageError, Stored};
use crate::table::{self, Shape};

/// kube's `--min-request-timeout` default: a watch without `timeoutSeconds` lasts between this
/// and twice this.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

#[derive(Serialize)]
struct Event<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a T,
}

fn line(kind: &str, object: &impl Serialize) -> Vec<u8> {
    status::go_json(&Event { kind, object })
}

/// An ERROR event: the Status in kube's field order.
fn error_line(s: &Status) -> Vec<u8> {
    line("ERROR", s)
}

/// What a watch sends for one store change, given the selectors: nothing, or an event.
fn event(r: &Resource, sel: &Selectors, change: Change) -> Result<Option<(&'static str, Value)>, Status> {
    let at = |value: Vec<u8>, rev: i64| rest::shown(r, &Stored { value, rev });
    Ok(match change {
        Change::Added { value, rev, .. } => Some(at(value, rev)?).filter(|v| sel.matches(v)).map(|v| ("ADDED", v)),
        Change::Modified { value, prev, rev, .. } => {
            let new = at(value, rev)?;
            let old = prev.map(|p| at(p, rev)).transpose()?;
            match (sel.matches(&new), old.as_ref().is_some_and(|o| sel.matches(o))) {
                (true, true) => Some(("MODIFIED", new)),
                (true, false) if !sel.is_empty() => Some(("ADDED", new)),
                (true, false) => Some(("MODIFIED", new)),
                (false, true) => old.map(|o| ("DELETED", o)),
                (false, false) => None,
            }
        }
        Change::Deleted { value, rev, .. } => Some(at(value, rev)?).filter(|v| sel.matches(v)).map(|v| ("DELETED", v)),
        Change::Progress { .. } => None,
    })
}

/// The BOOKMARK object: the resource's kind at a resourceVersion, nothing else.
fn bookmark(r: &Resource, rev: i64) -> Value {
    json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": {"resourceVersion": rev.to_string(), "creationTimestamp": null}})
}

/// Serves a watch of `r`'s collection in `namespace`.
pub async fn serve(
    api: &Api,
    r: &'static Resource,
    namespace: Option<&str>,
    query: &Query,
    shape: Shape,
) -> http::Response<Body> {
    match start(api, r, namespace, query, shape).await {
        Ok(body) => http::Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .expect("a response"),
        Err(s) => rest::failure(s),
    }
}

async fn start(
    api: &Api,
    r: &'static Resource,
    namespace: Option<&str>,
    query: &Query,
    shape: Shape,
) -> Result<Body, Status> {
    let sel = Selectors::of(r, query)?;
    let bookmarks = matches!(query.get("allowWatchBookmarks").map(String::as_str), Some("true" | "1"));
    let timeout = match query.get("timeoutSeconds") {
        Some(t) => {
            Duration::from_secs(t.parse().map_err(|_| status::bad_request(format!("invalid timeoutSeconds: {t}")))?)
        }
        None => MIN_REQUEST_TIMEOUT + Duration::from_secs(rand::random_range(0..MIN_REQUEST_TIMEOUT.as_secs())),
    };
    let include = query.get("includeObject").cloned();
    let render = move |v: Value| table::render(shape, r, v, include.as_deref());
    let prefix = rest::collection(api, r, namespace);

    // Where the watch starts, and the ADDED events of the state there when it starts at "now".
    let mut initial = Vec::new();
    let from = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => {
            let mut opts = ListOptions { limit: 500, continue_token: None, at: At::Latest };
            loop {
                let page = api.storage.list(&prefix, &opts).await.map_err(storage_status)?;
                for (_, stored) in &page.items {
                    let v = rest::shown(r, stored)?;
                    if sel.matches(&v) {
                        initial.push(line("ADDED", &render(v)?));
                    }
                }
                match page.continue_token {
                    Some(t) => opts = ListOptions { limit: 500, continue_token: Some(t), at: At::Exact(page.rev) },
                    None => break page.rev,
                }
            }
        }
        Some(rv) => rv.parse::<i64>().map_err(|_| status::bad_request(format!("invalid resource version: {rv}")))?,
    };
    let changes = api.storage.watch(&prefix, from).await.map_err(storage_status)?;
    let events = changes
        .scan(false, move |ended, change| {
            let out = if *ended {
                None
            } else {
                Some(match change {
                    Ok(Change::Progress { rev }) => bookmarks.then(|| line("BOOKMARK", &bookmark(r, rev))),
                    Ok(c) => match event(r, &sel, c)
                        .and_then(|e| e.map(|(k, v)| render(v).map(|v| line(k, &v))).transpose())
                    {
                        Ok(l) => l,
                        Err(s) => {
                            *ended = true;
                            Some(error_line(&s))
                        }
                    },
                    Err(StorageError::Compacted(at)) => {
                        *ended = true;
                        Some(error_line(&status::expired(format!("too old resource version: {from} ({at})"))))
                    }
                    Err(e) => {
                        *ended = true;
                        Some(error_line(&rest::internal(e)))
                    }
                })
            };
            futures::future::ready(out)
        })
        .filter_map(futures::future::ready);
    let all = futures::stream::iter(initial).chain(events);
    Ok(Body::from_stream(until(all, timeout).map(Ok::<_, std::convert::Infallible>)))
}

/// `s` until `timeout` has passed.
fn until(
    s: impl Stream<Item = Vec<u8>> + Send + 'static,
    timeout: Duration,
) -> impl Stream<Item = Vec<u8>> + Send + 'static {
    let deadline = tokio::time::sleep(timeout);
    futures::stream::unfold((Box::pin(s), Box::pin(deadline)), |(mut s, mut deadline)| async move {
        tokio::select! {
            item = s.next() => item.map(|i| (i, (s, deadline))),
            _ = &mut deadline => None,
        }
    })
}

fn storage_status(e: StorageError) -> Status {
    match e {
        StorageError::Compacted(_) => status::expired("too old resource version"),
        StorageError::Store(s) => rest::internal(s.message()),
        other => rest::internal(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta;

    fn stored(name: &str, labels: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"metadata": {"name": name, "namespace": "d", "labels": labels}})).unwrap()
    }

    /// Objects moving into or out of a selector are ADDED or DELETED, as kube's watchers send them.
    #[test]
    fn error_events_carry_kubes_status() {
        let l = String::from_utf8(error_line(&status::expired("too old resource version: 1 (11)"))).unwrap();
        assert_eq!(l, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource version: 1 (11)\",\"reason\":\"Expired\",\"code\":410}}\n");
    }

    #[test]
    fn selectors_turn_changes_into_kubes_events() {
        let r = crate::resources::find("", "v1", "configmaps").unwrap();
        let mut q = Query::new();
        q.insert("labelSelector".into(), "app=web".into());
        let sel = Selectors::of(r, &q).unwrap();
        let (web, db) = (stored("a", json!({"app": "web"})), stored("a", json!({"app": "db"})));
        let kind = |c| event(r, &sel, c).unwrap().map(|(k, v)| (k, meta::get(&v, "resourceVersion").to_string()));
        let m = |value: &Vec<u8>, prev: &Vec<u8>| Change::Modified {
            key: "k".into(),
            value: value.clone(),
            prev: Some(prev.clone()),
            rev: 9,
        };
        assert_eq!(kind(m(&web, &db)), Some(("ADDED", "9".into())));
        assert_eq!(kind(m(&db, &web)), Some(("DELETED", "9".into())));
        assert_eq!(kind(m(&web, &web)), Some(("MODIFIED", "9".into())));
        assert_eq!(kind(m(&db, &db)), None);
        assert_eq!(kind(Change::Added { key: "k".into(), value: db.clone(), rev: 3 }), None);
        assert_eq!(
            kind(Change::Deleted { key: "k".into(), value: web.clone(), rev: 4 }),
            Some(("DELETED", "4".into()))
        );
    }
}
