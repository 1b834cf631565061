//! WATCH (`?watch=true`): newline-delimited JSON events over a streamed response, as
//! kube-apiserver writes them, served from the resource's watch cache (`cache`).
//!
//! - No resourceVersion, or `0`: ADDED events for every object the cache holds, then every
//!   change after it. `N`: every change after N; an N older than the cache's window gets an ERROR
//!   event with kube's 410 `too old resource version` and the stream ends; an N the cache has not
//!   reached is waited for (kube's 504 after 3 s).
//! - WatchList (`sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`): ADDED events for
//!   the state at a revision not older than the one asked for (unset: the store's current one),
//!   then a BOOKMARK annotated `k8s.io/initial-events-end`, then every change.
//! - Selectors apply to each event; an object that starts or stops matching is ADDED or DELETED,
//!   as kube's cache watchers send it.
//! - `allowWatchBookmarks`: a BOOKMARK at the revision the cache has reached about once a minute
//!   and shortly before the watch's timeout ends it.
//! - The stream ends after `timeoutSeconds` (or kube's default of 30 to 60 minutes), or when the
//!   cache drops a watcher that does not keep up (the client resumes from its resourceVersion).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{header, StatusCode};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::cache::{self, Cache, Event, Object, Seen, Start, Subscription};
use crate::resources::Resource;
use crate::rest::{self, Api, Query, Selectors};
use crate::status::{self, FieldError, FieldErrorType, GroupKind, Status};
use crate::table::{self, Shape};

/// kube's `--min-request-timeout` default: a watch without `timeoutSeconds` lasts between this
/// and twice this.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);
/// How often a watcher that allows bookmarks gets one (kube's `defaultBookmarkFrequency`).
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// How long before its timeout a watch gets its last bookmark.
const BOOKMARK_BEFORE_END: Duration = Duration::from_secs(2);
/// The annotation of the bookmark that ends a WatchList's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

#[derive(Serialize)]
struct Line<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a T,
}

fn line(kind: &str, object: &impl Serialize) -> Vec<u8> {
    status::go_json(&Line { kind, object })
}

/// The BOOKMARK object: the resource's kind at a resourceVersion, nothing else (but the
/// annotation that ends a WatchList's initial events).
fn bookmark(r: &Resource, rev: i64, initial_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": rev.to_string(), "creationTimestamp": null});
    if initial_end {
        metadata["annotations"] = json!({ INITIAL_EVENTS_END: "true" });
    }
    json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": metadata})
}

/// Serves a watch of `r`'s collection in `namespace`.
pub async fn serve(
    api: &Api,
    r: &'static Resource,
    namespace: Option<&str>,
    query: &Query,
    shape: Shape,
) -> http::Response<Body> {
    // A type with no protobuf form is watched in JSON.
    let shape = match shape {
        Shape::Protobuf if !crate::proto::has_message(&r.api_version(), r.kind) => Shape::Object,
        s => s,
    };
    let content_type = match shape {
        Shape::Protobuf => "application/vnd.kubernetes.protobuf;stream=watch",
        _ => "application/json",
    };
    match start(api, r, namespace, query, shape).await {
        Ok(body) => http::Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, content_type)
            .body(body)
            .expect("a response"),
        Err(s) => rest::failure(s),
    }
}

fn is_true(v: Option<&String>) -> bool {
    matches!(v.map(String::as_str), Some("true" | "1"))
}

