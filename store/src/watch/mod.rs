//! The watch hub: every watcher of this member, fed from its own applied state.
//!
//! A watcher is in one of two groups:
//! - **synced**: it has received every matching event up to the hub's `published` revision (or
//!   starts in the future). Apply hands each new revision to [`Hub::publish`], which pushes it
//!   straight into the watchers' stream outboxes — never waiting: a full outbox demotes the
//!   watcher instead (etcd's victims).
//! - **unsynced**: it still needs revisions from `next` on. The sync loop ([`Hub::sync_once`])
//!   reads those from the MVCC history, outside the hub lock, delivers them, and moves the
//!   watcher to synced once it has reached `published`. A watcher whose outbox is full is skipped
//!   until its client reads; a watcher whose `next` revision has been compacted is canceled with
//!   `compact_revision` (the client resumes from there), never silently skipped.
//!
//! So apply never blocks on a watcher, a stalled stream costs only its own outbox (bounded by
//! [`OUTBOX_BYTES`]), and delivery per watcher is ordered, gap-free and without duplicates: a
//! watcher's next revision moves only forward, and only by the path (publish or sync) that owns
//! it at the time, under the hub lock.
//!
//! Events are encoded once per revision ([`wire`]); a watcher's response shares those bytes.
//!
//! Lock order: the hub lock may take the MVCC read lock (creating a watcher reads the current
//! revision); nothing holding the MVCC lock takes the hub lock (apply publishes after commit).

pub mod wire;

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use keel_proto::etcdserverpb::{watch_create_request::FilterType, ResponseHeader, WatchCreateRequest, WatchResponse};
use keel_proto::mvccpb::{event::EventType, Event, KeyValue};
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

use crate::error::Result;
use crate::mvcc::{Mvcc, ReadView, Revision, View};
use wire::Wire;

/// How many bytes of responses may wait in one stream's outbox before its watchers are demoted.
pub const OUTBOX_BYTES: usize = 4 << 20;
/// At most this many history entries are read per sync round (then the round ends at a revision
/// boundary and the watchers continue in the next one).
const SYNC_ENTRIES: usize = 10_000;
/// At most this many unsynced watchers are served per sync round (etcd's maxWatchersPerSync).
const SYNC_WATCHERS: usize = 512;
/// How often the sync loop runs when nothing wakes it.
const SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// etcd's answer to a client-chosen watch id already in use on the stream.
pub const ERR_DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";
/// etcd's answer to a range whose end is not after its start.
pub const ERR_EMPTY_RANGE: &str = "mvcc: watcher range is empty";

/// A stream's queue of encoded responses. The hub pushes without waiting; the gRPC response
/// stream drains it.
pub struct Outbox {
    /// None once the stream is closed: the response stream then ends after what is queued.
    tx: Mutex<Option<mpsc::UnboundedSender<Wire>>>,
    queued: AtomicUsize,
    /// Bytes that may wait before pushes are refused.
    limit: usize,
    room: Notify,
}

impl Outbox {
    /// Queues responses if they fit (or if `force`); all or nothing, so a revision is never split.
    fn push(&self, wires: Vec<Wire>, force: bool) -> bool {
        let n: usize = wires.iter().map(Wire::len).sum();
        let q = self.queued.load(Ordering::Acquire);
        if !force && q > 0 && q + n > self.limit {
            return false;
        }
        self.queued.fetch_add(n, Ordering::AcqRel);
        if let Some(tx) = &*self.tx.lock() {
            for w in wires {
                // A closed receiver means the stream is going away; its watchers are removed then.
                let _ = tx.send(w);
            }
        }
        true
    }

    fn has_room(&self) -> bool {
        self.queued.load(Ordering::Acquire) < self.limit
    }

    /// Waits until the outbox has room (back-pressure on a stream's requests).
    pub async fn room(&self) {
        loop {
            let notified = self.room.notified();
            if self.has_room() {
                return;
            }
            notified.await;
        }
    }
}

