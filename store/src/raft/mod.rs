//! Raft: every write is a [`Command`] in openraft's log, even on a single member.
//!
//! - [`log_store::LogStore`]: the Raft log and vote on the storage engine (prefixes `l`, `v`);
//!   appends are synced before openraft is told they are flushed.
//! - [`state_machine::StateMachine`]: applies committed commands to MVCC; the applied log id and
//!   membership go into the same atomic batch as the data, one batch per `apply` call, written
//!   unsynced (the log is the durable record; see the module).
//!
//! Apply is deterministic: everything a command needs (the request, chosen ids) is in the entry.

// openraft's traits return its own (large) StorageError; our helpers return the same type.
#[allow(clippy::result_large_err)]
pub mod log_store;
pub mod network;
pub mod proposals;
pub mod runtime;
#[allow(clippy::result_large_err)]
pub mod state_machine;

use std::fmt;
use std::io::Cursor;

use keel_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse,
    LeaseCheckpointRequest, LeaseCheckpointResponse, LeaseGrantRequest, LeaseGrantResponse, LeaseRevokeRequest,
    LeaseRevokeResponse, PutRequest, PutResponse, TxnRequest, TxnResponse,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::auth::{AuthCommand, AuthReply};
use crate::error::Error;
use crate::mvcc::registry::Attributes;

openraft::declare_raft_types!(
    /// keel's openraft type configuration.
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = runtime::KeelRuntime,
);

/// keel's Raft handle.
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<u64>;
pub type StorageError = openraft::StorageError<u64>;

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

/// Wraps an engine failure as openraft's storage error (which stops the member).
pub(crate) fn io_err(
    e: impl std::fmt::Display,
    what: openraft::ErrorSubject<u64>,
    verb: openraft::ErrorVerb,
) -> StorageError {
    openraft::StorageIOError::new(what, verb, openraft::AnyError::error(e.to_string())).into()
}
