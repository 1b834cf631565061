//! The watch cache: one per resource, fed by one store watch (`reflector`), serving every watch
//! and the reads kube serves from its cacher (`rest` decides which).
//!
//! A cache holds the resource's objects as of the revision it has reached, each decoded once
//! into what selectors need and encoded once into the bytes a LIST writes; and a window of
//! recent events, kept for `EVENT_FRESH` (kube's 75 s) and at most `MAX_EVENTS`, from which a
//! watcher resumes at its resourceVersion. Watchers are indexed (`watchers`): one waiting on a
//! field (a kubelet's `spec.nodeName=X`) or on one namespace is not looked at for events of
//! other nodes or namespaces. An event's JSON line is encoded once, by whichever watcher needs it
//! first, and shared by all.
//!
//! Everything that changes the cache (an applied change, a re-list) and everything that must see
//! it at one revision (a list, a watcher's start and its registration) holds the state lock, so a
//! watcher's backlog and its live events meet without a gap or a repeat.

pub mod reflector;
pub mod watchers;

use std::any::Any;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::Instant;

use crate::resources::Resource;
use crate::rest;
use crate::selector::field_of;
use crate::status::{self, Status};
use crate::storage::{Storage, Stored};

pub use crate::rest::Selectors;
pub use watchers::{Closed, Seen, Subscription};

/// How long an event stays in the window (kube's `DefaultEventFreshDuration`).
pub const EVENT_FRESH: Duration = Duration::from_secs(75);
/// The fewest events a window keeps, however old (kube's lower bound on a cache's capacity).
pub const MIN_EVENTS: usize = 100;
/// The most events a window keeps, however fresh (kube's upper bound on a cache's capacity).
pub const MAX_EVENTS: usize = 100 * 1024;
/// How long a read waits for the cache to reach the revision it needs (kube's 3 s).
pub const FRESH_WAIT: Duration = Duration::from_secs(3);

/// One object as the cache holds it.
#[derive(Debug)]
pub struct Object {
    /// Its key in the store.
    pub key: String,
    /// Its resourceVersion.
    pub rev: i64,
    pub namespace: String,
    labels: Option<Value>,
    /// The values of the resource's selectable fields, in `Resource::selectable` order.
    fields: Box<[String]>,
    /// The object as a list item: compact JSON without `kind` and `apiVersion`.
    pub item: Bytes,
    /// The object as the control plane's informers read it, decoded once into the first type
    /// asked for and shared by every controller.
    decoded: Decoded,
    /// The object as JSON (with `kind` and `apiVersion`), decoded once when a controller first
    /// reads it and shared.
    json: OnceLock<Arc<Value>>,
}

#[derive(Default)]
struct Decoded(OnceLock<Arc<dyn Any + Send + Sync>>);

impl std::fmt::Debug for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() { "Decoded(..)" } else { "Decoded(-)" })
    }
}

impl Object {
    /// Decodes a stored object at `rev`.
    pub fn decode(r: &Resource, key: String, value: Vec<u8>, rev: i64) -> Result<Object, Status> {
        Ok(Self::of(r, key, rest::shown(r, &Stored { value, rev })?, rev))
    }

    /// An object as shown to clients (with `kind` and `apiVersion`).
    fn of(r: &Resource, key: String, mut v: Value, rev: i64) -> Object {
        let labels = v.pointer("/metadata/labels").cloned();
        let fields = r.selectable().iter().map(|f| field_of(&v, f)).collect();
        let namespace = crate::meta::get(&v, "namespace").to_string();
        if let Value::Object(m) = &mut v {
            m.remove("kind");
            m.remove("apiVersion");
        }
        let mut item = status::go_json(&v);
        item.pop();
        Object {
            key,
            rev,
            namespace,
            labels,
            fields,
            item: item.into(),
            decoded: Decoded::default(),
            json: OnceLock::new(),
        }
    }