/// The receiving end of a stream's outbox: the gRPC response stream. Dropping it (the client went
/// away) closes the stream's watchers.
pub struct Responses {
    rx: mpsc::UnboundedReceiver<Wire>,
    out: Arc<Outbox>,
    hub: Arc<Hub>,
    stream: u64,
}

impl Stream for Responses {
    type Item = Wire;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Wire>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(w)) => {
                self.out.queued.fetch_sub(w.len(), Ordering::AcqRel);
                self.out.room.notify_waiters();
                self.hub.wake.notify_one();
                Poll::Ready(Some(w))
            }
            other => other,
        }
    }
}

impl Drop for Responses {
    fn drop(&mut self) {
        self.hub.close_stream(self.stream);
    }
}

/// Which keys a watcher covers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Span {
    Key,
    /// `[key, end)`.
    Range(Bytes),
    /// Every key `>= key`.
    From,
}

struct Watcher {
    stream: u64,
    id: i64,
    key: Bytes,
    span: Span,
    /// The next revision this watcher needs.
    next: i64,
    synced: bool,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    progress_notify: bool,
    fragment: bool,
    /// No events sent since the last periodic progress tick (etcd notifies only quiet watchers).
    quiet: bool,
}

impl Watcher {
    fn covers(&self, k: &[u8]) -> bool {
        match &self.span {
            Span::Key => k == self.key.as_ref(),
            Span::Range(end) => k >= self.key.as_ref() && k < end.as_ref(),
            Span::From => k >= self.key.as_ref(),
        }
    }

    fn wants(&self, e: &Event) -> bool {
        let put = e.r#type == EventType::Put as i32;
        !(put && self.no_put || !put && self.no_delete) && e.kv.as_ref().is_some_and(|kv| self.covers(&kv.key))
    }
}

struct StreamState {
    out: Arc<Outbox>,
    /// Client watch id -> watcher; None for a watcher canceled by compaction, whose id stays
    /// taken until the client cancels it (as in etcd).
    ids: HashMap<i64, Option<u64>>,
    next_auto_id: i64,
    unsynced: usize,
    /// A `progress_request` waiting for every watcher of the stream to catch up.
    progress_pending: bool,
}

/// Synced watchers, found by key.
#[derive(Default)]
struct Synced {
    by_key: HashMap<Bytes, HashSet<u64>>,
    /// Range and from-key watchers by start key.
    ranges: BTreeMap<Bytes, HashSet<u64>>,
}

impl Synced {
    fn insert(&mut self, wk: u64, w: &Watcher) {
        match w.span {
            Span::Key => self.by_key.entry(w.key.clone()).or_default().insert(wk),
            _ => self.ranges.entry(w.key.clone()).or_default().insert(wk),
        };
    }

    fn remove(&mut self, wk: u64, w: &Watcher) {
        let emptied = |set: &mut HashSet<u64>| {
            set.remove(&wk);
            set.is_empty()
        };
        match w.span {
            Span::Key => {
                if self.by_key.get_mut(&w.key).is_some_and(emptied) {
                    self.by_key.remove(&w.key);
                }
            }
            _ => {
                if self.ranges.get_mut(&w.key).is_some_and(emptied) {
                    self.ranges.remove(&w.key);
                }
            }
        }
    }

    /// Every synced watcher whose span may cover `k` (range watchers still need `covers`).
    fn candidates<'a>(&'a self, k: &'a [u8]) -> impl Iterator<Item = u64> + 'a {
        let exact = self.by_key.get(k).into_iter().flatten().copied();
        let ranges =
            self.ranges.range::<[u8], _>((Bound::Unbounded, Bound::Included(k))).flat_map(|(_, s)| s.iter().copied());
        exact.chain(ranges)
    }
}

struct Inner {
    /// The newest revision handed to the synced watchers.
    published: i64,
    watchers: HashMap<u64, Watcher>,
    synced: Synced,
    unsynced: BTreeSet<u64>,
    streams: HashMap<u64, StreamState>,
    next_watcher: u64,
    next_stream: u64,
}

