//! The production engine: one RocksDB instance holding every keel key (prefixes keep the MVCC
//! history, metadata and the Raft log apart; see `mvcc::keys`). A synced write flushes RocksDB's
//! WAL with fsync, which also makes every earlier unsynced write durable.
//!
//! The Raft log and Raft metadata (`keys::RAFT_PREFIXES`) live in their own column family, so the
//! state machine's size (what etcd calls the backend: `Status.dbSize`, the space quota) does not
//! count the log, and compacting the state machine never rewrites it. One write batch may touch
//! both families and stays atomic.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{ColumnFamily, Direction, IteratorMode, Options, ReadOptions, WriteOptions, DB};

use super::{Batch, BatchOp, Engine, Pair, Reads};
use crate::error::Result;
use crate::mvcc::keys;

/// The column family of the Raft log and metadata.
const RAFT_CF: &str = "raft";

/// RocksDB-backed engine. Cheap to clone.
#[derive(Clone)]
pub struct RocksEngine {
    db: Arc<DB>,
}

impl RocksEngine {
    /// Opens (or creates) the database in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        opts.increase_parallelism(2);
        opts.create_missing_column_families(true);
        let db = DB::open_cf(&opts, dir, [rocksdb::DEFAULT_COLUMN_FAMILY_NAME, RAFT_CF])?;
        Ok(Self { db: Arc::new(db) })
    }

    /// The column family a key (or a range starting at it) belongs to.
    fn cf(&self, key: &[u8]) -> &ColumnFamily {
        let name = match key.first() {
            Some(p) if keys::RAFT_PREFIXES.contains(p) => RAFT_CF,
            _ => rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
        };
        self.db.cf_handle(name).expect("column families are created at open")
    }

    fn state_property(&self, name: &str) -> u64 {
        self.db.property_int_value_cf(self.cf(&[keys::HISTORY]), name).ok().flatten().unwrap_or(0)
    }

    /// Calls `f` on every pair with `start <= key < end`, ascending, until it returns false,
    /// iterating with `open` (the database's iterator or a snapshot's).
    fn visit<'a, I>(
        &'a self,
        start: &'a [u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
        open: impl FnOnce(&'a ColumnFamily, ReadOptions, IteratorMode<'a>) -> I,
    ) -> Result<()>
    where
        I: Iterator<Item = std::result::Result<(Box<[u8]>, Box<[u8]>), rocksdb::Error>>,
    {
        if start >= end {
            return Ok(());
        }
        for item in open(self.cf(start), Self::bounded(start, end), IteratorMode::From(start, Direction::Forward)) {
            let (k, v) = item?;
            if !f(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    fn bounded(start: &[u8], end: &[u8]) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(start.to_vec());
        ro.set_iterate_upper_bound(end.to_vec());
        ro
    }
}

type DbSnapshot<'a> = rocksdb::Snapshot<'a>;

self_cell::self_cell!(
    /// A RocksDB snapshot, with the database it reads kept open: reads through it see the
    /// sequence number it was taken at.
    struct RocksSnapshot {
        owner: RocksEngine,
        #[covariant]
        dependent: DbSnapshot,
    }
);

impl Reads for RocksSnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.borrow_dependent().get_cf(self.borrow_owner().cf(key), key)?)
    }

    fn for_each(&self, start: &[u8], end: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let snapshot = self.borrow_dependent();
        self.borrow_owner().visit(start, end, f, |cf, ro, mode| snapshot.iterator_cf_opt(cf, ro, mode))
    }
}

impl Reads for RocksEngine {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_cf(self.cf(key), key)?)
    }

    fn for_each(&self, start: &[u8], end: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        self.visit(start, end, f, |cf, ro, mode| self.db.iterator_cf_opt(cf, ro, mode))
    }
}

impl Engine for RocksEngine {
    /// Inside the database's directory (RocksDB leaves files it does not know alone).
    fn spill_dir(&self) -> Option<PathBuf> {
        Some(self.db.path().join("incoming-snapshots"))
    }

    fn snapshot(&self) -> Arc<dyn Reads> {
        Arc::new(RocksSnapshot::new(self.clone(), |engine| engine.db.snapshot()))
    }

    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<Pair>> {
        let mut out = Vec::new();
        self.for_each(start, end, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            true
        })?;
        Ok(out)
    }

    fn last(&self, start: &[u8], end: &[u8]) -> Result<Option<Pair>> {
        if start >= end {
            return Ok(None);
        }
        let mut it = self.db.iterator_cf_opt(self.cf(start), Self::bounded(start, end), IteratorMode::End);
        match it.next() {
            Some(item) => {
                let (k, v) = item?;
                Ok(Some((k.to_vec(), v.to_vec())))
            }
            None => Ok(None),
        }
    }

    fn write(&self, batch: Batch, sync: bool) -> Result<()> {
        let mut wb = rocksdb::WriteBatch::default();
        for op in batch.ops {
            match op {
                BatchOp::Put(k, v) => wb.put_cf(self.cf(&k), &k, v),
                BatchOp::Delete(k) => wb.delete_cf(self.cf(&k), &k),
                BatchOp::DeleteRange(s, e) => wb.delete_range_cf(self.cf(&s), &s, &e),
            }
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(wb, &wo)?;
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        // Syncs the WAL, which every column family shares: all earlier writes are durable after.
        self.db.flush_wal(true)?;
        Ok(())
    }

    fn backend_size(&self) -> u64 {
        self.state_property("rocksdb.total-sst-files-size") + self.state_property("rocksdb.cur-size-all-mem-tables")
    }

    fn backend_size_in_use(&self) -> u64 {
        let live = self.state_property("rocksdb.estimate-live-data-size");
        (live + self.state_property("rocksdb.cur-size-all-mem-tables")).min(self.backend_size())
    }

    fn defragment(&self) -> Result<()> {
        let cf = self.cf(&[keys::HISTORY]);
        self.db.flush_cf(cf)?;
        let mut opts = rocksdb::CompactOptions::default();
        opts.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        self.db.compact_range_cf_opt(cf, None::<&[u8]>, None::<&[u8]>, &opts);
        Ok(())
    }
}