    /// The object as a `T` (a k8s-openapi type), decoded once and shared; None if it is not one.
    pub fn decoded<T: DeserializeOwned + Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let decode = || serde_json::from_slice::<T>(&self.item).ok().map(Arc::new);
        let held = self.decoded.0.get_or_init(|| match decode() {
            Some(t) => t,
            None => Arc::new(()),
        });
        match held.clone().downcast::<T>() {
            Ok(t) => Some(t),
            Err(_) => decode(),
        }
    }

    /// The same object with resourceVersion `rev` (a deletion's).
    fn at(&self, r: &Resource, rev: i64) -> Object {
        let mut v = self.value(r);
        crate::meta::set(&mut v, "resourceVersion", &rev.to_string());
        Self::of(r, self.key.clone(), v, rev)
    }

    /// The object as clients see it (decoded anew, unless a controller's read kept it).
    pub fn value(&self, r: &Resource) -> Value {
        match self.json.get() {
            Some(v) => (**v).clone(),
            None => self.parse(r),
        }
    }

    fn parse(&self, r: &Resource) -> Value {
        match serde_json::from_slice(&self.item) {
            Ok(Value::Object(m)) => r.with_type(m),
            _ => Value::Null,
        }
    }

    /// The object as clients see it, decoded once and shared: what the control plane's
    /// controllers read (the watch cache's own paths decode as they need, and keep nothing).
    pub fn json(&self, r: &Resource) -> Arc<Value> {
        self.json.get_or_init(|| Arc::new(self.parse(r))).clone()
    }

    /// Its JSON with `kind` and `apiVersion` first, as a GET or a watch event writes it.
    pub fn typed(&self, r: &Resource) -> Vec<u8> {
        let head = format!("{{\"kind\":\"{}\",\"apiVersion\":\"{}\"", r.kind, r.api_version());
        let mut out = Vec::with_capacity(head.len() + self.item.len() + 1);
        out.extend_from_slice(head.as_bytes());
        match self.item.get(1..) {
            Some(b"}") | None => out.push(b'}'),
            Some(rest) => {
                out.push(b',');
                out.extend_from_slice(rest);
            }
        }
        out
    }

    /// The value of selectable field `i`.
    pub fn field(&self, i: usize) -> &str {
        self.fields.get(i).map_or("", String::as_str)
    }

    fn selected(&self, r: &Resource, sel: &Selectors) -> bool {
        sel.matches_parts(self.labels.as_ref(), |f| {
            r.selectable().iter().position(|s| *s == f).map_or(String::new(), |i| self.field(i).to_string())
        })
    }
}

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Added,
    Modified,
    Deleted,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Added => "ADDED",
            Kind::Modified => "MODIFIED",
            Kind::Deleted => "DELETED",
        }
    }
}

/// One change of the resource, as the window keeps it and watchers receive it.
pub struct Event {
    pub r: &'static Resource,
    pub kind: Kind,
    pub rev: i64,
    /// The object after the change; for a deletion, as it was, at the deletion's revision.
    pub object: Arc<Object>,
    /// The object before a modification.
    pub prev: Option<Arc<Object>>,
    at: Instant,
    /// The event's JSON lines, one per way a watcher may see it, each encoded once.
    lines: [OnceLock<Bytes>; 4],
    /// Its protobuf frames likewise, for the watchers that asked for protobuf.
    frames: [OnceLock<Bytes>; 4],
    /// `prev` at this event's revision: what a watcher whose selector the object left receives.
    left: OnceLock<Arc<Object>>,
}

impl Event {
    fn new(r: &'static Resource, kind: Kind, object: Arc<Object>, prev: Option<Arc<Object>>, at: Instant) -> Event {
        Event {
            r,
            kind,
            rev: object.rev,
            object,
            prev,
            at,
            lines: Default::default(),
            frames: Default::default(),
            left: OnceLock::new(),
        }
    }

    /// The event type and object a watcher that sees it as `seen` receives.
    pub fn as_seen(&self, seen: Seen) -> (Kind, &Arc<Object>) {
        match seen {
            Seen::As(kind) => (kind, &self.object),
            Seen::Left => {
                let prev = self.prev.as_ref().unwrap_or(&self.object);
                (Kind::Deleted, self.left.get_or_init(|| Arc::new(prev.at(self.r, self.rev))))
            }
        }
    }

    /// The watch stream's line for a watcher that sees it as `seen`, encoded once.
    pub fn line(&self, seen: Seen) -> Bytes {
        self.lines[slot(seen)]
            .get_or_init(|| {
                let (kind, object) = self.as_seen(seen);
                event_line(kind.name(), &object.typed(self.r)).into()
            })
            .clone()
    }

    /// The protobuf watch stream's frame for a watcher that sees it as `seen`, encoded once.
    pub fn frame(&self, seen: Seen) -> Bytes {
        self.frames[slot(seen)]
            .get_or_init(|| {
                let (kind, object) = self.as_seen(seen);
                event_frame(self.r, kind.name(), &object.value(self.r)).into()
            })
            .clone()
    }
}