impl Inner {
    /// Moves a watcher into the synced or the unsynced group, keeping the synced index, the
    /// unsynced set and its stream's unsynced count in step.
    fn set_synced(&mut self, wk: u64, to: bool) {
        let Inner { watchers, synced, unsynced, streams, .. } = self;
        let Some(w) = watchers.get_mut(&wk) else { return };
        if w.synced == to {
            return;
        }
        w.synced = to;
        let count = streams.get_mut(&w.stream).map(|s| &mut s.unsynced);
        if to {
            synced.insert(wk, w);
            unsynced.remove(&wk);
            count.into_iter().for_each(|c| *c -= 1);
        } else {
            synced.remove(wk, w);
            unsynced.insert(wk);
            count.into_iter().for_each(|c| *c += 1);
        }
    }
}

/// A revision's events with their encodings, made at most once each.
struct Encoded<'a> {
    events: &'a [Event],
    plain: Vec<OnceCell<Bytes>>,
    with_prev: Vec<OnceCell<Bytes>>,
}

impl<'a> Encoded<'a> {
    fn new(events: &'a [Event]) -> Self {
        let n = events.len();
        Self { events, plain: vec![OnceCell::new(); n], with_prev: vec![OnceCell::new(); n] }
    }

    fn event(&self, i: usize, prev: bool) -> Bytes {
        let e = &self.events[i];
        if prev && e.prev_kv.is_some() {
            self.with_prev[i].get_or_init(|| wire::event_field(e)).clone()
        } else {
            self.plain[i].get_or_init(|| wire::event_field(&Event { prev_kv: None, ..e.clone() })).clone()
        }
    }
}

/// The watch hub of one member. Share it behind an `Arc`.
pub struct Hub {
    mvcc: Arc<Mvcc>,
    inner: Mutex<Inner>,
    /// Watchers that asked for `prev_kv`: apply looks up previous values only when there are any.
    prev_watchers: AtomicUsize,
    cluster_id: AtomicU64,
    member_id: AtomicU64,
    term: AtomicU64,
    /// Responses larger than this are split for watchers that asked for `fragment`.
    max_bytes: AtomicUsize,
    /// Outbox size for new streams ([`OUTBOX_BYTES`] unless a test shrinks it).
    outbox_bytes: AtomicUsize,
    wake: Notify,
    /// Set when the member shuts down: streams end, new ones end at once.
    closed: AtomicBool,
}

/// What a watcher is doing, for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatcherState {
    /// Receives new revisions as they are applied.
    Synced,
    /// Catching up from history from this revision on.
    Unsynced(i64),
}

/// The answer to a create request that makes no watcher: created and canceled at once.
fn refusal(reason: &str, watch_id: i64) -> WatchResponse {
    WatchResponse { watch_id, created: true, canceled: true, cancel_reason: reason.to_string(), ..Default::default() }
}

