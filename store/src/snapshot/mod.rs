//! Snapshot files: what `etcdctl snapshot save` fetches from Maintenance.Snapshot, and what
//! `keel snapshot restore` turns into the data directory of a new cluster's member.
//!
//! keel serves etcd's own format ([`etcd`]: a bbolt database, then the SHA-256 of it), so etcd's
//! tooling reads what it saves from keel (`etcdctl snapshot status`, etcd's restore) and keel
//! restores what etcd 3.4 or 3.5 saved, with every revision. A restore tells the formats apart by
//! their first bytes; it also reads the format keel served before ([`keel`]).

pub mod etcd;
pub mod keel;

use std::io::{BufWriter, Read, Seek};
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::bbolt;
use crate::config::Config;
use crate::engine::{Batch, Engine, Reads, RocksEngine};
use crate::mvcc::{Mvcc, REPLACE_BATCH_BYTES};
use crate::raft::state_machine::restorable;

/// Bytes of the SHA-256 etcd appends to a snapshot.
const SUM: u64 = 32;

/// etcd's test for a snapshot that carries its SHA-256: 32 bytes more than a multiple of 512.
fn has_sum(len: u64) -> bool {
    len % 512 == SUM
}

/// Streams the snapshot of the state-machine pairs in `r` (an engine snapshot, so the pairs are
/// one applied state) as etcd's file, in chunks of at most `chunk` bytes: `emit(chunk, bytes
/// still to come)`, until it returns false (the receiver went away). The bbolt file is built in
/// an unlinked temporary file in `spill` (the system's temporary directory without one), then
/// read back a chunk at a time with its SHA-256 computed on the way.
pub fn stream(
    r: &dyn Reads,
    spill: Option<&Path>,
    chunk: usize,
    mut emit: impl FnMut(Vec<u8>, u64) -> bool,
) -> crate::Result<()> {
    let file = match spill {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            tempfile::tempfile_in(dir)?
        }
        None => tempfile::tempfile()?,
    };
    let mut file = etcd::export(r, BufWriter::new(file))?.into_inner().map_err(|e| e.into_error())?;
    let mut remaining = file.stream_position()? + SUM;
    file.rewind()?;
    let mut sum = Sha256::new();
    let chunk = chunk.max(1);
    loop {
        let mut buf = vec![0; chunk.min((remaining - SUM) as usize)];
        if buf.is_empty() {
            break;
        }
        file.read_exact(&mut buf)?;
        sum.update(&buf);
        remaining -= buf.len() as u64;
        if !emit(buf, remaining) {
            return Ok(());
        }
    }
    emit(sum.finalize().to_vec(), 0);
    Ok(())
}

/// Go's `%v` of a byte slice, as etcd's hash mismatch error prints it: `[1 2 3]`.
fn go_bytes(b: &[u8]) -> String {
    let parts: Vec<String> = b.iter().map(u8::to_string).collect();
    format!("[{}]", parts.join(" "))
}

/// The bbolt database of an etcd snapshot file, checked against its SHA-256 as etcd's restore
/// checks it (with etcd's messages).
fn etcd_body(bytes: &[u8], skip_hash_check: bool) -> anyhow::Result<&[u8]> {
    if !has_sum(bytes.len() as u64) {
        if !skip_hash_check {
            anyhow::bail!("snapshot missing hash but --skip-hash-check=false");
        }
        return Ok(bytes);
    }
    let (body, sum) = bytes.split_at(bytes.len() - SUM as usize);
    let got = Sha256::digest(body);
    if !skip_hash_check && got.as_slice() != sum {
        anyhow::bail!("expected sha256 {}, got {}", go_bytes(sum), go_bytes(&got));
    }
    Ok(body)
}

/// What a restore brought over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// The restored store's revision.
    pub rev: i64,
    /// History entries written (every key revision and tombstone).
    pub revisions: u64,
}

/// `keel snapshot restore FILE [flags]`: a new data directory holding the snapshot's keyspace,
/// history, leases and auth, from which `keel` started with the same `--name`,
/// `--initial-cluster`, `--initial-cluster-token` and `--initial-advertise-peer-urls`
/// bootstraps a new cluster (each member restores the same file into its own data directory,
/// as with etcd). A file that does not read leaves no data directory behind.
pub fn restore(file: &Path, cfg: &Config, skip_hash_check: bool) -> anyhow::Result<Restored> {
    if cfg.data_dir.exists() {
        anyhow::bail!("data-dir {:?} exists", cfg.data_dir);
    }
    let bytes = std::fs::read(file)?;
    let result = fill(&bytes, &cfg.data_dir, skip_hash_check);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&cfg.data_dir);
    }
    result
}

