//! The applier: the commands Raft carries ([`Command`], one per log entry or a batch of them),
//! their replies, and what applying one means, on every member alike.
//!
//! Applying a command is deterministic: everything it needs (the request, ids chosen by the
//! proposer, the term that decided a lease expiry) is in the entry; nothing reads the clock or a
//! random number. In this order, a command is
//! 1. refused with NOSPACE if it needs space while the alarm is raised (etcd's capped applier);
//! 2. refused if its client's user may not do it, at the auth revision the client was admitted
//!    with (`crate::auth::check_write`);
//! 3. applied to the MVCC through the batch.
//!
//! A refusal is a reply like any other, the same on every member, and changes nothing: debug
//! builds check that a refused command left the batch as it found it. Only an engine failure is
//! an error ([`is_deterministic`]): the member stops rather than diverge.

use std::fmt;

use keel_auth::AuthInfo;
use keel_proto::etcdserverpb::{
    request_op, AlarmRequest, AlarmResponse, CompactionRequest, CompactionResponse, DeleteRangeRequest,
    DeleteRangeResponse, LeaseCheckpointRequest, LeaseCheckpointResponse, LeaseGrantRequest, LeaseGrantResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, PutRequest, PutResponse, TxnRequest, TxnResponse,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::auth::{self, AuthCommand, AuthReply, Tokens};
use crate::config::Limits;
use crate::error::Error;
use crate::mvcc::registry::{self, Attributes};
use crate::mvcc::{kv, lease, ApplyBatch};

/// A protobuf message carried through serde (the Raft log, Raft RPC) as its protobuf bytes.
#[derive(Clone, PartialEq, Default)]
pub struct Proto<T>(pub T);

impl<T: fmt::Debug> fmt::Debug for Proto<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: prost::Message> Serialize for Proto<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.encode_to_vec().serialize(s)
    }
}

impl<'de, T: prost::Message + Default> Deserialize<'de> for Proto<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes = Vec::<u8>::deserialize(d)?;
        T::decode(bytes.as_slice()).map(Proto).map_err(serde::de::Error::custom)
    }
}

/// A write, as proposed to Raft and applied by every member.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Command {
    Put(Proto<PutRequest>),
    DeleteRange(Proto<DeleteRangeRequest>),
    Txn(Proto<TxnRequest>),
    Compact(Proto<CompactionRequest>),
    /// A grant with the id and TTL already chosen by the proposer.
    LeaseGrant(Proto<LeaseGrantRequest>),
    /// A revoke, asked by a client or proposed by the leader when the lease expired.
    LeaseRevoke(Proto<LeaseRevokeRequest>),
    /// Remaining TTLs recorded by the leader, so a restart or a new leader does not reset them.
    LeaseCheckpoint(Proto<LeaseCheckpointRequest>),
    /// A member's name and client URLs, published by the member once it runs.
    Publish {
        id: u64,
        attributes: Attributes,
    },
    /// etcd's Alarm request (get, raise, clear).
    Alarm(Proto<AlarmRequest>),
    /// Writes proposed together as one entry (see `proposals`): applied in order, each as if
    /// it had an entry of its own, answered with a `Reply::Batch` of their replies.
    Batch(Vec<Command>),
    /// A client write admitted with a token: the user and the auth revision its member saw
    /// (etcd's request header), checked when it is applied (see `crate::auth`).
    Authed {
        user: String,
        revision: u64,
        cmd: Box<Command>,
    },
    /// An auth management request (users, roles, enable, authenticate).
    Auth(AuthCommand),
    /// A revoke the leader proposes for an expired lease: a client's revoke, but never
    /// permission-checked (etcd's lessor revokes as root). `term` is the term in which the
    /// leader found the lease expired; the revoke is applied only from an entry of that term, so
    /// a decision left over from an earlier leadership (the member lost the lead, another leader
    /// renewed the lease, then this member led again) revokes nothing.
    LeaseExpire {
        term: u64,
        revoke: Proto<LeaseRevokeRequest>,
    },
}