/// Where an event keeps its encoding for a watcher that sees it as `seen`.
fn slot(seen: Seen) -> usize {
    match seen {
        Seen::As(Kind::Added) => 0,
        Seen::As(Kind::Modified) => 1,
        Seen::As(Kind::Deleted) => 2,
        Seen::Left => 3,
    }
}

/// One event of a protobuf watch stream of `r`: the object (an object of `r`, or a Status) in a
/// length-framed `WatchEvent` (empty if it has no protobuf form, which the watch rules out).
pub fn event_frame(r: &Resource, kind: &str, object: &Value) -> Vec<u8> {
    let inner = crate::proto::encode(object).unwrap_or_default();
    crate::proto::watch_frame(&r.api_version(), kind, &inner)
}

/// `{"type":<kind>,"object":<object>}` and a newline: one event of a JSON watch stream.
pub fn event_line(kind: &str, object: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(object.len() + kind.len() + 24);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    out
}

/// The cache's state, behind its lock.
struct State {
    /// Whether it holds a listed state (false until the first list, and while re-listing).
    ready: bool,
    /// The revision it reflects.
    rev: i64,
    objects: BTreeMap<String, Arc<Object>>,
    /// Recent events, oldest first.
    window: VecDeque<Arc<Event>>,
    /// Every event after this revision is in the window.
    from: i64,
    /// Whether events were dropped from the window since the last list.
    evicted: bool,
    watchers: watchers::Watchers,
}

/// The watch cache of one resource.
pub struct Cache {
    pub r: &'static Resource,
    /// The key prefix of the resource's objects in every namespace.
    prefix: String,
    state: Mutex<State>,
    /// The revision reached, for readers waiting on it.
    reached: tokio::sync::watch::Sender<i64>,
    /// Asks the reflector's store watch for a progress notification, while it runs.
    progress: Mutex<Option<crate::storage::watch::ProgressRequests>>,
    /// Whether consistent reads may be served here: the store answers progress requests
    /// correctly (keel, or etcd from 3.4.31 and 3.5.13, as kube requires).
    consistent: bool,
}

/// A LIST's answer from the cache: the objects in key order and the revision they are at, and
/// where the rest starts when a limit cut it short (a continue token the store serves, at this
/// revision, and kube's `remainingItemCount` when nothing was filtered).
pub struct Listed {
    pub rev: i64,
    pub items: Vec<Arc<Object>>,
    pub continue_token: Option<String>,
    pub remaining: Option<i64>,
}

/// How a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// With an ADDED event for every object the cache holds, then every change.
    Now,
    /// With every change after this resourceVersion.
    After(i64),
}

impl Cache {
    pub fn new(r: &'static Resource, prefix: String, consistent: bool) -> Cache {
        Cache {
            r,
            prefix,
            state: Mutex::new(State {
                ready: false,
                rev: 0,
                objects: BTreeMap::new(),
                window: VecDeque::new(),
                from: 0,
                evicted: false,
                watchers: watchers::Watchers::default(),
            }),
            reached: tokio::sync::watch::Sender::new(0),
            progress: Mutex::new(None),
            consistent,
        }
    }

    /// The revision the cache reflects.
    pub fn rev(&self) -> i64 {
        self.state.lock().rev
    }

    /// Whether it holds a listed state.
    pub fn ready(&self) -> bool {
        self.state.lock().ready
    }

    /// Replaces the whole state with a list at `rev` (the first list, or a re-list after the
    /// store compacted what the cache still needed). Watchers of the state before are closed, as
    /// kube's cacher closes them: they resume from their resourceVersion, or are told it is too
    /// old.
    pub fn replace(&self, objects: Vec<Object>, rev: i64) {
        let mut st = self.state.lock();
        st.objects = objects.into_iter().map(|o| (o.key.clone(), Arc::new(o))).collect();
        st.window.clear();
        st.from = rev;
        st.evicted = false;
        st.rev = rev;
        st.ready = true;
        st.watchers.close_all();
        drop(st);
        self.reached.send_replace(rev);
    }

