//! The state machine: applies committed commands to MVCC.
//!
//! Durability: one `apply` call is one atomic engine batch holding every entry's data, the
//! applied log id and the membership. It is written without sync: the entries are committed, so
//! they are durable in the Raft log (on this member's and a quorum's), and a crash that loses the
//! batch only means applying them again at restart, from the applied id the engine kept (the
//! engine keeps writes in order, so a batch survives only with every batch before it). Until
//! that replay is done the member answers no client (`Member::ready`). As etcd, which commits
//! its bbolt backend in the background and replays its WAL at start.
//! Applied indexes are checked to be contiguous. A failure that is not a deterministic refusal
//! (an engine error) is returned to openraft as a storage error, which stops the member rather
//! than letting replicas diverge.

use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StoredMembership};
use parking_lot::Mutex;

use super::apply::{apply_command, is_deterministic, EntryContext};
use super::snapshot_data::{Built, SnapshotData};
use super::{io_err, Applied, LogId, Reply, StorageError, TypeConfig};
use crate::auth::Tokens;
use crate::engine::{Pair, Reads};
use crate::error::{Error, Result};
use crate::mvcc::keys::meta::{APPLIED, INSTALLING, MEMBERSHIP, REGISTRY};
use crate::mvcc::{keys, Mvcc};
use crate::watch::Hub;

type Membership = StoredMembership<u64, openraft::BasicNode>;

struct AppliedState {
    last: Option<LogId>,
    membership: Membership,
}

/// A snapshot: the state machine's keys (`keys::STATE_MACHINE` prefixes) at one applied log id,
/// as the engine snapshot every reader of it encodes from.
#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, openraft::BasicNode>,
    data: Arc<Built>,
}

/// The install marker (`m installing`), written with the first engine batch of a snapshot install
/// and removed with the last: if the process dies between them, start-up finishes the install
/// from the spooled data before anything reads the state.
#[derive(serde::Serialize, serde::Deserialize)]
struct Installing {
    /// The spool file; `None` for data held in memory (an engine with no spill directory, which
    /// cannot outlive the process either).
    file: Option<std::path::PathBuf>,
    last: Option<LogId>,
    membership: Membership,
}

/// Installs `data` as the whole state machine, with `last` and `membership` as its applied id
/// and membership (they win over whatever the data carried), as one step readers cannot see
/// halfway (see [`Mvcc::replace`]).
fn install(mvcc: &Mvcc, data: &mut SnapshotData, last: Option<LogId>, membership: &Membership) -> Result<()> {
    let marker = Installing { file: data.file().map(Into::into), last, membership: membership.clone() };
    let marker = (keys::sm_meta(INSTALLING), bincode::serialize(&marker)?);
    let mut own = Vec::new();
    if let Some(l) = last {
        own.push(Ok((keys::sm_meta(APPLIED), bincode::serialize(&l)?)));
    }
    own.push(Ok((keys::sm_meta(MEMBERSHIP), bincode::serialize(membership)?)));
    mvcc.replace(data.pairs()?.chain(own), marker)
}

/// The state machine. Clones share state.
#[derive(Clone)]
pub struct StateMachine {
    mvcc: Arc<Mvcc>,
    /// Receives every applied revision once its batch is applied.
    hub: Arc<Hub>,
    applied: Arc<Mutex<AppliedState>>,
    snapshot: Arc<Mutex<Option<StoredSnapshot>>>,
    snapshot_seq: Arc<Mutex<u64>>,
    /// This member's auth tokens, registered as Authenticate entries apply.
    tokens: Arc<Tokens>,
    /// Refuse a gap between applied indexes (always on in a member; see [`Self::allow_gaps`]).
    contiguous: bool,
}

fn read_meta<T: serde::de::DeserializeOwned>(mvcc: &Mvcc, name: &str) -> Result<Option<T>> {
    match mvcc.engine().get(&keys::sm_meta(name))? {
        None => Ok(None),
        Some(b) => Ok(Some(bincode::deserialize(&b)?)),
    }
}

