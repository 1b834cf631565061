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

use std::io::Cursor;
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StoredMembership};
use parking_lot::Mutex;

use super::{io_err, Applied, Command, LogId, Proto, Reply, StorageError, TypeConfig};
use crate::auth::{self, Tokens};
use crate::engine::{Batch, Pair};
use crate::error::{Error, Result};
use crate::mvcc::{keys, kv, lease, registry, ApplyBatch, Mvcc};
use crate::watch::Hub;
use keel_auth::AuthInfo;
use keel_proto::etcdserverpb::{request_op, TxnRequest};

type Membership = StoredMembership<u64, openraft::BasicNode>;

const APPLIED: &str = "applied";
const MEMBERSHIP: &str = "membership";

struct AppliedState {
    last: Option<LogId>,
    membership: Membership,
}

/// A snapshot: the state machine's keys (`keys::STATE_MACHINE` prefixes) at one applied log id.
#[derive(Clone)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, openraft::BasicNode>,
    data: Vec<u8>,
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

/// Whether a command needs space: refused while the NOSPACE alarm is raised (etcd's capped
/// applier refuses puts, txns that put, and lease grants; deletes and compaction still work).
pub fn needs_space(cmd: &Command) -> bool {
    fn txn_puts(t: &TxnRequest) -> bool {
        t.success.iter().chain(&t.failure).any(|op| match &op.request {
            Some(request_op::Request::RequestPut(_)) => true,
            Some(request_op::Request::RequestTxn(inner)) => txn_puts(inner),
            _ => false,
        })
    }
    match cmd {
        Command::Put(_) | Command::LeaseGrant(_) => true,
        Command::Txn(Proto(t)) => txn_puts(t),
        Command::Authed { cmd, .. } => needs_space(cmd),
        _ => false,
    }
}

/// What applying a command needs besides the batch: its entry's log index and term, and this
/// member's auth tokens.
pub struct EntryContext<'a> {
    pub index: u64,
    pub term: u64,
    pub tokens: &'a Tokens,
}

/// Applies one command inside the batch. Refusals are replies; only engine failures are errors.
pub fn apply_command(batch: &mut ApplyBatch, at: &EntryContext, cmd: &Command) -> Result<Reply, Error> {
    apply_as(batch, at, &AuthInfo::default(), cmd)
}

/// Applies `cmd` on behalf of `who` (no user unless the command came `Authed`).
fn apply_as(batch: &mut ApplyBatch, at: &EntryContext, who: &AuthInfo, cmd: &Command) -> Result<Reply, Error> {
    if batch.registry().no_space() && needs_space(cmd) {
        return Err(Error::NoSpace);
    }
    auth::check_write(batch.auth(), batch.leases(), who, cmd)?;
    Ok(match cmd {
        Command::Put(Proto(p)) => Reply::Put(Proto(kv::put(batch, p)?)),
        Command::DeleteRange(Proto(d)) => Reply::DeleteRange(Proto(kv::delete_range(batch, d)?)),
        Command::Txn(Proto(t)) => Reply::Txn(Proto(kv::txn(batch, t)?)),
        Command::Compact(Proto(c)) => Reply::Compact(Proto(kv::compact(batch, c)?)),
        Command::LeaseGrant(Proto(g)) => Reply::LeaseGrant(Proto(lease::grant(batch, g)?)),
        Command::LeaseRevoke(Proto(r)) => Reply::LeaseRevoke(Proto(lease::revoke(batch, r)?)),
        Command::LeaseExpire { term, revoke: Proto(r) } => {
            if *term != at.term {
                return Err(Error::NotLeader);
            }
            Reply::LeaseRevoke(Proto(lease::revoke(batch, r)?))
        }
        Command::LeaseCheckpoint(Proto(c)) => Reply::LeaseCheckpoint(Proto(lease::checkpoint(batch, c)?)),
        Command::Publish { id, attributes } => {
            registry::publish(batch, *id, attributes);
            Reply::None
        }
        Command::Alarm(Proto(a)) => Reply::Alarm(Proto(registry::alarm(batch, a))),
        Command::Batch(cmds) => {
            let mut replies = Vec::with_capacity(cmds.len());
            for cmd in cmds {
                match apply_command(batch, at, cmd) {
                    Err(e) if !is_deterministic(&e) => return Err(e),
                    r => replies.push(Applied(r)),
                }
            }
            Reply::Batch(replies)
        }
        Command::Authed { user, revision, cmd } => {
            return apply_as(batch, at, &AuthInfo { username: user.clone(), revision: *revision }, cmd)
        }
        Command::Auth(a) => Reply::Auth(auth::apply(batch, at.tokens, at.index, who, a)?),
    })
}

