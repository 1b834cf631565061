//! A cache's watchers, indexed for dispatch, and the receiving end each watch reads.
//!
//! A watcher is filed in exactly one place: under an exact field requirement of its field
//! selector (`spec.nodeName=X`, `metadata.name=Y`) if it has one, else under its namespace if it
//! watches one, else among those that see everything. An event is offered to the watchers filed
//! under its object's field values (before and after the change), under its namespace, and to
//! the rest; each of those still checks its whole selector. A watcher's queue is bounded: one
//! that does not keep up is dropped from the cache, its queue ends after what it holds, and its
//! client resumes from the last resourceVersion it saw, as kube's cacher drops a slow watcher.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Cache, Event, Kind, Object};
use crate::resources::Resource;
use crate::rest::Selectors;

/// How many events a watcher may have waiting before it is dropped.
pub const WATCHER_QUEUE: usize = 1024;

/// How a watcher sees an event, given its selectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// As an event of this type, with the event's object.
    As(Kind),
    /// The object left the selection: DELETED, with the object as it was before, at the event's
    /// revision.
    Left,
}

type Delivery = (Arc<Event>, Seen);

/// Whether and how a watcher of `namespace` (None: all) with `sel` sees `e`, as kube's cache
/// watchers decide: an object entering the selection is ADDED, one leaving it DELETED.
pub(super) fn sees(r: &Resource, namespace: Option<&str>, sel: &Selectors, e: &Event) -> Option<Seen> {
    if namespace.is_some_and(|ns| ns != e.object.namespace) {
        return None;
    }
    let now = e.object.selected(r, sel);
    match e.kind {
        Kind::Added | Kind::Deleted => now.then_some(Seen::As(e.kind)),
        Kind::Modified => {
            let before = e.prev.as_ref().is_some_and(|p| p.selected(r, sel));
            match (now, before) {
                (true, true) => Some(Seen::As(Kind::Modified)),
                (true, false) => Some(Seen::As(Kind::Added)),
                (false, true) => Some(Seen::Left),
                (false, false) => None,
            }
        }
    }
}

struct Watcher {
    namespace: Option<String>,
    sel: Selectors,
    tx: mpsc::Sender<Delivery>,
}

/// Where a watcher is filed.
enum Slot {
    All,
    Namespace(String),
    /// Under the value of selectable field `.0`.
    Field(usize, String),
}

type Group = HashMap<u64, Watcher>;

#[derive(Default)]
pub(super) struct Watchers {
    next: u64,
    slots: HashMap<u64, Slot>,
    all: Group,
    by_namespace: HashMap<String, Group>,
    by_field: HashMap<usize, HashMap<String, Group>>,
}

impl Watchers {
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// How many watchers are filed among those seeing everything, under namespaces and under
    /// field values.
    #[cfg(test)]
    pub(super) fn filed(&self) -> (usize, usize, usize) {
        let fields = self.by_field.values().flat_map(|v| v.values()).map(HashMap::len).sum();
        (self.all.len(), self.by_namespace.values().map(HashMap::len).sum(), fields)
    }

    /// Files a new watcher; its id and the receiving end of its queue.
    pub(super) fn add(
        &mut self,
        r: &Resource,
        namespace: Option<String>,
        sel: Selectors,
    ) -> (u64, mpsc::Receiver<Delivery>) {
        let (tx, rx) = mpsc::channel(WATCHER_QUEUE);
        self.next += 1;
        let id = self.next;
        let field = sel.fields.exact().and_then(|(f, v)| Some((r.selectable().iter().position(|s| *s == f)?, v)));
        let slot = match (field, &namespace) {
            (Some((i, v)), _) => Slot::Field(i, v.to_string()),
            (None, Some(ns)) => Slot::Namespace(ns.clone()),
            (None, None) => Slot::All,
        };
        let w = Watcher { namespace, sel, tx };
        match &slot {
            Slot::All => self.all.insert(id, w),
            Slot::Namespace(ns) => self.by_namespace.entry(ns.clone()).or_default().insert(id, w),
            Slot::Field(i, v) => self.by_field.entry(*i).or_default().entry(v.clone()).or_default().insert(id, w),
        };
        self.slots.insert(id, slot);
        (id, rx)
    }

