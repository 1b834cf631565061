//! keel-store's one error enum, named by meaning. Every variant that a client can cause maps to
//! etcd's exact gRPC code and message in `server::status` (the only place that does so).
//!
//! Errors travel inside Raft replies (a rejected Put is a deterministic outcome of applying the
//! entry), so the enum is serializable and carries no OS handles.

use serde::{Deserialize, Serialize};

/// Everything that can go wrong in the store, by meaning.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum Error {
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    #[error("etcdserver: key not found")]
    KeyNotFound,
    #[error("etcdserver: value is provided")]
    ValueProvided,
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    #[error("etcdserver: too many operations in txn request")]
    TooManyOps,
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: invalid sort option")]
    InvalidSortOption,
    #[error("etcdserver: request is too large")]
    RequestTooLarge,
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRev,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: lease already exists")]
    LeaseExist,
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    #[error("etcdserver: no leader")]
    NoLeader,
    #[error("etcdserver: not leader")]
    NotLeader,
    #[error("etcdserver: request timed out")]
    Timeout,
    #[error("etcdserver: server stopped")]
    Stopped,
    #[error("etcdserver: request timed out, possibly due to connection lost")]
    TimeoutDueToConnectionLost,
    #[error("etcdserver: request timed out, leader transfer took too long")]
    TimeoutLeaderTransfer,
    /// A write this member proposed as the leader was dropped when it lost the lead: it may still
    /// be committed by the next leader, so its outcome is unknown.
    #[error("etcdserver: request timed out, possibly due to previous leader failure")]
    TimeoutLeaderFail,
    #[error("etcdserver: bad leader transferee")]
    BadLeaderTransferee,
    #[error("etcdserver: rpc not supported for learner")]
    NotSupportedForLearner,
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    #[error("etcdserver: member ID already exist")]
    MemberExist,
    #[error("etcdserver: Peer URLs already exists")]
    PeerUrlExist,
    #[error("etcdserver: re-configuration failed due to not enough started members")]
    NotEnoughStarted,
    #[error("etcdserver: given member URLs are invalid")]
    MemberBadUrls,
    #[error("etcdserver: member not found")]
    MemberNotFound,
    #[error("etcdserver: can only promote a learner member")]
    MemberNotLearner,
    #[error("etcdserver: can only promote a learner member which is in sync with leader")]
    LearnerNotReady,
    #[error("etcdserver: too many learner members in cluster")]
    TooManyLearners,
    /// On-disk state that does not decode: the member must stop rather than serve it.
    #[error("etcdserver: corrupt cluster: {0}")]
    Corrupt(String),
    /// The storage engine failed (disk full, I/O error).
    #[error("keel: storage: {0}")]
    Io(String),
    /// An authentication or authorization failure, with etcd's message (and gRPC code, see
    /// `keel_auth::AuthError::grpc_code`).
    #[error("{0}")]
    Auth(#[from] keel_auth::AuthError),
    /// A feature a client reached that this build does not have yet.
    #[error("{0}")]
    Unimplemented(String),
}

/// keel-store's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<rocksdb::Error> for Error {
    fn from(e: rocksdb::Error) -> Self {
        Error::Io(e.to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

impl From<prost::DecodeError> for Error {
    fn from(e: prost::DecodeError) -> Self {
        Error::Corrupt(e.to_string())
    }
}

impl From<crate::bbolt::Error> for Error {
    fn from(e: crate::bbolt::Error) -> Self {
        Error::Corrupt(e.to_string())
    }
}

impl From<bincode::Error> for Error {
    fn from(e: bincode::Error) -> Self {
        Error::Corrupt(e.to_string())
    }
}