impl Hub {
    pub fn new(mvcc: Arc<Mvcc>) -> Self {
        let published = mvcc.current_rev();
        Self {
            mvcc,
            inner: Mutex::new(Inner {
                published,
                watchers: HashMap::new(),
                synced: Synced::default(),
                unsynced: BTreeSet::new(),
                streams: HashMap::new(),
                next_watcher: 0,
                next_stream: 0,
            }),
            prev_watchers: AtomicUsize::new(0),
            cluster_id: AtomicU64::new(0),
            member_id: AtomicU64::new(0),
            term: AtomicU64::new(0),
            max_bytes: AtomicUsize::new(usize::MAX),
            outbox_bytes: AtomicUsize::new(OUTBOX_BYTES),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// Sets what every response header carries, and the fragmenting threshold.
    pub fn configure(&self, cluster_id: u64, member_id: u64, max_bytes: usize) {
        self.cluster_id.store(cluster_id, Ordering::Relaxed);
        self.member_id.store(member_id, Ordering::Relaxed);
        self.max_bytes.store(max_bytes, Ordering::Relaxed);
    }

    /// Sets the outbox size of streams opened from now on.
    pub fn set_outbox_bytes(&self, bytes: usize) {
        self.outbox_bytes.store(bytes, Ordering::Relaxed);
    }

    pub fn set_term(&self, term: u64) {
        self.term.store(term, Ordering::Relaxed);
    }

    /// Whether apply should collect previous values (some watcher wants `prev_kv`).
    pub fn wants_prev(&self) -> bool {
        self.prev_watchers.load(Ordering::Acquire) > 0
    }

    fn header(&self, rev: i64) -> ResponseHeader {
        ResponseHeader {
            cluster_id: self.cluster_id.load(Ordering::Relaxed),
            member_id: self.member_id.load(Ordering::Relaxed),
            revision: rev,
            raft_term: self.term.load(Ordering::Relaxed),
        }
    }

    fn control(&self, rev: i64, r: WatchResponse) -> Wire {
        Wire::message(&WatchResponse { header: Some(self.header(rev)), ..r })
    }

    /// Opens a watch stream: its id and the responses to send to the client.
    pub fn open_stream(self: &Arc<Self>) -> (u64, Arc<Outbox>, Responses) {
        let (tx, rx) = mpsc::unbounded_channel();
        let out = Arc::new(Outbox {
            tx: Mutex::new(Some(tx)),
            queued: AtomicUsize::new(0),
            limit: self.outbox_bytes.load(Ordering::Relaxed),
            room: Notify::new(),
        });
        let mut g = self.inner.lock();
        if self.closed.load(Ordering::Acquire) {
            out.tx.lock().take();
        }
        let id = g.next_stream;
        g.next_stream += 1;
        g.streams.insert(
            id,
            StreamState {
                out: out.clone(),
                ids: HashMap::new(),
                next_auto_id: 0,
                unsynced: 0,
                progress_pending: false,
            },
        );
        (id, out.clone(), Responses { rx, out, hub: self.clone(), stream: id })
    }

    /// Ends every stream (member shutdown): each response stream finishes after what is queued,
    /// and streams opened from now on end at once.
    pub fn close_all(&self) {
        self.closed.store(true, Ordering::Release);
        let streams: Vec<u64> = self.inner.lock().streams.keys().copied().collect();
        for s in streams {
            self.close_stream(s);
        }
    }

    /// Removes a stream and all its watchers.
    pub fn close_stream(&self, stream: u64) {
        let mut g = self.inner.lock();
        if let Some(s) = g.streams.remove(&stream) {
            s.out.tx.lock().take();
            for wk in s.ids.into_values().flatten() {
                self.remove(&mut g, wk);
            }
        }
    }

    fn remove(&self, g: &mut Inner, wk: u64) -> Option<Watcher> {
        let w = g.watchers.remove(&wk)?;
        if w.synced {
            g.synced.remove(wk, &w);
        } else {
            g.unsynced.remove(&wk);
            if let Some(s) = g.streams.get_mut(&w.stream) {
                s.unsynced -= 1;
            }
        }
        if w.prev_kv {
            self.prev_watchers.fetch_sub(1, Ordering::AcqRel);
        }
        Some(w)
    }

    /// Creates a watcher as etcd's `WatchCreateRequest` asks, answering `created` (or the refusal)
    /// on the stream before any of its events.
    pub fn create(&self, stream: u64, req: &WatchCreateRequest) {
        let mut g = self.inner.lock();
        let cur = self.mvcc.current_rev();
        let Some(s) = g.streams.get_mut(&stream) else { return };
        let out = s.out.clone();
        let span = match req.range_end.as_ref() {
            [] => Span::Key,
            [0] => Span::From,
            end => Span::Range(Bytes::copy_from_slice(end)),
        };
        if matches!(&span, Span::Range(end) if req.key.as_ref() >= end.as_ref()) {
            out.push(vec![self.control(cur, refusal(ERR_EMPTY_RANGE, -1))], true);
            return;
        }
        let id = if req.watch_id != 0 {
            if s.ids.contains_key(&req.watch_id) {
                out.push(vec![self.control(cur, refusal(ERR_DUPLICATE_ID, -1))], true);
                return;
            }
            req.watch_id
        } else {
            while s.ids.contains_key(&s.next_auto_id) {
                s.next_auto_id += 1;
            }
            s.next_auto_id += 1;
            s.next_auto_id - 1
        };
        let start = if req.start_revision == 0 { cur + 1 } else { req.start_revision };
        let filters = |f: FilterType| req.filters.contains(&(f as i32));
        let wk = g.next_watcher;
        g.next_watcher += 1;
        let start_synced = start > g.published;
        // The planted bug (etcd #20221) starts every watcher that joins the synced group at the
        // next revision to publish, lowering a start in the future.
        let next = if start_synced && crate::plant::on("future-watch-old-events") { g.published + 1 } else { start };
        let w = Watcher {
            stream,
            id,
            key: Bytes::copy_from_slice(&req.key),
            span,
            next,
            synced: false,
            no_put: filters(FilterType::Noput),
            no_delete: filters(FilterType::Nodelete),
            prev_kv: req.prev_kv,
            progress_notify: req.progress_notify,
            fragment: req.fragment,
            quiet: true,
        };
        out.push(vec![self.control(cur, WatchResponse { watch_id: id, created: true, ..Default::default() })], true);
        if w.prev_kv {
            self.prev_watchers.fetch_add(1, Ordering::AcqRel);
        }
        let s = g.streams.get_mut(&stream).expect("stream checked above");
        s.ids.insert(id, Some(wk));
        s.unsynced += 1;
        g.unsynced.insert(wk);
        g.watchers.insert(wk, w);
        if start_synced {
            g.set_synced(wk, true);
        } else {
            self.wake.notify_one();
        }
    }

    /// Refuses a create request without making a watcher: answers it created and canceled at
    /// once, with `reason` (etcd's answer to a watch the client may not read).
    pub fn refuse(&self, stream: u64, req: &WatchCreateRequest, reason: &str) {
        let cur = self.mvcc.current_rev();
        let out = match self.inner.lock().streams.get(&stream) {
            Some(s) => s.out.clone(),
            None => return,
        };
        out.push(vec![self.control(cur, refusal(reason, req.watch_id))], true);
    }

    /// Cancels a watcher by its client id; answers `canceled` if it existed.
    pub fn cancel(&self, stream: u64, id: i64) {
        let mut g = self.inner.lock();
        let Some(wk) = g.streams.get_mut(&stream).and_then(|s| s.ids.remove(&id)) else { return };
        if let Some(wk) = wk {
            self.remove(&mut g, wk);
        }
        let cur = self.mvcc.current_rev();
        if let Some(s) = g.streams.get(&stream) {
            s.out.push(
                vec![self.control(cur, WatchResponse { watch_id: id, canceled: true, ..Default::default() })],
                true,
            );
        }
        self.flush_progress(&mut g, stream);
    }

    /// A client's `progress_request`: answered with the published revision as soon as every
    /// watcher of the stream is synced (at once if they already are).
    pub fn progress_request(&self, stream: u64) {
        let mut g = self.inner.lock();
        if let Some(s) = g.streams.get_mut(&stream) {
            s.progress_pending = true;
        }
        self.flush_progress(&mut g, stream);
    }

    /// Sends a stream's pending progress response if all its watchers are synced.
    fn flush_progress(&self, g: &mut Inner, stream: u64) {
        let published = g.published;
        let Some(s) = g.streams.get_mut(&stream) else { return };
        if s.progress_pending
            && s.unsynced == 0
            && s.out.push(vec![self.control(published, WatchResponse { watch_id: -1, ..Default::default() })], false)
        {
            s.progress_pending = false;
        }
    }

    /// Hands newly applied revisions to the synced watchers.
    pub fn publish(&self, revisions: &[Revision]) {
        if revisions.is_empty() {
            return;
        }
        let mut g = self.inner.lock();
        for r in revisions {
            if !(crate::plant::on("drop-watch-event") && r.rev % 10 == 0) {
                self.publish_one(&mut g, r);
            }
            g.published = r.rev;
        }
    }

    fn publish_one(&self, g: &mut Inner, r: &Revision) {
        // Ordered by watcher, so delivery order is reproducible.
        let mut hits: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, e) in r.events.iter().enumerate() {
            let Some(kv) = &e.kv else { continue };
            for wk in g.synced.candidates(&kv.key) {
                let w = &g.watchers[&wk];
                if r.rev >= w.next && w.wants(e) {
                    hits.entry(wk).or_default().push(i);
                }
            }
        }
        if hits.is_empty() {
            return;
        }
        let (header, enc) = (wire::header_field(&self.header(r.rev)), Encoded::new(&r.events));
        for (wk, idx) in hits {
            let w = &g.watchers[&wk];
            let delivered = (!w.prev_kv || r.prev_known) && {
                let parts = idx.iter().map(|&i| enc.event(i, w.prev_kv)).collect();
                let wires = self.split(w, &header, parts);
                g.streams[&w.stream].out.push(wires, false)
            };
            if delivered {
                g.watchers.get_mut(&wk).expect("present").quiet = false;
            } else {
                self.demote(g, wk, r.rev);
            }
        }
    }

    /// Builds a watcher's responses from encoded events: one response, or fragments of at most
    /// `max_bytes` (but at least one event) each when the watcher asked for `fragment`.
    fn split(&self, w: &Watcher, header: &Bytes, events: Vec<Bytes>) -> Vec<Wire> {
        let max = self.max_bytes.load(Ordering::Relaxed);
        let total = Wire::events(header, w.id, false).len() + events.iter().map(Bytes::len).sum::<usize>();
        let fragment = w.fragment && events.len() > 1 && total >= max;
        // etcd's rule: a fragment takes events while it stays below the limit, and at least one.
        let base = Wire::events(header, w.id, true).len();
        let mut groups: Vec<Vec<Bytes>> = vec![Vec::new()];
        let mut size = base;
        for e in events {
            let last = groups.last_mut().expect("one group at least");
            if fragment && !last.is_empty() && size + e.len() >= max {
                groups.push(Vec::new());
                size = base;
            }
            size += e.len();
            groups.last_mut().expect("one group at least").push(e);
        }
        // Every fragment but the last carries the flag.
        let n = groups.len();
        groups
            .into_iter()
            .enumerate()
            .map(|(i, evs)| {
                let mut wire = Wire::events(header, w.id, i + 1 < n);
                evs.into_iter().for_each(|e| wire.push(e));
                wire
            })
            .collect()
    }

    /// Moves a synced watcher to the unsynced group, to continue from `next` via history.
    fn demote(&self, g: &mut Inner, wk: u64, next: i64) {
        let Some(w) = g.watchers.get_mut(&wk) else { return };
        if !w.synced {
            return;
        }
        w.next = next;
        g.set_synced(wk, false);
        self.wake.notify_one();
    }

    /// Runs the sync loop until the hub is dropped by everyone else.
    pub async fn run(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(SYNC_INTERVAL) => {}
            }
            loop {
                match self.sync_once() {
                    Ok(true) => tokio::task::yield_now().await,
                    Ok(false) => break,
                    Err(e) => {
                        tracing::error!("watch sync failed: {e}");
                        break;
                    }
                }
            }
        }
    }

    /// One sync round: serves up to [`SYNC_WATCHERS`] unsynced watchers with room in their
    /// outbox from the history. Returns whether another round has work right away.
    pub fn sync_once(&self) -> Result<bool> {
        // 1. Who to serve, and from which revision.
        let cands: Vec<(u64, i64, bool)> = {
            let g = self.inner.lock();
            g.unsynced
                .iter()
                .filter_map(|wk| {
                    let w = &g.watchers[wk];
                    g.streams[&w.stream].out.has_room().then_some((*wk, w.next, w.prev_kv))
                })
                .take(SYNC_WATCHERS)
                .collect()
        };
        if cands.is_empty() {
            return Ok(false);
        }
        let mut more = cands.len() == SYNC_WATCHERS;
        // 2. Read the history they need, outside the hub lock.
        let want_prev = cands.iter().any(|c| c.2);
        let (revs, end, compact) = {
            let view = self.mvcc.read();
            let compact = view.compact_rev();
            let from = cands.iter().map(|c| c.1).filter(|n| *n >= compact).min().unwrap_or(i64::MAX);
            let (revs, end) =
                if from <= view.rev() { read_history(&view, from, want_prev)? } else { (vec![], view.rev()) };
            (revs, end, compact)
        };
        // 3. Deliver under the hub lock; each event is encoded once for all the watchers.
        let encoded: Vec<(i64, Encoded)> = revs.iter().map(|r| (r.rev, Encoded::new(&r.events))).collect();
        let mut g = self.inner.lock();
        let mut touched = HashSet::new();
        for (wk, next, _) in cands {
            let Some(w) = g.watchers.get(&wk) else { continue };
            if w.synced || w.next != next {
                continue;
            }
            touched.insert(w.stream);
            if next < compact {
                let (stream, id) = (w.stream, w.id);
                let resp = self.control(
                    0,
                    WatchResponse { watch_id: id, canceled: true, compact_revision: compact, ..Default::default() },
                );
                if g.streams[&stream].out.push(vec![resp], false) {
                    self.remove(&mut g, wk);
                    if let Some(s) = g.streams.get_mut(&stream) {
                        s.ids.insert(id, None);
                    }
                }
                continue;
            }
            let mut wires = Vec::new();
            if next <= end {
                wires = self.catch_up_wires(w, &encoded, end);
            }
            let sent = !wires.is_empty();
            if sent && !g.streams[&w.stream].out.push(wires, false) {
                continue;
            }
            let published = g.published;
            let new_next = (end + 1).max(next);
            let w = g.watchers.get_mut(&wk).expect("present");
            w.next = new_next;
            w.quiet &= !sent;
            if new_next == published + 1 {
                g.set_synced(wk, true);
            } else {
                more |= new_next <= published;
            }
        }
        for stream in touched {
            self.flush_progress(&mut g, stream);
        }
        Ok(more)
    }

    /// A catching-up watcher's responses for history `revs` (ending at `end`): whole revisions
    /// per response, a new response when one grows past `max_bytes`.
    fn catch_up_wires(&self, w: &Watcher, revs: &[(i64, Encoded)], end: i64) -> Vec<Wire> {
        let max = self.max_bytes.load(Ordering::Relaxed);
        let mut groups: Vec<(i64, Vec<Bytes>)> = Vec::new();
        let mut size = 0;
        for (rev, enc) in revs.iter().filter(|(rev, _)| *rev >= w.next) {
            let evs: Vec<Bytes> =
                (0..enc.events.len()).filter(|&i| w.wants(&enc.events[i])).map(|i| enc.event(i, w.prev_kv)).collect();
            if evs.is_empty() {
                continue;
            }
            let n: usize = evs.iter().map(Bytes::len).sum();
            match groups.last_mut() {
                Some((last, g)) if size + n <= max => {
                    *last = *rev;
                    g.extend(evs);
                    size += n;
                }
                _ => {
                    groups.push((*rev, evs));
                    size = n;
                }
            }
        }
        let last = groups.len().saturating_sub(1);
        groups
            .into_iter()
            .enumerate()
            .flat_map(|(i, (rev, evs))| {
                let rev = if i == last { end } else { rev };
                self.split(w, &wire::header_field(&self.header(rev)), evs)
            })
            .collect()
    }

    /// Sends a progress notification to every quiet synced watcher that asked for them (the periodic
    /// `--experimental-watch-progress-notify-interval` tick). A full outbox skips its turn.
    pub fn notify_progress(&self) {
        let mut g = self.inner.lock();
        let Inner { watchers, streams, published, .. } = &mut *g;
        for w in watchers.values_mut().filter(|w| w.progress_notify) {
            // As etcd: only a synced watcher that was sent nothing since the last tick.
            if w.synced && w.quiet {
                let resp = self.control(*published, WatchResponse { watch_id: w.id, ..Default::default() });
                streams[&w.stream].out.push(vec![resp], false);
            }
            w.quiet = true;
        }
    }

    /// After a snapshot replaced the store underneath: every synced watcher continues from
    /// history, from the first revision it has not seen: the one after the last published, or
    /// its start revision if that is later (a watcher created on a future revision that the
    /// snapshot reached or passed). One whose start is still ahead of the store stays synced.
    pub fn reset(&self) {
        let mut g = self.inner.lock();
        let next = g.published + 1;
        let current = self.mvcc.current_rev();
        let synced: Vec<u64> =
            g.watchers.iter().filter(|(_, w)| w.synced && w.next <= current).map(|(k, _)| *k).collect();
        for wk in synced {
            let mut from = g.watchers[&wk].next.max(next);
            if crate::plant::on("restore-resumes-stale") {
                from = g.watchers[&wk].next;
            } else if crate::plant::on("restore-repeats-last") {
                from = g.watchers[&wk].next.max(next - 1);
            }
            self.demote(&mut g, wk, from);
        }
        g.published = current;
    }

    /// A watcher's state by stream and client id.
    pub fn state(&self, stream: u64, id: i64) -> Option<WatcherState> {
        let g = self.inner.lock();
        let wk = g.streams.get(&stream)?.ids.get(&id)?.as_ref()?;
        let w = &g.watchers[wk];
        Some(if w.synced { WatcherState::Synced } else { WatcherState::Unsynced(w.next) })
    }

    /// Watchers and streams open (diagnostics, memory measurement).
    pub fn counts(&self) -> (usize, usize) {
        let g = self.inner.lock();
        (g.watchers.len(), g.streams.len())
    }
}

