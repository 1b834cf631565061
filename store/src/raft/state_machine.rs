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
use super::snapshot_data::SnapshotData;
use super::{io_err, Applied, LogId, Reply, StorageError, TypeConfig};
use crate::auth::Tokens;
use crate::engine::{Pair, Reads};
use crate::error::{Error, Result};
use crate::mvcc::keys::meta::{APPLIED, MEMBERSHIP, REGISTRY};
use crate::mvcc::{keys, Mvcc};
use crate::watch::Hub;

type Membership = StoredMembership<u64, openraft::BasicNode>;

struct AppliedState {
    last: Option<LogId>,
    membership: Membership,
}

/// A snapshot: the state machine's keys (`keys::STATE_MACHINE` prefixes) at one applied log id,
/// as one buffer that every reader of it shares.
#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, openraft::BasicNode>,
    data: Arc<Vec<u8>>,
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
    /// Opens the state machine over `mvcc`, reading the applied log id and membership.
    pub fn open(mvcc: Arc<Mvcc>) -> Result<Self> {
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

/// Calls `f` on every state-machine pair `r` holds, in key order, until it returns false.
pub fn for_each_pair(r: &dyn Reads, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
    let mut more = true;
    for p in keys::STATE_MACHINE {
        r.for_each(&[p], &keys::prefix_end(p), &mut |k, v| {
            more = f(k, v);
            more
        })?;
        if !more {
            break;
        }
    }
    Ok(())
}

/// Every state-machine pair, from one engine snapshot (each applied batch is one atomic engine
/// write, so the pairs are one applied state).
pub fn dump(mvcc: &Mvcc) -> Result<Vec<Pair>> {
    dump_of(&*mvcc.engine().snapshot())
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

/// The state-machine pairs of `r` as one bincode `Vec<Pair>` (what `install_snapshot`
/// decodes), written straight from the engine: no list of pairs is built first.
fn encode_pairs(r: &dyn Reads) -> Result<Vec<u8>> {
    // bincode's default encoding: a u64 LE count, then each byte string as a u64 LE length and
    // its bytes. The count is patched in at the end.
    let mut out = vec![0; 8];
    let mut count = 0u64;
    for_each_pair(r, &mut |k, v| {
        for s in [k, v] {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s);
        }
        count += 1;
        true
    })?;
    out[..8].copy_from_slice(&count.to_le_bytes());
    Ok(out)
}

/// The pairs of snapshot data ([`encode_pairs`]), read one at a time from the buffer (no list of
/// them is built): the whole buffer is checked first, so a truncated or malformed one is refused
/// before anything is installed.
fn decode_pairs(data: &[u8]) -> Result<impl Iterator<Item = Pair> + '_> {
    let corrupt = || Error::Corrupt("malformed snapshot data".into());
    let u64_at = |at: usize| -> Result<u64> {
        let bytes = data.get(at..at.checked_add(8).ok_or_else(corrupt)?).ok_or_else(corrupt)?;
        Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    };
    let count = u64_at(0)?;
    let mut at = 8usize;
    for _ in 0..count.saturating_mul(2) {
        let len = usize::try_from(u64_at(at)?).map_err(|_| corrupt())?;
        at = at.checked_add(8).and_then(|a| a.checked_add(len)).filter(|end| *end <= data.len()).ok_or_else(corrupt)?;
    }
    if at != data.len() {
        return Err(corrupt());
    }
    let mut at = 8;
    let mut bytes = move || {
        let len = u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes")) as usize;
        at += 8 + len;
        data[at - len..at].to_vec()
    };
    Ok((0..count).map(move |_| (bytes(), bytes())))
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    /// Runs beside `apply` (openraft builds snapshots in a task of their own): the data, the log
    /// id and the membership all come from one engine snapshot, so they describe the same
    /// applied state whatever was applied meanwhile; applies are not held up while it is read.
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let read_err = |e: Error| io_err(e, ErrorSubject::StateMachine, ErrorVerb::Read);
        let (last, membership, data) = {
            let snapshot = self.mvcc.engine().snapshot();
            let (last, membership) = cut_of(&*snapshot).map_err(read_err)?;
            (last, membership, Arc::new(encode_pairs(&*snapshot).map_err(read_err)?))
        };
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
        Ok(Snapshot { meta, snapshot: Box::new(SnapshotData::shared(data)) })
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
        Ok(Box::new(SnapshotData::receiving()))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        let snap_err = |e: Error| io_err(e, ErrorSubject::Snapshot(Some(meta.signature())), ErrorVerb::Write);
        let data = snapshot.into_shared();
        tracing::info!(snapshot = %meta.snapshot_id, bytes = data.len(), "installing a snapshot from the leader");
        let pairs = decode_pairs(&data).map_err(snap_err)?;
        // The snapshot's own applied id and membership win over whatever the data carried.
        let mut own = Vec::new();
        if let Some(l) = meta.last_log_id {
            own.push((keys::sm_meta(APPLIED), bincode::serialize(&l).expect("log id serializes")));
        }
        let membership = bincode::serialize(&meta.last_membership).expect("membership serializes");
        own.push((keys::sm_meta(MEMBERSHIP), membership));
        {
            let mut applied = self.applied.lock();
            self.mvcc.replace(pairs.chain(own)).map_err(snap_err)?;
            applied.last = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
        }
        self.hub.reset();
        *self.snapshot.lock() = Some(StoredSnapshot { meta: meta.clone(), data });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self
            .snapshot
            .lock()
            .clone()
            .map(|s| Snapshot { meta: s.meta, snapshot: Box::new(SnapshotData::shared(s.data)) }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use keel_proto::etcdserverpb::{request_op, LeaseGrantRequest, LeaseRevokeRequest, PutRequest};

    use super::*;
    use crate::engine::MemEngine;
    use crate::mvcc::kv;
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
            snapshots.push((snap.meta, snap.snapshot.into_shared()));
        }
        applying.await.unwrap();
        let leader = dump(sm.mvcc()).unwrap();
        assert!(snapshots.len() > 1, "no snapshot was built during the applies");
        for (meta, data) in snapshots.iter().step_by(snapshots.len() / 10 + 1) {
            let mut follower = memory_sm();
            follower.install_snapshot(meta, Box::new(SnapshotData::shared(data.clone()))).await.unwrap();
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
        let (full_meta, full) = (full.meta, full.snapshot.into_shared());
        let (empty_meta, empty) = (empty.meta, empty.snapshot.into_shared());

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
            installer.install_snapshot(meta, Box::new(SnapshotData::shared(data.clone()))).await.unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            assert!(r.await.expect("a reader failed") > 0);
        }
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
    fn snapshot_data_is_the_bincode_of_the_pairs() {
        let mvcc = Mvcc::open(Arc::new(MemEngine::new())).expect("open a memory store");
        let tokens = Tokens::new(Duration::from_secs(300));
        for i in 1..=20u64 {
            let put = PutRequest {
                key: format!("k{i}").into_bytes().into(),
                value: vec![i as u8; i as usize].into(),
                ..Default::default()
            };
            apply_at(&mvcc, &tokens, i, 1, Command::Put(Proto(put))).unwrap();
        }
        let pairs = dump(&mvcc).unwrap();
        let data = encode_pairs(&*mvcc.engine().snapshot()).unwrap();
        assert_eq!(data, bincode::serialize(&pairs).unwrap());
        assert_eq!(bincode::deserialize::<Vec<Pair>>(&data).unwrap(), pairs);
        assert_eq!(decode_pairs(&data).unwrap().collect::<Vec<_>>(), pairs);
        for cut in [0, 7, 8, data.len() - 1] {
            assert!(decode_pairs(&data[..cut]).is_err(), "data cut at {cut} was taken");
        }
        let mut longer = data.clone();
        longer.push(0);
        assert!(decode_pairs(&longer).is_err(), "trailing bytes were taken");
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
