//! MVCC: etcd's revisioned keyspace over the storage engine.
//!
//! The store owns the history (every revision of every key, `keys::rev_key`), the in-memory
//! [`index::Index`] over it, the current revision and the compacted revision. Invariants:
//! - the revision starts at 1 on a new store and grows by one per write that changes something;
//!   reads, failed compares and no-op deletes do not move it;
//! - all changes of one write share its main revision, ordered by `sub`;
//! - a read at revision `r` sees exactly the writes with main revision `<= r`;
//! - below the compacted revision nothing can be read; at and above it, history is complete.
//!
//! Concurrency: [`Mvcc::read`] takes the state lock shared; [`Mvcc::apply`] takes it exclusively
//! for a whole applied batch, including the engine write, and [`Mvcc::replace`] for a whole
//! snapshot install, so a reader sees the index and the engine rows of the same applied state,
//! never a revision whose batch is not yet in the engine. The read path's whole-store reads
//! ([`Mvcc::range`], [`Mvcc::hash_kv`]) hold it only to walk the index and take an engine
//! snapshot, and read values from that snapshot once it is released. An applied batch is
//! written without sync: the Raft log is the durable record, replayed after a crash. Where this
//! lock stands among the store's others: the crate's docs (`lib.rs`).

pub mod index;
pub mod keys;
pub mod kv;
pub mod lease;
pub mod registry;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use keel_proto::mvccpb::{event::EventType, Event, KeyValue};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use prost::Message;

use crate::engine::{Batch, Engine, Reads};
use crate::error::{Error, Result};
use index::Index;
use keel_auth::AuthState;
use keys::meta::{AUTH, COMPACT as META_COMPACT, REGISTRY, REV as META_REV};
use keys::Rev;
use lease::{LeaseRecord, LeaseTable};
use registry::Registry;

struct State {
    index: Index,
    leases: LeaseTable,
    registry: Registry,
    /// Users, roles and whether auth is on (`crate::auth`).
    auth: AuthState,
    /// The current (newest) revision.
    rev: i64,
    /// The compacted revision; -1 before the first compaction (as etcd).
    compact_rev: i64,
}

/// Keys of a Range walked in the index per hold of the state lock ([`Mvcc::range`]).
pub const RANGE_PIECE: usize = 10_000;

/// The MVCC store. Share it behind an `Arc`.
pub struct Mvcc {
    engine: Arc<dyn Engine>,
    state: RwLock<State>,
}

/// A consistent view of the store at one revision.
pub trait View {
    fn index(&self) -> &Index;
    /// The revision this view reads at.
    fn rev(&self) -> i64;
    fn compact_rev(&self) -> i64;
    /// The stored value of a live (non-tombstone) revision.
    fn load(&self, rev: Rev) -> Result<KeyValue>;
    fn leases(&self) -> &LeaseTable;
}

/// The changes of one revision, for the watch hub: events in `sub` order. Each event's
/// `prev_kv` is filled (when the key had a value before) only if `prev_known`.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    pub rev: i64,
    pub events: Vec<Event>,
    pub prev_known: bool,
}

/// The stored value of a live revision, read from `r` (the engine, or a snapshot of it).
pub fn load_from(r: &dyn Reads, rev: Rev) -> Result<KeyValue> {
    decode_kv(rev, r.get(&keys::rev_key(rev, false))?)
}

fn decode_kv(rev: Rev, bytes: Option<Vec<u8>>) -> Result<KeyValue> {
    let bytes =
        bytes.ok_or_else(|| Error::Corrupt(format!("revision {}.{} is indexed but not stored", rev.main, rev.sub)))?;
    Ok(KeyValue::decode(bytes.as_slice())?)
}

impl Mvcc {
    /// Opens the store on `engine`, rebuilding the index from the stored history.
    pub fn open(engine: Arc<dyn Engine>) -> Result<Self> {
        let state = load(&*engine)?;
        Ok(Self { engine, state: RwLock::new(state) })
    }

