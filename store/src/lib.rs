//! keel-store: an etcd-compatible, Raft-replicated, revisioned key-value store over RocksDB.
//!
//! Map (see `shared/DESIGN.md`): [`engine`] is the storage seam; [`mvcc`] the revisioned keyspace
//! and etcd's KV semantics; [`raft`] openraft's log store, state machine and network; [`server`]
//! the gRPC and HTTP edge, the only place that maps errors to etcd's codes and messages;
//! [`watch`] the watch hub fed by apply; [`lessor`] the leader's lease timers; [`config`] etcd's
//! flags; [`membership`] the Cluster service's view of Raft membership; [`node`] puts a member
//! together behind a small API.
//!
//! Durability: a write is acknowledged once its Raft entry is synced on a quorum and applied on
//! the member that answers. Applied batches are written unsynced; the synced Raft log is the
//! durable record, and a member applies it again after a crash before it answers any client.
//!
//! Lock order, for every lock in the store: a thread holding one of these takes only locks
//! further down the list, never one above it.
//! 1. `StateMachine`'s applied state (the applied log id and membership): held by apply and by
//!    snapshot install around their MVCC write.
//! 2. The watch hub's lock, or the lessor's deadlines (never both at once): each may read MVCC.
//! 3. The MVCC state lock: exclusive for an applied batch ([`mvcc::Mvcc::apply`]) or an
//!    installed snapshot ([`mvcc::Mvcc::replace`]), shared for reads. Apply publishes to the
//!    hub only after it released this lock. Whole-store reads hold it only to take an engine
//!    snapshot (and a Range or a read-only Txn to walk the index, a Range a piece at a time):
//!    they read the engine snapshot after releasing it, as do Hash, Maintenance.Snapshot and
//!    Raft snapshot builds and sends ([`mvcc::Mvcc::engine_snapshot`]; an install writes the
//!    engine in several batches under this lock, so no engine snapshot may be taken without it).
//! 4. Leaves, which take no other lock: the auth token table (taken under MVCC by Authenticate's
//!    apply and by token checks), the engines' own locks and the sync thread's queue, the
//!    proposal queue, ReadIndex rounds, the state machine's stored snapshot, peer channels, the
//!    gRPC counters and the member's task list.

pub mod auth;
pub mod bbolt;
pub mod config;
pub mod engine;
pub mod error;
pub mod lessor;
pub mod membership;
pub mod migrate;
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