impl Command {
    /// About how many bytes the command takes in a log entry (to size batches).
    pub fn encoded_len(&self) -> usize {
        use prost::Message;
        match self {
            Command::Put(Proto(m)) => m.encoded_len(),
            Command::DeleteRange(Proto(m)) => m.encoded_len(),
            Command::Txn(Proto(m)) => m.encoded_len(),
            Command::Compact(Proto(m)) => m.encoded_len(),
            Command::LeaseGrant(Proto(m)) => m.encoded_len(),
            Command::LeaseRevoke(Proto(m)) => m.encoded_len(),
            Command::LeaseCheckpoint(Proto(m)) => m.encoded_len(),
            Command::Publish { attributes, .. } => {
                16 + attributes.name.len() + attributes.client_urls.iter().map(|u| u.len() + 8).sum::<usize>()
            }
            Command::Alarm(Proto(m)) => m.encoded_len(),
            Command::Batch(cmds) => cmds.iter().map(|c| c.encoded_len() + 8).sum(),
            Command::Authed { user, cmd, .. } => user.len() + 16 + cmd.encoded_len(),
            Command::Auth(a) => bincode::serialized_size(a).unwrap_or(0) as usize,
            Command::LeaseExpire { revoke: Proto(m), .. } => m.encoded_len() + 8,
        }
    }
}

/// What applying one entry produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    /// Blank and membership entries.
    None,
    Put(Proto<PutResponse>),
    DeleteRange(Proto<DeleteRangeResponse>),
    Txn(Proto<TxnResponse>),
    Compact(Proto<CompactionResponse>),
    LeaseGrant(Proto<LeaseGrantResponse>),
    LeaseRevoke(Proto<LeaseRevokeResponse>),
    LeaseCheckpoint(Proto<LeaseCheckpointResponse>),
    Alarm(Proto<AlarmResponse>),
    /// A `Command::Batch`'s replies, in its order.
    Batch(Vec<Applied>),
    Auth(AuthReply),
}

/// The reply to a command: a deterministic refusal is as much an outcome as a success.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Applied(pub Result<Reply, Error>);

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Put(_) => f.write_str("put"),
            Command::DeleteRange(_) => f.write_str("delete_range"),
            Command::Txn(_) => f.write_str("txn"),
            Command::Compact(_) => f.write_str("compact"),
            Command::LeaseGrant(_) => f.write_str("lease_grant"),
            Command::LeaseRevoke(_) => f.write_str("lease_revoke"),
            Command::LeaseCheckpoint(_) => f.write_str("lease_checkpoint"),
            Command::Publish { .. } => f.write_str("publish"),
            Command::Alarm(_) => f.write_str("alarm"),
            Command::Batch(cmds) => write!(f, "batch of {}", cmds.len()),
            Command::Authed { cmd, .. } => write!(f, "{cmd} (authed)"),
            Command::Auth(_) => f.write_str("auth"),
            Command::LeaseExpire { .. } => f.write_str("lease_expire"),
        }
    }
}

/// Whether `cmd` needs space and a backend of `backend` bytes plus it would exceed `quota` (the
/// edge then raises NOSPACE and refuses it). Its size is only worked out when the backend is
/// within the largest message of the quota.
pub fn exceeds_quota(cmd: &Command, backend: u64, quota: u64, limits: &Limits) -> bool {
    needs_space(cmd)
        && backend.saturating_add(limits.max_message_bytes() as u64) > quota
        && backend.saturating_add(bincode::serialized_size(cmd).unwrap_or(0)) > quota
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

/// Applies `cmd` on behalf of `who`; in debug builds, checks that a refusal changed nothing.
fn apply_as(batch: &mut ApplyBatch, at: &EntryContext, who: &AuthInfo, cmd: &Command) -> Result<Reply, Error> {
    #[cfg(debug_assertions)]
    let before = batch.changes();
    let reply = apply_unchecked(batch, at, who, cmd);
    #[cfg(debug_assertions)]
    if matches!(&reply, Err(e) if is_deterministic(e)) {
        assert_eq!(batch.changes(), before, "refused {cmd} changed the batch");
    }
    reply
}

/// Applies `cmd` on behalf of `who` (no user unless the command came `Authed`).
fn apply_unchecked(batch: &mut ApplyBatch, at: &EntryContext, who: &AuthInfo, cmd: &Command) -> Result<Reply, Error> {
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
pub(crate) fn is_deterministic(e: &Error) -> bool {
    !matches!(e, Error::Io(_) | Error::Corrupt(_))
}
