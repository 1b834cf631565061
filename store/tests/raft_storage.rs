//! openraft's own storage conformance suite, run on keel's log store and state machine over both
//! engines (in-memory and RocksDB).

use std::sync::Arc;

use keel_store::engine::{Engine, MemEngine, RocksEngine, SyncMode, Syncer};
use keel_store::mvcc::Mvcc;
use keel_store::raft::log_store::LogStore;
use keel_store::raft::state_machine::StateMachine;
use keel_store::raft::{StorageError, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};

/// The in-memory engine syncs inline (as in the simulation), RocksDB on the sync thread (as in
/// the binary), so the suite covers both ways an append is reported flushed.
fn stores(engine: Arc<dyn Engine>, mode: SyncMode) -> (LogStore, StateMachine) {
    let mvcc = Arc::new(Mvcc::open(engine.clone()).expect("open mvcc"));
    let log = LogStore::new(engine.clone(), Syncer::new(engine, mode));
    // The suite applies synthetic entries with index gaps; a member refuses gaps.
    (log, StateMachine::open(mvcc).expect("open state machine").allow_gaps())
}

struct MemBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, ()> for MemBuilder {
    async fn build(&self) -> Result<((), LogStore, StateMachine), StorageError> {
        let (log, sm) = stores(Arc::new(MemEngine::new()), SyncMode::Inline);
        Ok(((), log, sm))
    }
}

struct RocksBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for RocksBuilder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = RocksEngine::open(dir.path()).expect("open rocksdb");
        let (log, sm) = stores(Arc::new(engine), SyncMode::Background);
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_suite_on_memory_engine() {
    Suite::test_all(MemBuilder).unwrap();
}

#[test]
fn openraft_suite_on_rocksdb() {
    Suite::test_all(RocksBuilder).unwrap();
}