    /// A read view at the current revision. Holds the state lock shared until dropped.
    pub fn read(&self) -> ReadView<'_> {
        ReadView { state: self.state.read(), engine: &*self.engine }
    }

    /// The current revision.
    pub fn current_rev(&self) -> i64 {
        self.state.read().rev
    }

    /// The compacted revision (-1 if never compacted).
    pub fn compact_rev(&self) -> i64 {
        self.state.read().compact_rev
    }

    /// Starts applying a batch of writes. Readers wait until the batch is committed or dropped.
    /// With `want_prev`, every event carries the key's previous value (for `prev_kv` watchers).
    pub fn apply(&self, want_prev: bool) -> ApplyBatch<'_> {
        ApplyBatch {
            state: self.state.write(),
            engine: &*self.engine,
            batch: Batch::default(),
            overlay: HashMap::new(),
            want_prev,
            revisions: Vec::new(),
            registry_changed: false,
            auth_changed: false,
        }
    }

    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// etcd's HashKV (see [`ReadView::hash_kv`]), read from an engine snapshot taken under the
    /// state lock: applies go on while the history is hashed.
    pub fn hash_kv(&self, rev: i64) -> Result<HashKv> {
        let (at, compact_rev, current, snapshot) = {
            let v = self.read();
            (v.hash_kv_at(rev)?, v.compact_rev(), v.rev(), v.engine_snapshot())
        };
        Ok(HashKv { hash: hash_history(&*snapshot, at)?, compact_rev, rev: current })
    }

    /// Range as [`kv::range`] answers it, holding the state lock only to walk the index, a
    /// [`RANGE_PIECE`] of keys at a time: the values are loaded afterwards from an engine
    /// snapshot taken with the first piece, while applies go on.
    pub fn range(&self, r: &keel_proto::etcdserverpb::RangeRequest) -> Result<keel_proto::etcdserverpb::RangeResponse> {
        self.range_in_pieces(r, RANGE_PIECE, &mut || {})
    }

    /// [`Mvcc::range`] with pieces of `piece` keys, calling `between` between them (tests apply
    /// writes there).
    fn range_in_pieces(
        &self,
        r: &keel_proto::etcdserverpb::RangeRequest,
        piece: usize,
        between: &mut dyn FnMut(),
    ) -> Result<keel_proto::etcdserverpb::RangeResponse> {
        let (mut planned, snapshot, mut more) = {
            let v = self.read();
            let mut planned = kv::plan(&v, r)?;
            let more = planned.visit(&v, r, piece)?;
            (planned, v.engine_snapshot(), more)
        };
        while more {
            between();
            more = planned.visit(&self.read(), r, piece)?;
        }
        kv::load(planned, r, |rev| load_from(&*snapshot, rev))
    }

    /// Replaces every state-machine pair with `pairs` (a snapshot being installed; a later pair
    /// wins over an earlier one with the same key) as one step readers cannot see halfway: the
    /// engine writes and the index rebuilt from them all happen under the state lock, so a reader
    /// sees the old rows through the old index or the new through the new (whole-state readers
    /// take their engine snapshots under the lock too: [`Mvcc::engine_snapshot`]).
    ///
    /// The pairs are written in batches of about [`REPLACE_BATCH_BYTES`], not held whole: the
    /// first batch clears the state and writes `marker`, the last (synced) removes it, so a crash
    /// in between leaves the marker for start-up to finish the job. On an error the engine may
    /// hold part of the new data under the old index; the caller must stop.
    pub fn replace(
        &self,
        pairs: impl IntoIterator<Item = Result<crate::engine::Pair>>,
        marker: crate::engine::Pair,
    ) -> Result<()> {
        let mut state = self.state.write();
        let mut batch = Batch::default();
        for p in keys::STATE_MACHINE {
            batch.delete_range(vec![p], keys::prefix_end(p));
        }
        let marker_key = marker.0.clone();
        batch.put(marker.0, marker.1);
        let mut bytes = 0;
        for pair in pairs {
            let (k, v) = pair?;
            bytes += k.len() + v.len();
            batch.put(k, v);
            if bytes >= REPLACE_BATCH_BYTES {
                self.engine.write(std::mem::take(&mut batch), false)?;
                bytes = 0;
            }
        }
        batch.delete(marker_key);
        self.engine.write(batch, true)?;
        *state = load(&*self.engine)?;
        Ok(())
    }

    /// A point-in-time view of the whole engine, taken under the state lock so that it never
    /// falls inside a [`Mvcc::replace`]; it stays valid after the lock is released.
    pub fn engine_snapshot(&self) -> Arc<dyn Reads> {
        self.read().engine_snapshot()
    }
}