impl StateMachine {
    /// Opens the state machine over `mvcc`, reading the applied log id and membership; first
    /// finishes a snapshot install the process did not live to finish, and clears the spill
    /// directory of snapshots that were being received.
    pub fn open(mvcc: Arc<Mvcc>) -> Result<Self> {
        if let Some(i) = read_meta::<Installing>(&mvcc, INSTALLING)? {
            let gone = || Error::Corrupt("a snapshot install was interrupted and its data is gone".into());
            let mut data = SnapshotData::reopen(&i.file.ok_or_else(gone)?).map_err(|_| gone())?;
            tracing::warn!("finishing a snapshot install that was interrupted");
            install(&mvcc, &mut data, i.last, &i.membership)?;
        }
        if let Some(dir) = mvcc.engine().spill_dir() {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let last = read_meta::<LogId>(&mvcc, APPLIED)?;
        let membership = read_meta::<Membership>(&mvcc, MEMBERSHIP)?.unwrap_or_default();
        Ok(Self {
            hub: Arc::new(Hub::new(mvcc.clone())),
            mvcc,
            applied: Arc::new(Mutex::new(AppliedState { last, membership })),
            snapshot: Arc::new(Mutex::new(None)),
            snapshot_seq: Arc::new(Mutex::new(0)),
            tokens: Arc::new(Tokens::default()),
            contiguous: true,
        })
    }

    /// Accepts gaps between applied indexes (indexes must still grow). Only for openraft's
    /// conformance suite, which applies synthetic entries with gaps; a member never uses it.
    pub fn allow_gaps(mut self) -> Self {
        self.contiguous = false;
        self
    }

    pub fn mvcc(&self) -> &Arc<Mvcc> {
        &self.mvcc
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    pub fn tokens(&self) -> &Arc<Tokens> {
        &self.tokens
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId> {
        self.applied.lock().last
    }

    /// Applies `entries` in one batch, written without sync; returns the replies and the
    /// revisions made, for the watch hub.
    fn apply_entries(
        &self,
        entries: impl IntoIterator<Item = openraft::Entry<TypeConfig>>,
    ) -> Result<(Vec<Applied>, Vec<crate::mvcc::Revision>), StorageError> {
        let sm_err = |e: Error| io_err(e, ErrorSubject::StateMachine, ErrorVerb::Write);
        let mut applied = self.applied.lock();
        let mut batch = self.mvcc.apply(self.hub.wants_prev());
        let mut replies = Vec::new();
        let mut last = applied.last;
        let mut membership = applied.membership.clone();
        for entry in entries {
            if let Some(prev) = last {
                let ok = if self.contiguous {
                    entry.log_id.index == prev.index + 1
                } else {
                    entry.log_id.index > prev.index
                };
                if !ok {
                    return Err(sm_err(Error::Corrupt(format!(
                        "applied indexes not contiguous: {} after {}",
                        entry.log_id.index, prev.index
                    ))));
                }
            }
            last = Some(entry.log_id);
            let reply = match &entry.payload {
                EntryPayload::Blank => Ok(Reply::None),
                EntryPayload::Normal(cmd) => match apply_command(
                    &mut batch,
                    &EntryContext {
                        index: entry.log_id.index,
                        term: entry.log_id.leader_id.term,
                        tokens: &self.tokens,
                    },
                    cmd,
                ) {
                    Err(e) if !is_deterministic(&e) => return Err(sm_err(e)),
                    r => r,
                },
                EntryPayload::Membership(m) => {
                    membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    Ok(Reply::None)
                }
            };
            replies.push(Applied(reply));
        }
        if let Some(l) = last {
            batch.put_meta(keys::sm_meta(APPLIED), bincode::serialize(&l).expect("log id serializes"));
        }
        batch.put_meta(keys::sm_meta(MEMBERSHIP), bincode::serialize(&membership).expect("membership serializes"));
        // Readers see the batch from here on, as etcd's see its uncommitted backend batch; the
        // entries are committed, so a crash before the sync only means applying them again.
        let revisions = batch.commit(false).map_err(sm_err)?;
        applied.last = last;
        applied.membership = membership;
        Ok((replies, revisions))
    }
}

/// Where a walk over the state-machine pairs resumes: a prefix of `keys::STATE_MACHINE` and
/// the first key to visit in it.
#[derive(Debug, Clone)]
pub struct Resume {
    prefix: usize,
    key: Vec<u8>,
}

impl Resume {
    /// The first state-machine pair.
    pub fn start() -> Self {
        Resume { prefix: 0, key: vec![keys::STATE_MACHINE[0]] }
    }
}

/// Calls `f` on the state-machine pairs `r` holds from `from` on, in key order, until it returns
/// false; returns where the walk would go on (after the pair `f` stopped at), or `None` once
/// every pair was visited.
pub fn for_each_pair_from(
    r: &dyn Reads,
    from: Resume,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<Option<Resume>> {
    let Resume { prefix, mut key } = from;
    for (i, p) in keys::STATE_MACHINE.iter().enumerate().skip(prefix) {
        if i > prefix {
            key = vec![*p];
        }
        let mut stopped = None;
        r.for_each(&key, &keys::prefix_end(*p), &mut |k, v| {
            let more = f(k, v);
            if !more {
                stopped = Some(k.to_vec());
            }
            more
        })?;
        if let Some(mut k) = stopped {
            // The smallest key after the one `f` stopped at.
            k.push(0);
            return Ok(Some(Resume { prefix: i, key: k }));
        }
    }
    Ok(None)
}

/// Calls `f` on every state-machine pair `r` holds, in key order, until it returns false.
pub fn for_each_pair(r: &dyn Reads, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
    for_each_pair_from(r, Resume::start(), f).map(|_| ())
}

/// Every state-machine pair, from one engine snapshot (each applied batch is one atomic engine
/// write, so the pairs are one applied state).
pub fn dump(mvcc: &Mvcc) -> Result<Vec<Pair>> {
    dump_of(&*mvcc.engine_snapshot())
}

/// Every state-machine pair `r` holds.
pub fn dump_of(r: &dyn Reads) -> Result<Vec<Pair>> {
    let mut pairs = Vec::new();
    for_each_pair(r, &mut |k, v| {
        pairs.push((k.to_vec(), v.to_vec()));
        true
    })?;
    Ok(pairs)
}

/// etcd's Hash (Maintenance.Hash): CRC-32C over every state-machine pair of `r`.
pub fn hash(r: &dyn Reads) -> Result<u32> {
    let mut crc = 0;
    for_each_pair(r, &mut |k, v| {
        crc = crate::mvcc::crc32c(crate::mvcc::crc32c(crc, k), v);
        true
    })?;
    Ok(crc)
}

/// Whether a state-machine pair belongs in a restored new cluster: everything but this
/// cluster's Raft position, membership and member registry (etcd's restore keeps the keyspace
/// and leases, and starts membership afresh).
pub fn restorable(key: &[u8]) -> bool {
    ![APPLIED, MEMBERSHIP, REGISTRY].iter().any(|n| key == keys::sm_meta(n).as_slice())
}

/// The applied log id and membership an engine snapshot carries: they were written in the same
/// engine batch as the data they describe, so they are the snapshot's own cut.
fn cut_of(r: &dyn Reads) -> Result<(Option<LogId>, Membership)> {
    let last = r.get(&keys::sm_meta(APPLIED))?.map(|b| bincode::deserialize(&b)).transpose()?;
    let membership = r.get(&keys::sm_meta(MEMBERSHIP))?.map(|b| bincode::deserialize(&b)).transpose()?;
    Ok((last, membership.unwrap_or_default()))
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    /// Runs beside `apply` (openraft builds snapshots in a task of their own): the data, the log
    /// id and the membership all come from one engine snapshot, so they describe the same
    /// applied state whatever was applied meanwhile; applies are not held up while it is read.
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let read_err = |e: Error| io_err(e, ErrorSubject::StateMachine, ErrorVerb::Read);
        let snapshot = self.mvcc.engine_snapshot();
        let (last, membership) = cut_of(&*snapshot).map_err(read_err)?;
        let data = Built::of(snapshot).map_err(read_err)?;
        let seq = {
            let mut s = self.snapshot_seq.lock();
            *s += 1;
            *s
        };
        let snapshot_id = match last {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, seq),
            None => format!("--{seq}"),
        };
        let meta = SnapshotMeta { last_log_id: last, last_membership: membership, snapshot_id };
        *self.snapshot.lock() = Some(StoredSnapshot { meta: meta.clone(), data: data.clone() });
        Ok(Snapshot { meta, snapshot: Box::new(SnapshotData::built(data)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), StorageError> {
        let a = self.applied.lock();
        Ok((a.last, a.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let (replies, revisions) = self.apply_entries(entries)?;
        self.hub.publish(&revisions);
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        let spool = SnapshotData::receiving(self.mvcc.engine().spill_dir().as_deref());
        Ok(Box::new(spool.map_err(|e| io_err(e, ErrorSubject::Snapshot(None), ErrorVerb::Write))?))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        let snap_err = |e: Error| io_err(e, ErrorSubject::Snapshot(Some(meta.signature())), ErrorVerb::Write);
        let mut data = snapshot;
        tracing::info!(snapshot = %meta.snapshot_id, data = ?data, "installing a snapshot from the leader");
        {
            let mut applied = self.applied.lock();
            install(&self.mvcc, &mut data, meta.last_log_id, &meta.last_membership).map_err(snap_err)?;
            applied.last = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
        }
        drop(data);
        self.hub.reset();
        // The installed state is the snapshot (its own id and membership included): what this
        // member sends on is read from it, and the received data is gone.
        let built = Built::of(self.mvcc.engine_snapshot()).map_err(snap_err)?;
        *self.snapshot.lock() = Some(StoredSnapshot { meta: meta.clone(), data: built });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self
            .snapshot
            .lock()
            .clone()
            .map(|s| Snapshot { meta: s.meta, snapshot: Box::new(SnapshotData::built(s.data)) }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use keel_proto::etcdserverpb::{request_op, LeaseGrantRequest, LeaseRevokeRequest, PutRequest};

    use super::*;
    use crate::engine::MemEngine;
    use crate::mvcc::{kv, REPLACE_BATCH_BYTES};
    use crate::raft::{Command, Proto};

    /// Applies `cmd` as entry `index` of `term`, committing what it changed.
    fn apply_at(mvcc: &Mvcc, tokens: &Tokens, index: u64, term: u64, cmd: Command) -> Result<Reply> {
        let mut batch = mvcc.apply(false);
        let reply = apply_command(&mut batch, &EntryContext { index, term, tokens }, &cmd);
        batch.commit(false)?;
        reply
    }

    fn entry(index: u64, cmd: Command) -> openraft::Entry<TypeConfig> {
        openraft::Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(cmd),
        }
    }

    fn put(key: &str, value: &str) -> Command {
        Command::Put(Proto(PutRequest {
            key: key.as_bytes().to_vec().into(),
            value: value.as_bytes().to_vec().into(),
            ..Default::default()
        }))
    }

    fn memory_sm() -> StateMachine {
        StateMachine::open(Arc::new(Mvcc::open(Arc::new(MemEngine::new())).unwrap())).unwrap()
    }

    /// A snapshot's bytes.
    fn bytes(mut data: impl std::io::Read) -> Vec<u8> {
        let mut b = Vec::new();
        data.read_to_end(&mut b).unwrap();
        b
    }

    /// `bytes` as a snapshot received from a leader (spooled in memory).
    fn received(bytes: &[u8]) -> Box<SnapshotData> {
        let mut d = SnapshotData::receiving(None).unwrap();
        std::io::Write::write_all(&mut d, bytes).unwrap();
        Box::new(d)
    }

    /// Snapshots built while entries are applied (openraft runs both at once) must each be one
    /// cut: a member that installs one and applies the log after its log id ends up exactly where
    /// the leader is. A snapshot whose log id is older than its data would make it apply entries
    /// twice, and its revisions would drift.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_built_during_applies_is_one_cut() {
        const ENTRIES: u64 = 2000;
        let sm = memory_sm();
        let log: Vec<Command> = (1..=ENTRIES).map(|i| put(&format!("k{}", i % 97), &i.to_string())).collect();
        let applying = {
            let (mut sm, log) = (sm.clone(), log.clone());
            tokio::spawn(async move {
                for (i, cmd) in log.into_iter().enumerate() {
                    sm.apply([entry(i as u64 + 1, cmd)]).await.unwrap();
                }
            })
        };
        let mut snapshots = Vec::new();
        let mut builder = sm.clone();
        while !applying.is_finished() {
            let snap = builder.build_snapshot().await.unwrap();
            snapshots.push((snap.meta, snap.snapshot));
        }
        applying.await.unwrap();
        let leader = dump(sm.mvcc()).unwrap();
        assert!(snapshots.len() > 1, "no snapshot was built during the applies");
        let step = snapshots.len() / 10 + 1;
        for (meta, data) in snapshots.into_iter().step_by(step) {
            let meta = &meta;
            let mut follower = memory_sm();
            follower.install_snapshot(meta, data).await.unwrap();
            let from = meta.last_log_id.map(|l| l.index).unwrap_or(0);
            for i in from + 1..=ENTRIES {
                follower.apply([entry(i, log[i as usize - 1].clone())]).await.unwrap();
            }
            assert_eq!(
                follower.mvcc().current_rev(),
                sm.mvcc().current_rev(),
                "snapshot {} ({from}): the follower's revision drifted",
                meta.snapshot_id
            );
            assert!(dump(follower.mvcc()).unwrap() == leader, "snapshot {}: the follower differs", meta.snapshot_id);
        }
    }

    /// Readers running while a snapshot is installed see the state before it or after it, never
    /// a mix (new rows through the old index: `indexed but not stored`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_never_see_a_snapshot_installed_halfway() {
        use keel_proto::etcdserverpb::{CompactionRequest, DeleteRangeRequest, RangeRequest};
        // Two snapshots with no history in common: 400 puts, and the same deleted and compacted.
        let source = memory_sm();
        let mut src = source.clone();
        let mut index = 0;
        let mut next = |cmd| {
            index += 1;
            entry(index, cmd)
        };
        let puts: Vec<_> = (0..400).map(|i| next(put(&format!("k{i:03}"), "v"))).collect();
        src.apply(puts).await.unwrap();
        let full = src.build_snapshot().await.unwrap();
        let delete = DeleteRangeRequest { key: vec![0].into(), range_end: vec![0].into(), ..Default::default() };
        src.apply([next(Command::DeleteRange(Proto(delete)))]).await.unwrap();
        let rev = src.mvcc().current_rev();
        src.apply([next(Command::Compact(Proto(CompactionRequest { revision: rev, physical: true })))]).await.unwrap();
        let empty = src.build_snapshot().await.unwrap();
        let (full_meta, full) = (full.meta, bytes(full.snapshot));
        let (empty_meta, empty) = (empty.meta, bytes(empty.snapshot));

        let sm = memory_sm();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (mvcc, stop) = (sm.mvcc().clone(), stop.clone());
                tokio::task::spawn_blocking(move || {
                    let all = RangeRequest { key: vec![0].into(), range_end: vec![0].into(), ..Default::default() };
                    let mut reads = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let view = mvcc.read();
                        let r = kv::range(&view, &all).expect("a range during an install");
                        assert!(r.count == 0 || r.count == 400, "a range saw {} keys", r.count);
                        assert_eq!(r.kvs.len() as i64, r.count);
                        view.hash_kv(0).expect("a hash during an install");
                        drop(view);
                        // The read path's range and hash, which read outside the state lock.
                        let r = mvcc.range(&all).expect("a range during an install");
                        assert!(r.count == 0 || r.count == 400, "a range saw {} keys", r.count);
                        assert_eq!(r.kvs.len() as i64, r.count);
                        mvcc.hash_kv(0).expect("a hash during an install");
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        let mut installer = sm.clone();
        for round in 0..40 {
            let (meta, data) = if round % 2 == 0 { (&full_meta, &full) } else { (&empty_meta, &empty) };
            installer.install_snapshot(meta, received(data)).await.unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            assert!(r.await.expect("a reader failed") > 0);
        }
    }

    /// An install the process did not live to finish (its first engine batches written, the
    /// rest not) is finished at start-up from the spooled data: the state is the snapshot's, the
    /// marker and the spool file are gone. Spool files of snapshots that were still being
    /// received are removed; an interrupted install whose data is gone refuses to start.
    #[tokio::test]
    async fn an_interrupted_install_is_finished_at_start_up() {
        use crate::engine::{Engine, RocksEngine};
        // A leader's snapshot bigger than one engine batch of an install.
        let mut source = memory_sm();
        let value = vec![7u8; 100 << 10];
        let n = (REPLACE_BATCH_BYTES / value.len() + 30) as u64;
        let puts: Vec<_> = (1..=n)
            .map(|i| {
                let p = PutRequest {
                    key: format!("k{i:04}").into_bytes().into(),
                    value: value.clone().into(),
                    ..Default::default()
                };
                entry(i, Command::Put(Proto(p)))
            })
            .collect();
        source.apply(puts).await.unwrap();
        let snap = source.build_snapshot().await.unwrap();
        let (meta, data) = (snap.meta, bytes(snap.snapshot));
        let want = dump(source.mvcc()).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let open = || -> Result<StateMachine> {
            let engine: Arc<dyn Engine> = Arc::new(RocksEngine::open(&dir.path().join("db"))?);
            StateMachine::open(Arc::new(Mvcc::open(engine)?))
        };
        let sm = open().unwrap();
        let mut follower = sm.clone();
        follower.apply([entry(1, put("old", "1"))]).await.unwrap();
        let spill = sm.mvcc().engine().spill_dir().unwrap();
        // A snapshot received and spooled, then an install that dies after its first batch.
        let mut spooled = SnapshotData::receiving(Some(&spill)).unwrap();
        std::io::Write::write_all(&mut spooled, &data).unwrap();
        std::io::Write::flush(&mut spooled).unwrap();
        let file = spooled.file().unwrap().to_path_buf();
        let marker =
            Installing { file: Some(file.clone()), last: meta.last_log_id, membership: meta.last_membership.clone() };
        let marker = (keys::sm_meta(INSTALLING), bincode::serialize(&marker).unwrap());
        let dies = spooled.pairs().unwrap().take(n as usize - 20).chain([Err(Error::Io("the process died".into()))]);
        assert!(sm.mvcc().replace(dies, marker).is_err());
        let engine = sm.mvcc().engine();
        assert!(engine.get(&keys::sm_meta(INSTALLING)).unwrap().is_some(), "no batch of the install was written");
        // The process dies: nothing is cleaned up.
        std::mem::forget(spooled);
        drop((sm, follower));
        // And one more snapshot was being received.
        let mut other = SnapshotData::receiving(Some(&spill)).unwrap();
        std::io::Write::write_all(&mut other, b"partial").unwrap();
        let other_file = other.file().unwrap().to_path_buf();
        std::mem::forget(other);

        let sm = open().unwrap();
        assert!(dump(sm.mvcc()).unwrap() == want, "the install was not finished");
        assert_eq!(sm.last_applied(), meta.last_log_id);
        assert_eq!(sm.mvcc().current_rev(), source.mvcc().current_rev());
        assert!(!file.exists() && !other_file.exists(), "spool files were left behind");
        drop(sm);

        // The marker of an interrupted install whose data is gone.
        {
            let sm = open().unwrap();
            let marker =
                Installing { file: Some(file), last: meta.last_log_id, membership: meta.last_membership.clone() };
            let mut b = crate::engine::Batch::default();
            b.put(keys::sm_meta(INSTALLING), bincode::serialize(&marker).unwrap());
            sm.mvcc().engine().write(b, true).unwrap();
        }
        let refused = open().err().expect("a start with an install that cannot be finished");
        assert!(refused.to_string().contains("its data is gone"), "{refused}");
    }

    /// A range limit at i64's largest value (one more tells `more`) answers like no limit, inside
    /// a txn applied on every member as at the edge.
    #[test]
    fn a_range_limit_at_the_largest_value_takes_everything() {
        use keel_proto::etcdserverpb::{response_op, RangeRequest, RequestOp, TxnRequest};
        let mvcc = Mvcc::open(Arc::new(MemEngine::new())).unwrap();
        let tokens = Tokens::new(Duration::from_secs(300));
        apply_at(&mvcc, &tokens, 1, 1, put("a", "1")).unwrap();
        apply_at(&mvcc, &tokens, 2, 1, put("b", "2")).unwrap();
        let range = RangeRequest {
            key: b"a".to_vec().into(),
            range_end: b"c".to_vec().into(),
            limit: i64::MAX,
            ..Default::default()
        };
        let txn = TxnRequest {
            success: vec![RequestOp { request: Some(request_op::Request::RequestRange(range.clone())) }],
            ..Default::default()
        };
        let Ok(Reply::Txn(Proto(t))) = apply_at(&mvcc, &tokens, 3, 1, Command::Txn(Proto(txn))) else {
            panic!("the txn was refused")
        };
        let Some(response_op::Response::ResponseRange(r)) = &t.responses[0].response else { panic!("{t:?}") };
        assert_eq!((r.kvs.len(), r.count, r.more), (2, 2, false));
        let r = kv::range(&mvcc.read(), &range).unwrap();
        assert_eq!((r.kvs.len(), r.count, r.more), (2, 2, false));
    }

    #[test]
    fn a_lease_expiry_from_another_term_revokes_nothing() {
        let mvcc = Mvcc::open(Arc::new(MemEngine::new())).expect("open a memory store");
        let tokens = Tokens::new(Duration::from_secs(300));
        let put = PutRequest { key: b"k".to_vec().into(), value: b"v".to_vec().into(), lease: 7, ..Default::default() };
        apply_at(&mvcc, &tokens, 1, 2, Command::LeaseGrant(Proto(LeaseGrantRequest { id: 7, ttl: 5 }))).unwrap();
        apply_at(&mvcc, &tokens, 2, 2, Command::Put(Proto(put))).unwrap();
        let before = dump(&mvcc).unwrap();
        let expire = |term| Command::LeaseExpire { term, revoke: Proto(LeaseRevokeRequest { id: 7 }) };

        // Decided in term 2, committed in term 3: refused, and the lease and its key stay.
        assert!(matches!(apply_at(&mvcc, &tokens, 3, 3, expire(2)), Err(Error::NotLeader)));
        assert_eq!(dump(&mvcc).unwrap(), before, "a refused expiry changed the store");

        // Decided and committed in term 3: the lease goes, and so does its key.
        assert!(matches!(apply_at(&mvcc, &tokens, 4, 3, expire(3)), Ok(Reply::LeaseRevoke(_))));
        assert_ne!(dump(&mvcc).unwrap(), before);
        assert!(matches!(apply_at(&mvcc, &tokens, 5, 3, expire(3)), Err(Error::LeaseNotFound)));
    }
}