    /// Unfiles watcher `id`; its queue ends after what it holds.
    pub(super) fn remove(&mut self, id: u64) {
        match self.slots.remove(&id) {
            None => {}
            Some(Slot::All) => {
                self.all.remove(&id);
            }
            Some(Slot::Namespace(ns)) => {
                if let Some(g) = self.by_namespace.get_mut(&ns) {
                    g.remove(&id);
                    if g.is_empty() {
                        self.by_namespace.remove(&ns);
                    }
                }
            }
            Some(Slot::Field(i, v)) => {
                if let Some(values) = self.by_field.get_mut(&i) {
                    if let Some(g) = values.get_mut(&v) {
                        g.remove(&id);
                        if g.is_empty() {
                            values.remove(&v);
                        }
                    }
                    if values.is_empty() {
                        self.by_field.remove(&i);
                    }
                }
            }
        }
    }

    /// Unfiles every watcher.
    pub(super) fn close_all(&mut self) {
        *self = Watchers { next: self.next, ..Default::default() };
    }

    /// Offers `e` to the watchers that may see it; drops those whose queue is full.
    pub(super) fn dispatch(&mut self, e: &Arc<Event>) {
        let mut dropped = Vec::new();
        let mut offer = |group: Option<&Group>| {
            for (id, w) in group.into_iter().flatten() {
                if let Some(seen) = sees(e.r, w.namespace.as_deref(), &w.sel, e) {
                    if w.tx.try_send((e.clone(), seen)).is_err() {
                        dropped.push(*id);
                    }
                }
            }
        };
        offer(Some(&self.all));
        offer(self.by_namespace.get(&e.object.namespace));
        for (i, values) in &self.by_field {
            let now = e.object.field(*i);
            offer(values.get(now));
            if let Some(before) = e.prev.as_ref().map(|p| p.field(*i)).filter(|b| *b != now) {
                offer(values.get(before));
            }
        }
        for id in dropped {
            if self.slots.contains_key(&id) {
                tracing::debug!(resource = e.r.plural, id, "a watcher that does not keep up is closed");
            }
            self.remove(id);
        }
    }
}

/// The cache has dropped a watcher and it has nothing left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// One watch on a cache: the objects it starts with (as ADDED events), then the events after
/// the revision it started at, then the end (the cache dropped it). Dropping it unfiles it.
pub struct Subscription {
    /// The state it starts with, when it started at "now".
    pub initial: Vec<Arc<Object>>,
    /// The revision it started at: it delivers the events after it.
    pub rev: i64,
    backlog: VecDeque<Delivery>,
    rx: mpsc::Receiver<Delivery>,
    cache: Arc<Cache>,
    id: u64,
}

impl Subscription {
    pub(super) fn new(
        initial: Vec<Arc<Object>>,
        rev: i64,
        backlog: Vec<Delivery>,
        rx: mpsc::Receiver<Delivery>,
        cache: Arc<Cache>,
        id: u64,
    ) -> Subscription {
        Subscription { initial, rev, backlog: backlog.into(), rx, cache, id }
    }

    /// The next event, waiting for it; None once the cache has dropped this watcher.
    pub async fn next(&mut self) -> Option<Delivery> {
        if let Some(d) = self.backlog.pop_front() {
            return Some(d);
        }
        loop {
            let d = self.rx.recv().await?;
            if d.0.rev > self.rev {
                return Some(d);
            }
        }
    }

    /// The next event if one is waiting: `Ok(None)` if none is, `Err(Closed)` once the cache
    /// has dropped this watcher and nothing is left.
    pub fn try_next(&mut self) -> Result<Option<Delivery>, Closed> {
        if let Some(d) = self.backlog.pop_front() {
            return Ok(Some(d));
        }
        loop {
            match self.rx.try_recv() {
                Ok(d) if d.0.rev <= self.rev => continue,
                Ok(d) => return Ok(Some(d)),
                Err(mpsc::error::TryRecvError::Empty) => return Ok(None),
                Err(mpsc::error::TryRecvError::Disconnected) => return Err(Closed),
            }
        }
    }

    /// The revision the cache has reached: every event up to it is already in this watcher's
    /// queue (or was sent), so a bookmark at it may follow what the queue holds.
    pub fn reached(&self) -> i64 {
        self.cache.rev()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.cache.forget(self.id);
    }
}
