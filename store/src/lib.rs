//! keel-store: an etcd-compatible, Raft-replicated, revisioned key-value store over RocksDB.
//!
//! Map (see `shared/DESIGN.md`): [`engine`] is the storage seam; [`mvcc`] the revisioned keyspace
//! and etcd's KV semantics; [`raft`] openraft's log store, state machine and network; [`server`]
//! the gRPC and HTTP edge, the only place that maps errors to etcd's codes and messages;
//! [`watch`] the watch hub fed by apply; [`lessor`] the leader's lease timers; [`config`] etcd's
//! flags; [`membership`] the Cluster service's view of Raft membership; [`node`] puts a member
//! together.

pub mod auth;
pub mod config;
pub mod engine;
pub mod error;
pub mod lessor;
pub mod membership;
pub mod mvcc;
pub mod node;
pub mod plant;
pub mod raft;
pub mod rounds;
pub mod server;
pub mod snapshot;
pub mod tls;
pub mod watch;

pub use error::{Error, Result};