/// Reads the history from revision `from` on: whole revisions, at most about [`SYNC_ENTRIES`]
/// entries. Returns the revisions with events and the last revision covered.
fn read_history(v: &ReadView, from: i64, want_prev: bool) -> Result<(Vec<Revision>, i64)> {
    let mut revs: Vec<Revision> = Vec::new();
    let mut entries = 0;
    let mut end = v.rev();
    v.history(from, &mut |rev, tomb, kv| {
        let r#type = if tomb { EventType::Delete } else { EventType::Put } as i32;
        let kv = KeyValue { mod_revision: rev, ..kv };
        let ev = Event { r#type, kv: Some(kv), prev_kv: None };
        match revs.last_mut() {
            Some(r) if r.rev == rev => r.events.push(ev),
            _ => {
                if entries >= SYNC_ENTRIES {
                    end = rev - 1;
                    return false;
                }
                revs.push(Revision { rev, events: vec![ev], prev_known: want_prev });
            }
        }
        entries += 1;
        true
    })?;
    if want_prev {
        for r in &mut revs {
            for e in &mut r.events {
                let kv = e.kv.as_ref().expect("history events carry a kv");
                if e.r#type == EventType::Put as i32 && kv.version == 1 {
                    continue;
                }
                if let Some(f) = v.index().get(&kv.key, r.rev - 1) {
                    if r.rev > v.compact_rev() {
                        e.prev_kv = Some(v.load(f.modified)?);
                    }
                }
            }
        }
    }
    Ok((revs, end))
}
