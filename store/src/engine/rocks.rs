//! The production engine: one RocksDB instance holding every keel key (prefixes keep the MVCC
//! history, metadata and the Raft log apart; see `mvcc::keys`). A synced write flushes RocksDB's
//! WAL with fsync, which also makes every earlier unsynced write durable.

use std::path::Path;
use std::sync::Arc;

use rocksdb::{Direction, IteratorMode, Options, ReadOptions, WriteOptions, DB};

use super::{Batch, BatchOp, Engine, Pair};
use crate::error::Result;

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
        let db = DB::open(&opts, dir)?;
        Ok(Self { db: Arc::new(db) })
    }

    fn bounded(start: &[u8], end: &[u8]) -> ReadOptions {
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(start.to_vec());
        ro.set_iterate_upper_bound(end.to_vec());
        ro
    }
}

impl Engine for RocksEngine {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }

    fn scan(&self, start: &[u8], end: &[u8]) -> Result<Vec<Pair>> {
        let mut out = Vec::new();
        self.for_each(start, end, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            true
        })?;
        Ok(out)
    }

    fn for_each(&self, start: &[u8], end: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        if start >= end {
            return Ok(());
        }
        let it = self.db.iterator_opt(IteratorMode::From(start, Direction::Forward), Self::bounded(start, end));
        for item in it {
            let (k, v) = item?;
            if !f(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    fn last(&self, start: &[u8], end: &[u8]) -> Result<Option<Pair>> {
        if start >= end {
            return Ok(None);
        }
        let mut it = self.db.iterator_opt(IteratorMode::End, Self::bounded(start, end));
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
                BatchOp::Put(k, v) => wb.put(k, v),
                BatchOp::Delete(k) => wb.delete(k),
                BatchOp::DeleteRange(s, e) => wb.delete_range(s, e),
            }
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        self.db.write_opt(wb, &wo)?;
        Ok(())
    }

    fn size_on_disk(&self) -> u64 {
        let live = self.db.property_int_value("rocksdb.total-sst-files-size").ok().flatten().unwrap_or(0);
        let mem = self.db.property_int_value("rocksdb.cur-size-all-mem-tables").ok().flatten().unwrap_or(0);
        live + mem
    }
}