/// Bytes of pairs [`Mvcc::replace`] writes per engine batch.
pub const REPLACE_BATCH_BYTES: usize = 16 << 20;

/// Reads the whole in-memory state (index, leases, registry, auth, revisions) from `engine`.
fn load(engine: &dyn Engine) -> Result<State> {
    let mut index = Index::default();
    let mut leases = LeaseTable::default();
    let mut last_rev = 1;
    let mut err = None;
    engine.for_each(&[keys::HISTORY], &keys::prefix_end(keys::HISTORY), &mut |k, v| {
        let mut step = || -> Result<()> {
            let (rev, tomb) = keys::decode_rev_key(k)?;
            let kv = KeyValue::decode(v)?;
            if tomb {
                if crate::plant::on("restore-skips-tombstone") {
                    index.tombstone(&kv.key, rev);
                } else {
                    index.restore_tombstone(&kv.key, rev);
                }
                leases.set_key(&kv.key, 0);
            } else {
                index.restore_put(&kv.key, rev, kv.create_revision, kv.version);
                leases.set_key(&kv.key, kv.lease);
            }
            last_rev = rev.main;
            Ok(())
        };
        match step() {
            Ok(()) => true,
            Err(e) => {
                err = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    for (k, v) in engine.scan(&[keys::LEASE], &keys::prefix_end(keys::LEASE))? {
        let id = i64::from_be_bytes(
            k.get(1..9)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| Error::Corrupt(format!("bad lease key {k:?}")))?,
        );
        leases.insert(id, bincode::deserialize::<LeaseRecord>(&v)?);
    }
    leases.attach_all();
    let read_i64 = |name: &str| -> Result<Option<i64>> {
        match engine.get(&keys::sm_meta(name))? {
            None => Ok(None),
            Some(b) => Ok(Some(i64::from_be_bytes(
                b.as_slice().try_into().map_err(|_| Error::Corrupt(format!("bad meta {name}")))?,
            ))),
        }
    };
    let mut rev = read_i64(META_REV)?.unwrap_or(1).max(last_rev);
    if crate::plant::on("compact-forgets-revision") {
        rev = last_rev;
    }
    let compact_rev = read_i64(META_COMPACT)?.unwrap_or(-1);
    let registry = Registry::load(engine)?;
    let auth = match engine.get(&keys::sm_meta(AUTH))? {
        None => AuthState::new(),
        Some(b) => bincode::deserialize(&b)?,
    };
    Ok(State { index, leases, registry, auth, rev, compact_rev })
}

/// A read-only view at the current revision.
pub struct ReadView<'a> {
    state: RwLockReadGuard<'a, State>,
    engine: &'a dyn Engine,
}

impl View for ReadView<'_> {
    fn index(&self) -> &Index {
        &self.state.index
    }
    fn rev(&self) -> i64 {
        self.state.rev
    }
    fn compact_rev(&self) -> i64 {
        self.state.compact_rev
    }
    fn load(&self, rev: Rev) -> Result<KeyValue> {
        load_from(self.engine, rev)
    }
    fn leases(&self) -> &LeaseTable {
        &self.state.leases
    }
}

impl<'a> ReadView<'a> {
    /// A point-in-time view of the engine that matches this view (no apply can interleave while
    /// the view holds the state lock); it stays valid after the view, and its lock, are gone.
    pub fn engine_snapshot(&self) -> Arc<dyn Reads> {
        self.engine.snapshot()
    }
}

impl ReadView<'_> {
    /// Member attributes and alarms.
    pub fn registry(&self) -> &Registry {
        &self.state.registry
    }

    /// Users, roles and whether auth is on.
    pub fn auth(&self) -> &AuthState {
        &self.state.auth
    }
}

/// The checksum of the history up to revision `at`, as stored.
fn hash_history(r: &dyn Reads, at: i64) -> Result<u32> {
    let mut crc = 0;
    r.for_each(&keys::rev_key_from(0), &keys::rev_key_from(at + 1), &mut |k, v| {
        crc = crc32c(crc32c(crc, k), v);
        true
    })?;
    Ok(crc)
}

/// What HashKV answers: the hash, and the compacted and current revisions it was taken at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashKv {
    pub hash: u32,
    pub compact_rev: i64,
    pub rev: i64,
}

