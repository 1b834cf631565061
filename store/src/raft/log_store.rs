//! The Raft log and vote on the storage engine.
//!
//! Durability: `append` writes its entries in one batch without waiting, and reports them
//! flushed only once the [`Syncer`] says a sync covered them (group commit: many appends, one
//! sync). `save_vote` and `truncate` are synced before they return. Purging records the last
//! purged log id in the same batch that deletes the entries, and is synced too: the state
//! machine's writes before it, which the purged entries could otherwise rebuild, must survive
//! any crash that the purge survives.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, LogState, RaftLogReader, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{io_err, LogId, StorageError, TypeConfig};
use crate::engine::{Batch, Engine, Syncer};
use crate::mvcc::keys;
use crate::mvcc::keys::raft_meta::{COMMITTED, PURGED, VOTE};

type Entry = openraft::Entry<TypeConfig>;

/// The Raft log store. Clones share the engine and the syncer.
#[derive(Clone)]
pub struct LogStore {
    engine: Arc<dyn Engine>,
    syncer: Syncer,
}

impl LogStore {
    pub fn new(engine: Arc<dyn Engine>, syncer: Syncer) -> Self {
        Self { engine, syncer }
    }

    fn get_meta<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StorageError> {
        let raw =
            self.engine.get(&keys::raft_meta(name)).map_err(|e| io_err(e, ErrorSubject::Store, ErrorVerb::Read))?;
        raw.map(|b| bincode::deserialize(&b)).transpose().map_err(|e| io_err(e, ErrorSubject::Store, ErrorVerb::Read))
    }

    fn put_meta<T: Serialize>(&self, name: &str, v: &T, sync: bool) -> Result<(), StorageError> {
        let mut b = Batch::default();
        b.put(keys::raft_meta(name), bincode::serialize(v).expect("raft metadata serializes"));
        self.engine.write(b, sync).map_err(|e| io_err(e, ErrorSubject::Store, ErrorVerb::Write))
    }
}

fn bound_start(b: Bound<&u64>) -> u64 {
    match b {
        Bound::Included(i) => *i,
        Bound::Excluded(i) => i + 1,
        Bound::Unbounded => 0,
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = keys::log_key(bound_start(range.start_bound()));
        let end = match range.end_bound() {
            Bound::Included(i) if *i == u64::MAX => keys::prefix_end(keys::LOG),
            Bound::Included(i) => keys::log_key(i + 1),
            Bound::Excluded(i) => keys::log_key(*i),
            Bound::Unbounded => keys::prefix_end(keys::LOG),
        };
        let pairs = self.engine.scan(&start, &end).map_err(|e| io_err(e, ErrorSubject::Logs, ErrorVerb::Read))?;
        pairs
            .iter()
            .map(|(_, v)| bincode::deserialize::<Entry>(v).map_err(|e| io_err(e, ErrorSubject::Logs, ErrorVerb::Read)))
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged: Option<LogId> = self.get_meta(PURGED)?;
        let last = self
            .engine
            .last(&[keys::LOG], &keys::prefix_end(keys::LOG))
            .map_err(|e| io_err(e, ErrorSubject::Logs, ErrorVerb::Read))?;
        let last_log_id = match last {
            Some((_, v)) => Some(
                bincode::deserialize::<Entry>(&v).map_err(|e| io_err(e, ErrorSubject::Logs, ErrorVerb::Read))?.log_id,
            ),
            None => last_purged,
        };
        Ok(LogState { last_purged_log_id: last_purged, last_log_id })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        self.put_meta(VOTE, vote, true)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        self.get_meta(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not synced: losing it only means re-learning the commit index from the log and peers.
        self.put_meta(COMMITTED, &committed, false)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.get_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut b = Batch::default();
        for e in entries {
            let bytes = bincode::serialize(&e).map_err(|e| io_err(e, ErrorSubject::Logs, ErrorVerb::Write))?;
            b.put(keys::log_key(e.log_id.index), bytes);
        }
        match self.engine.write(b, false) {
            Ok(()) => {
                self.syncer.after_sync(move |r| callback.log_io_completed(r.clone().map_err(std::io::Error::other)));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(io_err(e, ErrorSubject::Logs, ErrorVerb::Write))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut b = Batch::default();
        b.delete_range(keys::log_key(log_id.index), keys::prefix_end(keys::LOG));
        self.engine.write(b, true).map_err(|e| io_err(e, ErrorSubject::Logs, ErrorVerb::Delete))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut b = Batch::default();
        b.put(keys::raft_meta(PURGED), bincode::serialize(&log_id).expect("log id serializes"));
        b.delete_range(keys::log_key(0), keys::log_key(log_id.index + 1));
        self.engine.write(b, true).map_err(|e| io_err(e, ErrorSubject::Logs, ErrorVerb::Delete))
    }
}