    /// Applies one change at `rev` from the store: a put of `value` (None: a deletion) at `key`.
    pub fn apply(&self, key: String, value: Option<Vec<u8>>, rev: i64) {
        let object = match value {
            Some(v) => match Object::decode(self.r, key.clone(), v, rev) {
                Ok(o) => Some(o),
                Err(s) => {
                    tracing::warn!(key, rev, error = %s.message, "an object the cache cannot decode is left out");
                    None
                }
            },
            None => None,
        };
        let now = Instant::now();
        let mut st = self.state.lock();
        if rev < st.rev {
            // Already reflected (a store watch never repeats a revision; this guards the cache
            // against a store that did).
            return;
        }
        let event = match object {
            Some(o) => {
                let o = Arc::new(o);
                match st.objects.insert(key, o.clone()) {
                    Some(prev) => Event::new(self.r, Kind::Modified, o, Some(prev), now),
                    None => Event::new(self.r, Kind::Added, o, None, now),
                }
            }
            None => match st.objects.remove(&key) {
                Some(prev) => Event::new(self.r, Kind::Deleted, Arc::new(prev.at(self.r, rev)), None, now),
                None => {
                    st.rev = rev;
                    drop(st);
                    self.reached.send_replace(rev);
                    return;
                }
            },
        };
        let event = Arc::new(event);
        st.watchers.dispatch(&event);
        st.window.push_back(event);
        st.rev = rev;
        Self::prune(&mut st, now);
        drop(st);
        self.reached.send_replace(rev);
    }

    /// The store has reached `rev` with no change to the resource since the last one.
    pub fn progress(&self, rev: i64) {
        let mut st = self.state.lock();
        if rev > st.rev {
            st.rev = rev;
            Self::prune(&mut st, Instant::now());
            drop(st);
            self.reached.send_replace(rev);
        }
    }

    /// Drops events past their time (keeping the last `MIN_EVENTS`) or past the window's bound.
    fn prune(st: &mut State, now: Instant) {
        while let Some(e) = st.window.front() {
            let stale = st.window.len() > MIN_EVENTS && now.duration_since(e.at) >= EVENT_FRESH;
            if !stale && st.window.len() <= MAX_EVENTS {
                break;
            }
            st.from = e.rev;
            st.evicted = true;
            st.window.pop_front();
        }
    }

    /// The oldest resourceVersion a watch may resume from, as kube's window reckons it: the
    /// last list's revision until an event is dropped, then the revision before the oldest event
    /// kept.
    fn oldest(st: &State) -> i64 {
        match st.window.front() {
            Some(e) if st.evicted => e.rev - 1,
            _ => st.from,
        }
    }

    /// Waits until the cache reflects revision `rev`, at most `wait`; whether it does.
    pub async fn wait_for(&self, rev: i64, wait: Duration) -> bool {
        let mut reached = self.reached.subscribe();
        let ready = || self.ready();
        tokio::time::timeout(wait, reached.wait_for(|r| *r >= rev && ready())).await.is_ok_and(|r| r.is_ok())
    }

    /// Makes the cache reflect at least `rev` (a client's NotOlderThan), or kube's 504 after
    /// `FRESH_WAIT`. With progress requests, the store is asked for progress meanwhile.
    pub async fn fresh(&self, rev: i64) -> Result<(), Status> {
        if self.ready() && self.rev() >= rev {
            return Ok(());
        }
        if self.consistent {
            if let Some(p) = self.progress.lock().as_ref() {
                p.request();
            }
        }
        if self.wait_for(rev, FRESH_WAIT).await {
            Ok(())
        } else {
            Err(status::too_large_resource_version(rev, self.rev()))
        }
    }

    /// The key prefix of the resource's objects in every namespace.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether consistent reads may be served here (KEP-2340): the store answers progress
    /// requests as kube requires.
    pub fn serves_consistent_reads(&self) -> bool {
        self.consistent
    }

    /// Makes the cache reflect the store's current revision (kube's `GetCurrentResourceVersion`,
    /// then `fresh`), for a consistent read.
    pub async fn current(&self, storage: &Storage) -> Result<(), Status> {
        let current = storage.current_revision(&self.prefix).await.map_err(rest::internal)?;
        self.fresh(current).await
    }

    /// The objects under key prefix `within` (a collection) that `sel` selects, as of the
    /// cache's revision; the first `limit` of them if `limit` is positive.
    pub fn list(&self, within: &str, sel: &Selectors, limit: i64) -> Listed {
        let st = self.state.lock();
        let mut matching = st
            .objects
            .range(within.to_string()..)
            .take_while(|(k, _)| k.starts_with(within))
            .filter(|(_, o)| o.selected(self.r, sel))
            .map(|(_, o)| o.clone());
        let limit = usize::try_from(limit).ok().filter(|l| *l > 0);
        let items: Vec<_> = matching.by_ref().take(limit.unwrap_or(usize::MAX)).collect();
        let (mut continue_token, mut remaining) = (None, None);
        if limit.is_some() && matching.next().is_some() {
            let last = items.last().map_or(within, |o| o.key.as_str());
            continue_token = crate::storage::cont::encode(&format!("{last}\0"), within, st.rev);
            if sel.is_empty() {
                let all = st.objects.range(within.to_string()..).take_while(|(k, _)| k.starts_with(within)).count();
                remaining = Some((all - items.len()) as i64);
            }
        }
        Listed { rev: st.rev, items, continue_token, remaining }
    }