/// Whether an error from applying a command is a deterministic refusal (the same on every member)
/// rather than a local failure.
fn is_deterministic(e: &Error) -> bool {
    !matches!(e, Error::Io(_) | Error::Corrupt(_))
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

    fn dump(&self) -> Result<Vec<Pair>> {
        dump(&self.mvcc)
    }
}

/// Every state-machine pair, read under the MVCC state lock so no apply interleaves.
pub fn dump(mvcc: &Mvcc) -> Result<Vec<Pair>> {
    let _view = mvcc.read();
    let e = mvcc.engine();
    let mut pairs = Vec::new();
    for p in keys::STATE_MACHINE {
        pairs.extend(e.scan(&[p], &keys::prefix_end(p))?);
    }
    Ok(pairs)
}

/// Whether a state-machine pair belongs in a restored new cluster: everything but this
/// cluster's Raft position, membership and member registry (etcd's restore keeps the keyspace
/// and leases, and starts membership afresh).
pub fn restorable(key: &[u8]) -> bool {
    ![APPLIED, MEMBERSHIP, crate::mvcc::registry::RECORD].iter().any(|n| key == keys::sm_meta(n).as_slice())
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (last, membership) = {
            let a = self.applied.lock();
            (a.last, a.membership.clone())
        };
        let pairs = self.dump().map_err(|e| io_err(e, ErrorSubject::StateMachine, ErrorVerb::Read))?;
        let data = bincode::serialize(&pairs).expect("pairs serialize");
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
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
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

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let snap_err = |e: Error| io_err(e, ErrorSubject::Snapshot(Some(meta.signature())), ErrorVerb::Write);
        let data = snapshot.into_inner();
        tracing::info!(snapshot = %meta.snapshot_id, bytes = data.len(), "installing a snapshot from the leader");
        let pairs: Vec<Pair> = bincode::deserialize(&data).map_err(|e| snap_err(e.into()))?;
        let mut b = Batch::default();
        for p in keys::STATE_MACHINE {
            b.delete_range(vec![p], keys::prefix_end(p));
        }
        for (k, v) in pairs {
            b.put(k, v);
        }
        // The snapshot's own applied id and membership win over whatever the data carried.
        if let Some(l) = meta.last_log_id {
            b.put(keys::sm_meta(APPLIED), bincode::serialize(&l).expect("log id serializes"));
        }
        b.put(keys::sm_meta(MEMBERSHIP), bincode::serialize(&meta.last_membership).expect("membership serializes"));
        {
            let mut applied = self.applied.lock();
            self.mvcc.engine().write(b, true).map_err(snap_err)?;
            self.mvcc.reload().map_err(snap_err)?;
            applied.last = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
        }
        self.hub.reset();
        *self.snapshot.lock() = Some(StoredSnapshot { meta: meta.clone(), data });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self.snapshot.lock().clone().map(|s| Snapshot { meta: s.meta, snapshot: Box::new(Cursor::new(s.data)) }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use keel_proto::etcdserverpb::{LeaseGrantRequest, LeaseRevokeRequest, PutRequest};

    use super::*;
    use crate::engine::MemEngine;

    /// Applies `cmd` as entry `index` of `term`, committing what it changed.
    fn apply_at(mvcc: &Mvcc, tokens: &Tokens, index: u64, term: u64, cmd: Command) -> Result<Reply> {
        let mut batch = mvcc.apply(false);
        let reply = apply_command(&mut batch, &EntryContext { index, term, tokens }, &cmd);
        batch.commit(false)?;
        reply
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
