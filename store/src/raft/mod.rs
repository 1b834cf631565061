//! Raft: every write is a [`Command`] in openraft's log, even on a single member.
//!
//! - [`apply`]: the commands, their replies, and what applying one means (the applier).
//! - [`log_store::LogStore`]: the Raft log and vote on the storage engine (prefixes `l`, `v`);
//!   appends are synced before openraft is told they are flushed.
//! - [`state_machine::StateMachine`]: applies committed commands to MVCC; the applied log id and
//!   membership go into the same atomic batch as the data, one batch per `apply` call, written
//!   unsynced (the log is the durable record; see the module).
//!
//! Apply is deterministic: everything a command needs (the request, chosen ids) is in the entry.

pub mod apply;
// openraft's traits return its own (large) StorageError; our helpers return the same type.
#[allow(clippy::result_large_err)]
pub mod log_store;
pub mod network;
pub mod proposals;
pub mod runtime;
pub mod snapshot_data;
#[allow(clippy::result_large_err)]
pub mod state_machine;

pub use apply::{Applied, Command, Proto, Reply};

openraft::declare_raft_types!(
    /// keel's openraft type configuration.
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = snapshot_data::SnapshotData,
        AsyncRuntime = runtime::KeelRuntime,
);

/// keel's Raft handle.
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<u64>;
pub type StorageError = openraft::StorageError<u64>;

/// Wraps an engine failure as openraft's storage error (which stops the member).
pub(crate) fn io_err(
    e: impl std::fmt::Display,
    what: openraft::ErrorSubject<u64>,
    verb: openraft::ErrorVerb,
) -> StorageError {
    openraft::StorageIOError::new(what, verb, openraft::AnyError::error(e.to_string())).into()
}