    /// The object at `key`, as of the cache's revision.
    pub fn get(&self, key: &str) -> (i64, Option<Arc<Object>>) {
        let st = self.state.lock();
        (st.rev, st.objects.get(key).cloned())
    }

    /// Starts a watcher on objects of `namespace` (None: all) that `sel` selects. Too old a
    /// start is kube's 410 (`too old resource version: N (M)`); one past the cache's revision
    /// delivers the events after it, as kube's cacher does.
    pub fn watch(
        self: &Arc<Self>,
        start: Start,
        namespace: Option<String>,
        sel: Selectors,
    ) -> Result<Subscription, Status> {
        let mut st = self.state.lock();
        let (initial, backlog) = match start {
            Start::Now => {
                let within = match &namespace {
                    Some(ns) => format!("{}{ns}/", self.prefix),
                    None => self.prefix.clone(),
                };
                let initial = st
                    .objects
                    .range(within.clone()..)
                    .take_while(|(k, _)| k.starts_with(&within))
                    .filter(|(_, o)| o.selected(self.r, &sel))
                    .map(|(_, o)| o.clone())
                    .collect();
                (initial, Vec::new())
            }
            Start::After(rev) => {
                let oldest = Self::oldest(&st);
                if rev < oldest {
                    return Err(status::expired(format!("too old resource version: {rev} ({oldest})")));
                }
                let first = st.window.partition_point(|e| e.rev <= rev);
                let backlog = st
                    .window
                    .range(first..)
                    .filter_map(|e| watchers::sees(self.r, namespace.as_deref(), &sel, e).map(|s| (e.clone(), s)))
                    .collect();
                (Vec::new(), backlog)
            }
        };
        // A watch from past the cache's revision starts there and skips what comes before.
        let rev = match start {
            Start::After(after) => after.max(st.rev),
            Start::Now => st.rev,
        };
        let (id, rx) = st.watchers.add(self.r, namespace, sel);
        drop(st);
        Ok(Subscription::new(initial, rev, backlog, rx, self.clone(), id))
    }

    /// Ends watcher `id` (its client is gone).
    pub(crate) fn forget(&self, id: u64) {
        self.state.lock().watchers.remove(id);
    }

    /// How many watchers are registered.
    pub fn watchers(&self) -> usize {
        self.state.lock().watchers.len()
    }

    /// How many events the window holds.
    pub fn window_len(&self) -> usize {
        self.state.lock().window.len()
    }
}

/// Every resource's cache, by group, version and plural: the built-in resources' made at start,
/// a custom resource's added when its definition is served and removed when it no longer is.
#[derive(Clone, Default)]
pub struct Caches(Arc<CachesInner>);

#[derive(Default)]
struct CachesInner {
    /// Where reflectors read (None only in tests and benches that fill caches by hand).
    source: Option<(Storage, String, bool)>,
    held: parking_lot::RwLock<HashMap<(&'static str, &'static str, &'static str), Held>>,
}

/// A cache and the task of its reflector (None for the built-ins', which live as long as the
/// process and are awaited by its owner).
struct Held {
    cache: Arc<Cache>,
    reflector: Option<tokio::task::AbortHandle>,
}

impl Caches {
    /// A cache for each resource of the table, fed from `storage` by a reflector each; the
    /// reflectors' tasks. `consistent`: whether consistent reads may be served from the caches.
    pub fn start(storage: &Storage, prefix: &str, consistent: bool) -> (Caches, Vec<tokio::task::JoinHandle<()>>) {
        let mut caches = HashMap::new();
        let mut tasks = Vec::new();
        for r in crate::resources::RESOURCES.iter().filter(|r| r.stored()) {
            let within = crate::storage::keys::collection(prefix, &r.key_prefix(), None);
            let cache = Arc::new(Cache::new(r, within, consistent));
            tasks.push(tokio::spawn(reflector::run(cache.clone(), storage.clone())));
            caches.insert((r.group, r.version, r.plural), Held { cache, reflector: None });
        }
        let inner = CachesInner {
            source: Some((storage.clone(), prefix.to_string(), consistent)),
            held: parking_lot::RwLock::new(caches),
        };
        (Caches(Arc::new(inner)), tasks)
    }