/// Writes the snapshot in `bytes` into a new data directory `dir`.
fn fill(bytes: &[u8], dir: &Path, skip_hash_check: bool) -> anyhow::Result<Restored> {
    if keel::looks_like(bytes) {
        let pairs = keel::decode(bytes).map_err(anyhow::Error::msg)?;
        let engine = open(dir)?;
        let (mut sink, mut revisions) = (Sink::new(&*engine), 0);
        for (k, v) in pairs.into_iter().filter(|(k, _)| restorable(k)) {
            revisions += u64::from(k.first() == Some(&crate::mvcc::keys::HISTORY));
            sink.put(k, v)?;
        }
        sink.finish()?;
        return Ok(Restored { rev: Mvcc::open(engine)?.current_rev(), revisions });
    }
    if !bbolt::looks_like(bytes) {
        anyhow::bail!("not a snapshot file: neither etcd's (a bbolt database) nor keel's");
    }
    let file = bbolt::File::open(etcd_body(bytes, skip_hash_check)?)?;
    let engine = open(dir)?;
    let mut sink = Sink::new(&*engine);
    let imported = etcd::import(&file, &mut |k, v| sink.put(k, v))?;
    sink.finish()?;
    if let Some(rev) = imported.scheduled {
        // etcd finishes a compaction it had scheduled when it starts; so does the restore.
        let mvcc = Mvcc::open(engine)?;
        let mut batch = mvcc.apply(false);
        batch.compact(rev);
        batch.commit(true)?;
    }
    Ok(Restored { rev: imported.rev, revisions: imported.revisions })
}

fn open(dir: &Path) -> anyhow::Result<Arc<dyn Engine>> {
    std::fs::create_dir_all(dir)?;
    Ok(Arc::new(RocksEngine::open(&dir.join("db"))?))
}

/// Writes pairs into an engine in batches of about [`REPLACE_BATCH_BYTES`], the last synced.
struct Sink<'e> {
    engine: &'e dyn Engine,
    batch: Batch,
    bytes: usize,
}

impl<'e> Sink<'e> {
    fn new(engine: &'e dyn Engine) -> Self {
        Sink { engine, batch: Batch::default(), bytes: 0 }
    }

    fn put(&mut self, k: Vec<u8>, v: Vec<u8>) -> anyhow::Result<()> {
        self.bytes += k.len() + v.len();
        self.batch.put(k, v);
        if self.bytes >= REPLACE_BATCH_BYTES {
            self.engine.write(std::mem::take(&mut self.batch), false)?;
            self.bytes = 0;
        }
        Ok(())
    }

    /// Writes what is left, synced (and with it everything before).
    fn finish(self) -> anyhow::Result<()> {
        self.engine.write(self.batch, true)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_hash_rules() {
        let mut file = vec![7u8; 1024];
        file.extend_from_slice(&Sha256::digest(&file));
        assert_eq!(etcd_body(&file, false).unwrap().len(), 1024);
        let mut bad = file.clone();
        bad[3] ^= 1;
        let err = etcd_body(&bad, false).unwrap_err().to_string();
        assert!(err.starts_with("expected sha256 ["), "{err}");
        assert_eq!(etcd_body(&bad, true).unwrap().len(), 1024);
        assert_eq!(
            etcd_body(&file[..1024], false).unwrap_err().to_string(),
            "snapshot missing hash but --skip-hash-check=false"
        );
        assert_eq!(etcd_body(&file[..1024], true).unwrap().len(), 1024);
        assert_eq!(go_bytes(&[1, 22, 255]), "[1 22 255]");
    }

    #[test]
    fn streamed_in_chunks_it_is_one_file_with_its_sum() {
        let engine = crate::engine::MemEngine::new();
        let mut batch = Batch::default();
        for i in 1..300i64 {
            let kv = keel_proto::mvccpb::KeyValue { key: vec![b'k'; 3].into(), mod_revision: i, ..Default::default() };
            batch.put(
                crate::mvcc::keys::rev_key(crate::mvcc::keys::Rev::new(i, 0), false),
                prost::Message::encode_to_vec(&kv),
            );
        }
        engine.write(batch, false).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut whole = None;
        for chunk in [1000, 4096, 1 << 20] {
            let (mut file, mut said) = (Vec::new(), Vec::new());
            stream(&engine, Some(dir.path()), chunk, |c, remaining| {
                assert!(c.len() <= chunk);
                file.extend_from_slice(&c);
                said.push(remaining);
                true
            })
            .unwrap();
            assert!(has_sum(file.len() as u64));
            assert_eq!(said.last(), Some(&0));
            assert!(said.windows(2).all(|w| w[0] > w[1]));
            assert_eq!(said[0] as usize, file.len() - chunk.min(file.len() - 32));
            let body = etcd_body(&file, false).unwrap();
            bbolt::File::open(body).unwrap();
            assert_eq!(*whole.get_or_insert_with(|| file.clone()), file, "chunks of {chunk}");
        }
        // A receiver that goes away stops the stream.
        let mut calls = 0;
        stream(&engine, None, 64, |_, _| {
            calls += 1;
            false
        })
        .unwrap();
        assert_eq!(calls, 1);
    }
}