/// CRC-32C (Castagnoli), the checksum etcd's HashKV uses, continued from `crc` over `data`
/// (the `crc32c` crate: SSE 4.2 or ARM instructions where the CPU has them, tables otherwise).
pub(crate) fn crc32c(crc: u32, data: &[u8]) -> u32 {
    ::crc32c::crc32c_append(crc, data)
}

impl ReadView<'_> {
    /// etcd's HashKV: a checksum over the history up to revision `rev` (0 = the current one),
    /// as stored, so members at the same revision agree exactly. The value differs from etcd's
    /// (its storage encoding differs); only agreement between keel members is meaningful.
    pub fn hash_kv(&self, rev: i64) -> Result<u32> {
        hash_history(self.engine, self.hash_kv_at(rev)?)
    }

    /// The revision `hash_kv(rev)` hashes up to, or why it cannot.
    fn hash_kv_at(&self, rev: i64) -> Result<i64> {
        let at = if rev <= 0 { self.state.rev } else { rev };
        if at > self.state.rev {
            return Err(Error::FutureRev);
        }
        if at < self.state.compact_rev {
            return Err(Error::Compacted);
        }
        Ok(at)
    }

    /// Visits the history from main revision `from` up to this view's revision, in revision
    /// order: `f(main revision, is a tombstone, stored value)` until it returns false. A
    /// tombstone's stored value holds only the key; a put's is the full value.
    pub fn history(&self, from: i64, f: &mut dyn FnMut(i64, bool, KeyValue) -> bool) -> Result<()> {
        let mut err = None;
        self.engine.for_each(&keys::rev_key_from(from), &keys::rev_key_from(self.state.rev + 1), &mut |k, v| {
            match keys::decode_rev_key(k).and_then(|(rev, tomb)| Ok((rev, tomb, KeyValue::decode(v)?))) {
                Ok((rev, tomb, kv)) => f(rev.main, tomb, kv),
                Err(e) => {
                    err = Some(e);
                    false
                }
            }
        })?;
        err.map_or(Ok(()), Err)
    }
}

/// The writes of one applied batch of Raft entries, committed to the engine in one atomic
/// write. Holds the state lock exclusively: dropping it without [`ApplyBatch::commit`] leaves the
/// in-memory state ahead of the disk, so callers must stop the member in that case.
pub struct ApplyBatch<'a> {
    state: RwLockWriteGuard<'a, State>,
    engine: &'a dyn Engine,
    batch: Batch,
    /// Writes of this batch not yet in the engine, by history key (None: deleted).
    overlay: HashMap<Vec<u8>, Option<Vec<u8>>>,
    want_prev: bool,
    /// The revisions this batch made, in order.
    revisions: Vec<Revision>,
    /// Whether the registry record must be written with the batch.
    registry_changed: bool,
    /// Whether the auth record must be written with the batch.
    auth_changed: bool,
}

impl<'a> ApplyBatch<'a> {
    /// Starts one write (one main revision) inside the batch.
    pub fn txn(&mut self) -> TxnWrite<'_, 'a> {
        let begin_rev = self.state.rev;
        TxnWrite { batch: self, begin_rev, events: Vec::new() }
    }

    /// A read-only view of the state including the batch's writes so far.
    pub fn view(&mut self) -> TxnWrite<'_, 'a> {
        self.txn()
    }

    /// Adds a metadata write (e.g. the applied log id) to the batch.
    pub fn put_meta(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.batch.put(key, value);
    }

    /// Compacts the history at `rev`: validated by the caller against the current and compacted
    /// revisions. Returns the number of history entries dropped.
    pub fn compact(&mut self, rev: i64) -> usize {
        let dropped = self.state.index.compact(rev);
        for (r, tomb) in &dropped {
            let k = keys::rev_key(*r, *tomb);
            self.overlay.insert(k.clone(), None);
            self.batch.delete(k);
        }
        self.state.compact_rev = rev;
        self.batch.put(keys::sm_meta(META_COMPACT), rev.to_be_bytes().to_vec());
        dropped.len()
    }

    pub fn current_rev(&self) -> i64 {
        self.state.rev
    }

    pub fn compact_rev(&self) -> i64 {
        self.state.compact_rev
    }