    pub fn of(&self, r: &Resource) -> Option<Arc<Cache>> {
        self.0.held.read().get(&(r.group, r.version, r.plural)).map(|h| h.cache.clone())
    }

    /// Starts a cache for `r` (a custom resource's version) unless one with its names is held;
    /// whether one was started.
    pub fn add(&self, r: &'static Resource) -> bool {
        let Some((storage, prefix, consistent)) = &self.0.source else { return false };
        let mut held = self.0.held.write();
        let k = (r.group, r.version, r.plural);
        if held.get(&k).is_some_and(|h| h.cache.r.kind == r.kind && h.cache.r.namespaced == r.namespaced) {
            return false;
        }
        let within = crate::storage::keys::collection(prefix, &r.key_prefix(), None);
        let cache = Arc::new(Cache::new(r, within, *consistent));
        let task = tokio::spawn(reflector::run(cache.clone(), storage.clone()));
        if let Some(old) = held.insert(k, Held { cache, reflector: Some(task.abort_handle()) }) {
            old.stop();
        }
        true
    }

    /// Stops and drops the cache of `r`'s group, version and plural (a custom resource's version
    /// no longer served): its reflector ends and its watchers are closed.
    pub fn remove(&self, r: &Resource) {
        if let Some(old) = self.0.held.write().remove(&(r.group, r.version, r.plural)) {
            old.stop();
        }
    }

    /// Waits until every cache holds a listed state, at most `wait`; whether they do.
    pub async fn ready(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let all: Vec<Arc<Cache>> = self.0.held.read().values().map(|h| h.cache.clone()).collect();
        for c in all {
            let left = deadline.saturating_duration_since(Instant::now());
            if !c.wait_for(0, left).await {
                return false;
            }
        }
        true
    }
}

impl Held {
    fn stop(self) {
        if let Some(task) = self.reflector {
            task.abort();
        }
        self.cache.state.lock().watchers.close_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::Query;
    use serde_json::json;

    fn secrets() -> &'static Resource {
        crate::resources::find("", "v1", "secrets").unwrap()
    }

    fn cache() -> Arc<Cache> {
        Arc::new(Cache::new(secrets(), "/registry/secrets/".into(), true))
    }

    fn key(ns: &str, name: &str) -> String {
        format!("/registry/secrets/{ns}/{name}")
    }

    fn value(ns: &str, name: &str, labels: Value, kind: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({"metadata": {"name": name, "namespace": ns, "labels": labels}, "type": kind}))
            .unwrap()
    }

    fn put(c: &Cache, ns: &str, name: &str, labels: Value, kind: &str, rev: i64) {
        c.apply(key(ns, name), Some(value(ns, name, labels, kind)), rev);
    }

    fn selectors(pairs: &[(&str, &str)]) -> Selectors {
        let q: Query = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Selectors::of(secrets(), &q).unwrap()
    }

    /// What a subscription holds now: (type, name, resourceVersion) of each event.
    fn drain(s: &mut Subscription) -> Vec<(&'static str, String, i64)> {
        let mut out = Vec::new();
        while let Ok(Some((e, seen))) = s.try_next() {
            let (kind, o) = e.as_seen(seen);
            let v = o.value(e.r);
            out.push((kind.name(), crate::meta::get(&v, "name").to_string(), o.rev));
        }
        out
    }

    fn ready(c: &Cache, rev: i64) {
        c.replace(Vec::new(), rev);
    }

    #[test]
    fn objects_moving_through_a_selector_are_added_and_deleted() {
        let c = cache();
        ready(&c, 1);
        let mut web = c.watch(Start::Now, None, selectors(&[("labelSelector", "app=web")])).unwrap();
        put(&c, "d", "a", json!({"app": "db"}), "Opaque", 2);
        put(&c, "d", "a", json!({"app": "web"}), "Opaque", 3);
        put(&c, "d", "a", json!({"app": "web", "x": "y"}), "Opaque", 4);
        put(&c, "d", "a", json!({"app": "db"}), "Opaque", 5);
        c.apply(key("d", "a"), None, 6);
        put(&c, "d", "b", json!({"app": "web"}), "Opaque", 7);
        c.apply(key("d", "b"), None, 8);
        assert_eq!(
            drain(&mut web),
            vec![
                ("ADDED", "a".into(), 3),
                ("MODIFIED", "a".into(), 4),
                // It left the selection at 5: DELETED, as it was before, at 5.
                ("DELETED", "a".into(), 5),
                ("ADDED", "b".into(), 7),
                ("DELETED", "b".into(), 8),
            ]
        );
    }