/// kube's checks of a watch's options (`ValidateListOptions` for a watch); 422 on
/// `ListOptions.meta.k8s.io`.
fn watch_options(query: &Query) -> Result<(), Status> {
    let get = |k: &str| query.get(k).map(String::as_str).unwrap_or("");
    let matching = get("resourceVersionMatch");
    let initial = !get("sendInitialEvents").is_empty();
    let mut errors = Vec::new();
    let forbidden = |field: &str, why: &str| FieldError::new(FieldErrorType::Forbidden, field, None, why);
    if initial {
        if matching != "NotOlderThan" {
            errors.push(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
    } else if !matching.is_empty() {
        errors.push(forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    if !matching.is_empty() && matching != "NotOlderThan" {
        errors.push(FieldError::new(
            FieldErrorType::NotSupported,
            "resourceVersionMatch",
            Some(Value::String(matching.into())),
            "supported values: \"NotOlderThan\"",
        ));
    }
    if !matching.is_empty() && !get("continue").is_empty() {
        errors.push(forbidden("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided"));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(status::invalid(GroupKind { group: "meta.k8s.io", kind: "ListOptions" }, "", &errors))
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
    watch_options(query)?;
    let bookmarks = is_true(query.get("allowWatchBookmarks"));
    let initial_events = is_true(query.get("sendInitialEvents"));
    let timeout = match query.get("timeoutSeconds") {
        Some(t) => {
            Duration::from_secs(t.parse().map_err(|_| status::bad_request(format!("invalid timeoutSeconds: {t}")))?)
        }
        None => MIN_REQUEST_TIMEOUT + Duration::from_secs(rand::random_range(0..MIN_REQUEST_TIMEOUT.as_secs())),
    };
    let render = Render { r, shape, include: query.get("includeObject").cloned() };
    let cache = api.caches.of(r).ok_or_else(|| rest::internal(format!("no watch cache for {}", r.plural)))?.clone();
    if !cache.wait_for(0, cache::FRESH_WAIT).await {
        return Err(status::too_many_requests("storage is (re)initializing", 1));
    }
    // What goes wrong from here is an ERROR event in a 200 answer, as kube's cacher reports it.
    let rv = query.get("resourceVersion").map(String::as_str).unwrap_or("");
    let (start, after) =
        match begin(api, &cache, rv, query.contains_key("sendInitialEvents"), initial_events, bookmarks).await {
            Ok(s) => s,
            Err(s) => return Ok(Body::from(render.error(&s))),
        };
    let mut sub = match cache.watch(start, namespace.filter(|_| r.namespaced).map(str::to_string), sel) {
        Ok(sub) => sub,
        Err(s) => return Ok(Body::from(render.error(&s))),
    };
    let mut stream = Stream {
        render,
        initial: std::mem::take(&mut sub.initial).into(),
        initial_end: (initial_events && bookmarks).then_some(sub.rev),
        last: after.unwrap_or(sub.rev),
        sub,
        pending: VecDeque::new(),
        next_bookmark: None,
        deadline: Instant::now() + timeout,
        ended: false,
    };
    if bookmarks {
        stream.next_bookmark = stream.bookmark_after(Instant::now());
    }
    Ok(Body::from_stream(futures::stream::unfold(stream, |mut s| async move {
        s.next().await.map(|b| (Ok::<_, std::convert::Infallible>(b), s))
    })))
}

/// Where a watch starts (kube's cacher): with the state, or after a resourceVersion (also
/// returned); waiting first for the cache to reach the revision a WatchList asks for.
async fn begin(
    api: &Api,
    cache: &Cache,
    rv: &str,
    initial_given: bool,
    initial_events: bool,
    bookmarks: bool,
) -> Result<(Start, Option<i64>), Status> {
    let parsed =
        |rv: &str| rv.parse::<i64>().map_err(|_| status::bad_request(format!("invalid resource version: {rv}")));
    if !initial_given {
        // The legacy watch: unset or `0` starts with the cache's state, N after N.
        return match rv {
            "" | "0" => Ok((Start::Now, None)),
            n => parsed(n).map(|n| (Start::After(n), Some(n))),
        };
    }
    // sendInitialEvents: at the store's current revision when unset, at N or later when given.
    let required = match rv {
        "" if initial_events && bookmarks && !cache.serves_consistent_reads() => {
            return Err(rest::internal_error(
                "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled",
            ))
        }
        "" => Some(api.storage.current_revision(cache.prefix()).await.map_err(rest::internal)?),
        "0" => None,
        n => Some(parsed(n)?),
    };
    if initial_events {
        if let Some(required) = required {
            cache.fresh(required).await?;
        }
        return Ok((Start::Now, None));
    }
    match required {
        Some(n) => Ok((Start::After(n), Some(n))),
        None => {
            let now = cache.rev();
            Ok((Start::After(now), Some(now)))
        }
    }
}

/// How events are written for one watch: shared JSON lines or protobuf frames, or rendered per
/// watcher (Tables, metadata only).
struct Render {
    r: &'static Resource,
    shape: Shape,
    include: Option<String>,
}

impl Render {
    /// An event of `kind` with `object` (a Status, a bookmark) that no cache event holds.
    fn other(&self, kind: &str, object: &impl Serialize) -> Bytes {
        match self.shape {
            Shape::Protobuf => {
                let v = serde_json::to_value(object).expect("a value encodes");
                cache::event_frame(self.r, kind, &v).into()
            }
            _ => line(kind, object).into(),
        }
    }

    fn error(&self, s: &Status) -> Bytes {
        self.other("ERROR", s)
    }

    fn object(&self, kind: &str, object: &Object) -> Result<Bytes, Status> {
        match self.shape {
            Shape::Object => Ok(cache::event_line(kind, &object.typed(self.r)).into()),
            Shape::Protobuf => Ok(cache::event_frame(self.r, kind, &object.value(self.r)).into()),
            _ => {
                let v = table::render(self.shape, self.r, object.value(self.r), self.include.as_deref())?;
                Ok(line(kind, &v).into())
            }
        }
    }

    fn event(&self, e: &Event, seen: Seen) -> Result<Bytes, Status> {
        match self.shape {
            Shape::Object => Ok(e.line(seen)),
            Shape::Protobuf => Ok(e.frame(seen)),
            _ => {
                let (kind, object) = e.as_seen(seen);
                self.object(kind.name(), object)
            }
        }
    }
}

/// One watch's response body, a line at a time.
struct Stream {
    render: Render,
    sub: Subscription,
    initial: VecDeque<Arc<Object>>,
    /// The revision of the bookmark that ends a WatchList's initial events, until it is sent.
    initial_end: Option<i64>,
    /// The revision of the last event sent.
    last: i64,
    pending: VecDeque<Bytes>,
    /// When the next bookmark is due, if the client allows them.
    next_bookmark: Option<Instant>,
    deadline: Instant,
    ended: bool,
}

impl Stream {
    fn deliver(&mut self, e: &Event, seen: Seen) -> Bytes {
        self.last = self.last.max(e.rev);
        match self.render.event(e, seen) {
            Ok(b) => b,
            Err(s) => {
                self.ended = true;
                self.render.error(&s)
            }
        }
    }

    /// When the bookmark after one sent at `now` is due: a minute later, or shortly before the
    /// watch ends, whichever comes first; none after that one.
    fn bookmark_after(&self, now: Instant) -> Option<Instant> {
        let last = self.deadline.checked_sub(BOOKMARK_BEFORE_END)?;
        (now < last).then(|| (now + BOOKMARK_EVERY).min(last))
    }

    /// Queues a bookmark at the revision the cache has reached: every event up to it is in this
    /// watcher's queue, so those are queued first. None if the cache has dropped the watcher.
    fn bookmark(&mut self) {
        let reached = self.sub.reached();
        loop {
            match self.sub.try_next() {
                Ok(Some((e, seen))) => {
                    let b = self.deliver(&e, seen);
                    self.pending.push_back(b);
                }
                Ok(None) => break,
                Err(cache::Closed) => {
                    self.ended = true;
                    return;
                }
            }
        }
        // As kube's cache watchers: only a bookmark past what was sent.
        if reached > self.last {
            self.last = reached;
            let b = self.render.other("BOOKMARK", &bookmark(self.render.r, reached, false));
            self.pending.push_back(b);
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            if self.ended {
                return None;
            }
            if let Some(o) = self.initial.pop_front() {
                return Some(self.render.object("ADDED", &o).unwrap_or_else(|s| {
                    self.ended = true;
                    self.render.error(&s)
                }));
            }
            if let Some(rev) = self.initial_end.take() {
                return Some(self.render.other("BOOKMARK", &bookmark(self.render.r, rev, true)));
            }
            let bookmark_at = self.next_bookmark;
            tokio::select! {
                d = self.sub.next() => match d {
                    Some((e, seen)) => return Some(self.deliver(&e, seen)),
                    None => return None,
                },
                _ = tokio::time::sleep_until(bookmark_at.unwrap_or(self.deadline)), if bookmark_at.is_some() => {
                    self.bookmark();
                    self.next_bookmark = self.bookmark_after(Instant::now());
                }
                _ = tokio::time::sleep_until(self.deadline) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_events_carry_kubes_status() {
        let l = String::from_utf8(line("ERROR", &status::expired("too old resource version: 1 (11)"))).unwrap();
        assert_eq!(l, "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource version: 1 (11)\",\"reason\":\"Expired\",\"code\":410}}\n");
    }

    #[test]
    fn watch_options_are_checked_as_kube_checks_them() {
        let q =
            |pairs: &[(&str, &str)]| -> Query { pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() };
        assert!(watch_options(&q(&[("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan")])).is_ok());
        assert!(watch_options(&q(&[("resourceVersion", "5")])).is_ok());
        let e = watch_options(&q(&[("sendInitialEvents", "true")])).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(e.message.ends_with("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"), "{}", e.message);
        let e = watch_options(&q(&[("resourceVersionMatch", "NotOlderThan")])).unwrap_err();
        assert!(e.message.ends_with("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"), "{}", e.message);
    }

    #[test]
    fn bookmarks_carry_the_revision_and_the_initial_events_end() {
        let r = crate::resources::find("", "v1", "configmaps").unwrap();
        let b = String::from_utf8(line("BOOKMARK", &bookmark(r, 7, true))).unwrap();
        assert_eq!(b, "{\"type\":\"BOOKMARK\",\"object\":{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{\"k8s.io/initial-events-end\":\"true\"},\"creationTimestamp\":null,\"resourceVersion\":\"7\"}}}\n");
    }
}