    pub fn leases(&self) -> &LeaseTable {
        &self.state.leases
    }

    pub fn registry(&self) -> &Registry {
        &self.state.registry
    }

    /// The registry, to change; the batch then writes it.
    pub fn registry_mut(&mut self) -> &mut Registry {
        self.registry_changed = true;
        &mut self.state.registry
    }

    pub fn auth(&self) -> &AuthState {
        &self.state.auth
    }

    /// Changes the auth state with `change`; the batch writes it only if the change succeeded
    /// (auth's changes check everything before they touch the state, so a refusal leaves it as
    /// it was, and the stored record too).
    pub fn change_auth<T, E>(&mut self, change: impl FnOnce(&mut AuthState) -> Result<T, E>) -> Result<T, E> {
        let changed = change(&mut self.state.auth)?;
        self.auth_changed = true;
        Ok(changed)
    }

    /// Adds a lease (the caller has checked that `id` is free).
    pub fn grant_lease(&mut self, id: i64, record: LeaseRecord) {
        self.state.leases.insert(id, record);
        self.put_lease(id, record);
    }

    /// Sets a lease's checkpointed remaining TTL; false if there is no such lease.
    pub fn checkpoint_lease(&mut self, id: i64, remaining: i64) -> bool {
        if !self.state.leases.set_remaining(id, remaining) {
            return false;
        }
        let record = self.state.leases.get(id).expect("lease just updated").record;
        self.put_lease(id, record);
        true
    }

    fn put_lease(&mut self, id: i64, record: LeaseRecord) {
        self.batch.put(keys::lease_key(id), bincode::serialize(&record).expect("lease record serializes"));
    }

    /// Removes a lease and deletes its keys in key order, all at one new revision (none if it
    /// had no keys). Returns false if there is no such lease.
    pub fn revoke_lease(&mut self, id: i64) -> Result<bool> {
        let Some(lease) = self.state.leases.remove(id) else {
            return Ok(false);
        };
        self.batch.delete(keys::lease_key(id));
        let mut tw = self.txn();
        for k in &lease.keys {
            tw.delete_range(k, None)?;
        }
        tw.end();
        Ok(true)
    }

    /// What this batch has changed so far, coarsely: writes queued, the current and compacted
    /// revisions, revisions made, records to write. For the applier's debug-build check that a
    /// refused command changes nothing (every change to the in-memory state queues a write or
    /// marks a record).
    #[cfg(debug_assertions)]
    pub fn changes(&self) -> (usize, i64, i64, usize, bool, bool) {
        let s = &self.state;
        (self.batch.ops.len(), s.rev, s.compact_rev, self.revisions.len(), self.registry_changed, self.auth_changed)
    }

    /// Writes the batch atomically (synced when `sync`), then lets readers in. Returns the
    /// revisions it made, for the watch hub.
    pub fn commit(mut self, sync: bool) -> Result<Vec<Revision>> {
        let rev = self.state.rev;
        self.batch.put(keys::sm_meta(META_REV), rev.to_be_bytes().to_vec());
        if self.registry_changed {
            let record = bincode::serialize(&self.state.registry).expect("registry serializes");
            self.batch.put(keys::sm_meta(REGISTRY), record);
        }
        if self.auth_changed {
            let record = bincode::serialize(&self.state.auth).expect("auth state serializes");
            self.batch.put(keys::sm_meta(AUTH), record);
        }
        let batch = std::mem::take(&mut self.batch);
        self.engine.write(batch, sync)?;
        Ok(std::mem::take(&mut self.revisions))
    }
}

/// One write transaction: every change it makes gets main revision `begin_rev + 1`.
pub struct TxnWrite<'b, 'a> {
    batch: &'b mut ApplyBatch<'a>,
    begin_rev: i64,
    /// The changes so far, as watch events.
    events: Vec<Event>,
}

impl TxnWrite<'_, '_> {
    fn next_rev(&self) -> Rev {
        Rev::new(self.begin_rev + 1, self.events.len() as i64)
    }

    /// The key's value before this transaction, when the batch collects previous values.
    fn prev_for_event(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        if !self.batch.want_prev {
            return Ok(None);
        }
        match self.batch.state.index.get(key, self.begin_rev) {
            Some(f) => Ok(Some(self.load(f.modified)?)),
            None => Ok(None),
        }
    }