    #[test]
    fn watchers_are_filed_by_field_and_namespace_and_see_only_theirs() {
        let c = cache();
        ready(&c, 1);
        let mut by_type = c.watch(Start::Now, None, selectors(&[("fieldSelector", "type=t1")])).unwrap();
        let mut in_ns = c.watch(Start::Now, Some("n1".into()), selectors(&[])).unwrap();
        let mut all = c.watch(Start::Now, None, selectors(&[])).unwrap();
        assert_eq!(c.state.lock().watchers.filed(), (1, 1, 1));
        put(&c, "n1", "a", json!({}), "t1", 2);
        put(&c, "n2", "b", json!({}), "t2", 3);
        // b's type changes to t1 and back: it enters and leaves the t1 watcher's selection.
        put(&c, "n2", "b", json!({}), "t1", 4);
        put(&c, "n2", "b", json!({}), "t2", 5);
        assert_eq!(
            drain(&mut by_type),
            vec![("ADDED", "a".into(), 2), ("ADDED", "b".into(), 4), ("DELETED", "b".into(), 5)]
        );
        assert_eq!(drain(&mut in_ns), vec![("ADDED", "a".into(), 2)]);
        assert_eq!(drain(&mut all).len(), 4);
        drop((by_type, in_ns, all));
        assert_eq!(c.state.lock().watchers.filed(), (0, 0, 0));
    }

