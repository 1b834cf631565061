//! The storage seam: one small ordered key-value engine behind which the keyspace, the MVCC
//! history, the Raft log and Raft's metadata all live.
//!
//! Two implementations: [`RocksEngine`] for production and [`MemEngine`] for simulation and unit
//! tests. The in-memory engine models durability: only what was written with `sync = true` (and
//! everything written before it) survives [`MemEngine::crash`], so "what was synced survives" is
//! tested, not assumed.
//!
//! Guarantees every engine gives:
//! - a [`Batch`] is applied atomically: after a crash either all of it or none of it is visible;
//! - `write(batch, true)` returns only once the batch and everything written before it is durable;
//!   so does `sync()` for everything written before it;
//! - scans return keys in ascending byte order.

mod memory;
mod rocks;
mod sync;

use std::path::PathBuf;
use std::sync::Arc;

pub use memory::MemEngine;
pub use rocks::RocksEngine;
pub use sync::{SyncMode, SyncResult, Syncer};

use crate::error::Result;

/// One key-value pair read from an engine.
pub type Pair = (Vec<u8>, Vec<u8>);

/// An atomic group of writes.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    pub(crate) ops: Vec<BatchOp>,
}

#[derive(Debug, Clone)]
pub(crate) enum BatchOp {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    /// Deletes every key in `[start, end)`.
    DeleteRange(Vec<u8>, Vec<u8>),
}

impl Batch {
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp::Put(key.into(), value.into()));
    }
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp::Delete(key.into()));
    }
    pub fn delete_range(&mut self, start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) {
        self.ops.push(BatchOp::DeleteRange(start.into(), end.into()));
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Point reads and ordered scans: of an engine's current state, or of a point-in-time
/// [`Engine::snapshot`].
pub trait Reads: Send + Sync {
    /// The value stored at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Calls `f` on every pair with `start <= key < end`, ascending, until it returns false.
    fn for_each(&self, start: &[u8], end: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()>;
}

/// An ordered, durable key-value engine.
pub trait Engine: Reads + 'static {
    /// A point-in-time view: every write made before it was taken, none made after. Reading it
    /// takes no lock a writer waits for, and writes go on while it is held (RocksDB keeps the
    /// versions it needs; the in-memory engine copies its map on the next write). It owns what
    /// it reads from, so it may outlive the borrow it was taken through.
    fn snapshot(&self) -> Arc<dyn Reads>;
    /// Every pair with `start <= key < end`, ascending, read from one consistent view.
    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<Pair>>;
    /// The last pair with `start <= key < end`.
    fn last(&self, start: &[u8], end: &[u8]) -> Result<Option<Pair>>;
    /// Applies `batch` atomically; with `sync`, returns only once it is durable.
    fn write(&self, batch: Batch, sync: bool) -> Result<()>;
    /// Returns once every write made before this call is durable (one sync for all of them; see
    /// [`Syncer`] for group commit).
    fn sync(&self) -> Result<()>;
    /// Approximate bytes the state machine (not the Raft log) takes on disk: etcd's backend size,
    /// reported as `Status.dbSize` and held against the space quota.
    fn backend_size(&self) -> u64;
    /// Approximate bytes of live state-machine data; the rest is reclaimed by [`Engine::defragment`].
    fn backend_size_in_use(&self) -> u64;
    /// Reclaims the space of deleted state-machine data, while reads and writes go on.
    fn defragment(&self) -> Result<()>;
    /// Where large transient files go (snapshots being received from a leader), beside the
    /// engine's data; `None` keeps them in memory (the in-memory engine).
    fn spill_dir(&self) -> Option<PathBuf> {
        None
    }
}