    /// Puts `key`; returns the revision of the write.
    pub fn put(&mut self, key: &[u8], value: &[u8], lease: i64) -> Result<i64> {
        let rev = self.next_rev();
        let prev_kv = self.prev_for_event(key)?;
        let (created, version) = self.batch.state.index.put(key, rev);
        // A creation has no previous value, even when the key was deleted earlier in this txn
        // (etcd's watchers skip the lookup for version 1).
        let prev_kv = if version == 1 { None } else { prev_kv };
        let key = Bytes::copy_from_slice(key);
        self.batch.state.leases.set_key(&key, lease);
        let kv = KeyValue {
            key,
            create_revision: created,
            mod_revision: rev.main,
            version,
            value: Bytes::copy_from_slice(value),
            lease,
        };
        let k = keys::rev_key(rev, false);
        let bytes = kv.encode_to_vec();
        self.batch.overlay.insert(k.clone(), Some(bytes.clone()));
        self.batch.batch.put(k, bytes);
        self.events.push(Event { r#type: EventType::Put as i32, kv: Some(kv), prev_kv });
        Ok(rev.main)
    }

    /// Deletes every live key in the range; returns how many were deleted.
    pub fn delete_range(&mut self, key: &[u8], end: Option<&[u8]>) -> Result<i64> {
        let at = self.rev();
        let before = self.events.len() as i64;
        let mut doomed = Vec::new();
        self.batch.state.index.visit(key, end, at, |k, _| {
            doomed.push(k.to_vec());
            true
        });
        for k in doomed {
            let rev = self.next_rev();
            let prev_kv = self.prev_for_event(&k)?;
            self.batch.state.index.tombstone(&k, rev);
            let key = Bytes::from(k);
            self.batch.state.leases.set_key(&key, 0);
            // Stored as etcd stores a tombstone: the key alone; the event adds the revision.
            let stored = KeyValue { key, ..Default::default() };
            let hk = keys::rev_key(rev, true);
            let bytes = stored.encode_to_vec();
            self.batch.overlay.insert(hk.clone(), Some(bytes.clone()));
            self.batch.batch.put(hk, bytes);
            let kv = KeyValue { mod_revision: rev.main, ..stored };
            self.events.push(Event { r#type: EventType::Delete as i32, kv: Some(kv), prev_kv });
        }
        Ok(self.events.len() as i64 - before)
    }

    /// Whether this transaction changed anything.
    pub fn changed(&self) -> bool {
        !self.events.is_empty()
    }

    /// Ends the transaction, advancing the store revision if it changed anything. Returns the
    /// resulting revision.
    pub fn end(self) -> i64 {
        if self.events.is_empty() {
            return self.begin_rev;
        }
        let rev = self.begin_rev + 1;
        self.batch.state.rev = rev;
        let prev_known = self.batch.want_prev;
        self.batch.revisions.push(Revision { rev, events: self.events, prev_known });
        rev
    }
}

impl View for TxnWrite<'_, '_> {
    fn index(&self) -> &Index {
        &self.batch.state.index
    }
    fn rev(&self) -> i64 {
        self.begin_rev + if self.events.is_empty() { 0 } else { 1 }
    }
    fn compact_rev(&self) -> i64 {
        self.batch.state.compact_rev
    }
    fn load(&self, rev: Rev) -> Result<KeyValue> {
        let k = keys::rev_key(rev, false);
        match self.batch.overlay.get(&k) {
            Some(v) => decode_kv(rev, v.clone()),
            None => decode_kv(rev, self.batch.engine.get(&k)?),
        }
    }
    fn leases(&self) -> &LeaseTable {
        &self.batch.state.leases
    }
}

#[cfg(test)]
mod tests {
    use keel_proto::etcdserverpb::{CompactionRequest, DeleteRangeRequest, PutRequest, RangeRequest};

    use super::*;
    use crate::engine::MemEngine;

    fn put(m: &Mvcc, key: &str, value: &str) {
        let mut b = m.apply(false);
        let p = PutRequest {
            key: key.as_bytes().to_vec().into(),
            value: value.as_bytes().to_vec().into(),
            ..Default::default()
        };
        kv::put(&mut b, &p).unwrap();
        b.commit(false).unwrap();
    }

    #[test]
    fn a_range_walked_in_pieces_answers_as_one_walk() {
        let m = Mvcc::open(Arc::new(MemEngine::new())).unwrap();
        for i in 0..25 {
            put(&m, &format!("k{i:02}"), &format!("v{i}"));
        }
        let mut b = m.apply(false);
        kv::delete_range(&mut b, &DeleteRangeRequest { key: b"k07".to_vec().into(), ..Default::default() }).unwrap();
        b.commit(false).unwrap();
        let all = |f: &dyn Fn(&mut RangeRequest)| {
            let mut r =
                RangeRequest { key: b"k".to_vec().into(), range_end: b"l".to_vec().into(), ..Default::default() };
            f(&mut r);
            r
        };
        let requests = [
            all(&|_| {}),
            all(&|r| r.limit = 4),
            all(&|r| r.limit = 30),
            all(&|r| r.revision = 10),
            all(&|r| r.count_only = true),
            all(&|r| r.sort_order = 2),
            all(&|r| {
                r.limit = 3;
                r.min_mod_revision = 5
            }),
        ];
        for r in &requests {
            for piece in [1, 2, 7, 100] {
                let whole = kv::range(&m.read(), r).unwrap();
                let mut writes = 0;
                let pieces = m.range_in_pieces(r, piece, &mut || {
                    writes += 1;
                    put(&m, &format!("k{:02}", writes % 30), "later");
                });
                let pieces = pieces.unwrap();
                assert_eq!(
                    (&pieces.kvs, pieces.count, pieces.more),
                    (&whole.kvs, whole.count, whole.more),
                    "{r:?} in pieces of {piece}"
                );
            }
        }
        // A compaction past the range's revision between two pieces: `Compacted`, as etcd answers
        // a range at a compacted revision.
        let at = m.current_rev();
        let r = all(&|r| r.revision = at);
        let compacted = m.range_in_pieces(&r, 5, &mut || {
            put(&m, "k00", "again");
            let mut b = m.apply(false);
            let rev = b.current_rev();
            kv::compact(&mut b, &CompactionRequest { revision: rev, ..Default::default() }).unwrap();
            b.commit(false).unwrap();
        });
        assert!(matches!(compacted, Err(Error::Compacted)), "{compacted:?}");
    }

    /// A read-only txn planned under a view and loaded after it from an engine snapshot of that
    /// moment answers as of that moment, whatever was written and compacted in between.
    #[test]
    fn a_read_only_txn_loads_its_values_after_the_lock() {
        use keel_proto::etcdserverpb::{request_op, RequestOp, TxnRequest};
        let m = Mvcc::open(Arc::new(MemEngine::new())).unwrap();
        put(&m, "a", "1");
        put(&m, "b", "2");
        let range = |key: &[u8], end: &[u8]| RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                key: key.to_vec().into(),
                range_end: end.to_vec().into(),
                ..Default::default()
            })),
        };
        let inner = TxnRequest { success: vec![range(b"b", b"")], ..Default::default() };
        let t = TxnRequest {
            success: vec![
                range(b"a", b"c"),
                RequestOp { request: Some(request_op::Request::RequestTxn(inner)) },
                range(b"a", b""),
            ],
            ..Default::default()
        };
        let want = kv::txn_read(&m.read(), &t).unwrap();
        let (planned, snapshot) = {
            let v = m.read();
            (kv::txn_plan(&v, &t).unwrap(), v.engine_snapshot())
        };
        // Both values overwritten and their revisions compacted away before the load.
        put(&m, "a", "x");
        put(&m, "b", "y");
        let mut b = m.apply(false);
        let rev = b.current_rev();
        kv::compact(&mut b, &CompactionRequest { revision: rev, ..Default::default() }).unwrap();
        b.commit(false).unwrap();
        let got = planned.load(|rev| load_from(&*snapshot, rev)).unwrap();
        assert_eq!(got, want);
        assert_eq!(format!("{got:?}").matches("value: b\"1\"").count(), 2, "{got:?}");
    }

    #[test]
    fn crc32c_check_value() {
        // The standard check value of CRC-32C.
        assert_eq!(super::crc32c(0, b"123456789"), 0xe306_9283);
        assert_eq!(super::crc32c(super::crc32c(0, b"1234"), b"56789"), 0xe306_9283);
    }
}