    #[test]
    fn each_event_is_encoded_once_and_shared() {
        let c = cache();
        ready(&c, 1);
        let mut one = c.watch(Start::Now, None, selectors(&[])).unwrap();
        let mut two = c.watch(Start::Now, None, selectors(&[])).unwrap();
        put(&c, "d", "a", json!({"k": "<v>"}), "Opaque", 2);
        let (e1, s1) = one.try_next().unwrap().unwrap();
        let (e2, s2) = two.try_next().unwrap().unwrap();
        let (l1, l2) = (e1.line(s1), e2.line(s2));
        assert_eq!(l1.as_ptr(), l2.as_ptr());
        let text = std::str::from_utf8(&l1).unwrap();
        assert!(
            text.starts_with("{\"type\":\"ADDED\",\"object\":{\"kind\":\"Secret\",\"apiVersion\":\"v1\","),
            "{text}"
        );
        assert!(
            text.contains("\"resourceVersion\":\"2\"") && text.contains("\\u003cv\\u003e") && text.ends_with("}}\n")
        );
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["object"]["metadata"]["labels"]["k"], "<v>");
    }

    #[test]
    fn a_watcher_that_does_not_keep_up_is_dropped_and_others_go_on() {
        let c = cache();
        ready(&c, 1);
        let mut slow = c.watch(Start::Now, None, selectors(&[])).unwrap();
        let mut fast = c.watch(Start::Now, None, selectors(&[])).unwrap();
        let mut seen = 0;
        for i in 0..watchers::WATCHER_QUEUE as i64 + 10 {
            put(&c, "d", "a", json!({"i": i.to_string()}), "Opaque", 2 + i);
            seen += drain(&mut fast).len();
        }
        assert_eq!(seen, watchers::WATCHER_QUEUE + 10);
        assert_eq!(c.watchers(), 1);
        // The slow one gets what its queue held, in order, then its end.
        let held = drain(&mut slow);
        assert_eq!(held.len(), watchers::WATCHER_QUEUE);
        assert!(held.windows(2).all(|w| w[0].2 + 1 == w[1].2));
        assert_eq!(slow.try_next().err(), Some(Closed));
    }

    #[test]
    fn watchers_resume_from_the_window_and_too_old_is_kubes_410() {
        let c = cache();
        ready(&c, 10);
        for i in 0..5 {
            put(&c, "d", &format!("o{i}"), json!({}), "Opaque", 11 + i);
        }
        let mut from_12 = c.watch(Start::After(12), None, selectors(&[])).unwrap();
        assert_eq!(drain(&mut from_12).iter().map(|e| e.2).collect::<Vec<_>>(), vec![13, 14, 15]);
        put(&c, "d", "o9", json!({}), "Opaque", 16);
        assert_eq!(drain(&mut from_12).iter().map(|e| e.2).collect::<Vec<_>>(), vec![16]);
        // Nothing dropped yet: anything from the list's revision on resumes.
        assert!(c.watch(Start::After(10), None, selectors(&[])).is_ok());
        let e = c.watch(Start::After(9), None, selectors(&[])).err().unwrap();
        assert_eq!(
            (e.code, e.reason.as_ref(), e.message.as_str()),
            (410, "Expired", "too old resource version: 9 (10)")
        );
        // Past the cache's revision: only what comes after it.
        let mut ahead = c.watch(Start::After(17), None, selectors(&[])).unwrap();
        put(&c, "d", "o9", json!({"x": "1"}), "Opaque", 17);
        put(&c, "d", "o9", json!({"x": "2"}), "Opaque", 18);
        assert_eq!(drain(&mut ahead).iter().map(|e| e.2).collect::<Vec<_>>(), vec![18]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_is_sized_by_time() {
        let c = cache();
        ready(&c, 1);
        let n = MIN_EVENTS as i64 + 50;
        for i in 0..n {
            put(&c, "d", "a", json!({"i": i.to_string()}), "Opaque", 2 + i);
        }
        assert_eq!(c.window_len(), n as usize);
        tokio::time::advance(EVENT_FRESH).await;
        put(&c, "d", "a", json!({}), "Opaque", 2 + n);
        // Everything past its time went, but the last MIN_EVENTS stay however old.
        assert_eq!(c.window_len(), MIN_EVENTS);
        let oldest = 2 + n + 1 - MIN_EVENTS as i64;
        let e = c.watch(Start::After(oldest - 2), None, selectors(&[])).err().unwrap();
        assert_eq!(e.message, format!("too old resource version: {} ({})", oldest - 2, oldest - 1));
        let mut s = c.watch(Start::After(oldest - 1), None, selectors(&[])).unwrap();
        assert_eq!(drain(&mut s).len(), MIN_EVENTS);
    }

    #[test]
    fn a_relist_closes_every_watcher() {
        let c = cache();
        ready(&c, 1);
        let mut w = c.watch(Start::Now, None, selectors(&[])).unwrap();
        put(&c, "d", "a", json!({}), "Opaque", 2);
        c.replace(vec![Object::decode(secrets(), key("d", "b"), value("d", "b", json!({}), "Opaque"), 9).unwrap()], 9);
        assert_eq!(drain(&mut w).len(), 1);
        assert_eq!(w.try_next().err(), Some(Closed));
        let listed = c.list("/registry/secrets/", &selectors(&[]), 0);
        assert_eq!((listed.rev, listed.items.len()), (9, 1));
        let e = c.watch(Start::After(2), None, selectors(&[])).err().unwrap();
        assert_eq!(e.message, "too old resource version: 2 (9)");
    }

    #[test]
    fn lists_apply_namespaces_selectors_and_limits() {
        let c = cache();
        ready(&c, 1);
        for (i, ns) in ["a", "a", "b", "a"].iter().enumerate() {
            put(&c, ns, &format!("s{i}"), json!({"n": i.to_string()}), "Opaque", 2 + i as i64);
        }
        let names =
            |l: &Listed| l.items.iter().map(|o| o.key.rsplit('/').next().unwrap().to_string()).collect::<Vec<_>>();
        let all = c.list("/registry/secrets/a/", &selectors(&[]), 0);
        assert_eq!(
            (names(&all), all.rev, all.continue_token.is_none()),
            (vec!["s0".into(), "s1".into(), "s3".into()], 5, true)
        );
        let page = c.list("/registry/secrets/a/", &selectors(&[]), 2);
        assert_eq!((names(&page), page.remaining), (vec!["s0".to_string(), "s1".to_string()], Some(1)));
        let (next, rev) =
            crate::storage::cont::decode(page.continue_token.as_ref().unwrap(), "/registry/secrets/a/").unwrap();
        assert_eq!((next.as_str(), rev), ("/registry/secrets/a/s1\0", 5));
        let picked = c.list("/registry/secrets/", &selectors(&[("labelSelector", "n in (1,2)")]), 1);
        assert_eq!(
            (names(&picked), picked.remaining, picked.continue_token.is_some()),
            (vec!["s1".to_string()], None, true)
        );
    }
}
