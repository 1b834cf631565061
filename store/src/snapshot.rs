//! keel's snapshot file: what `etcdctl snapshot save` writes from `Maintenance.Snapshot`, and what
//! `keel snapshot restore` turns into the data directory of a new cluster's member. It is not
//! etcd's bbolt file (README): the two stores keep different things on disk.
//!
//! ```text
//! "KEELSNAP" <version:4 BE> <count:8 BE> { <klen:4 BE> <key> <vlen:4 BE> <value> } x count
//!     <zeros up to a multiple of 512 bytes> <sha256:32>
//! ```
//! The pairs are the state machine's keys (`mvcc::keys::STATE_MACHINE`) at one applied index; the
//! SHA-256 covers everything before it, as etcd appends one to its snapshots. The padding keeps
//! the size at 32 more than a multiple of 512, which is how `etcdctl snapshot save` recognises a
//! snapshot that carries its checksum.

use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::engine::{Batch, Engine, Pair, Reads, RocksEngine};
use crate::raft::state_machine::{for_each_pair, restorable};

const MAGIC: &[u8; 8] = b"KEELSNAP";
const VERSION: u32 = 1;
/// The body is padded to a multiple of this many bytes.
const PAD: usize = 512;

/// Encodes state-machine pairs as a snapshot file.
pub fn encode(pairs: &[Pair]) -> Vec<u8> {
    let size = pairs.iter().map(|(k, v)| pair_size(k, v)).sum();
    let mut out = Vec::new();
    let mut w = Writer::new(pairs.len() as u64, size, usize::MAX, |chunk: Vec<u8>, _| {
        out.extend_from_slice(&chunk);
        true
    });
    for (k, v) in pairs {
        w.pair(k, v);
    }
    w.finish();
    out
}

/// Bytes one pair takes in the file.
fn pair_size(k: &[u8], v: &[u8]) -> u64 {
    8 + k.len() as u64 + v.len() as u64
}

/// Streams the snapshot file of every state-machine pair in `r` (an engine snapshot, so the
/// pairs are one applied state) in chunks of `chunk` bytes: `emit(chunk, bytes still to come)`,
/// until it returns false (the receiver went away). Two passes over `r`, the first to size the
/// file (its header counts the pairs, and every chunk says what remains), and at most one chunk
/// in memory at a time.
pub fn stream(r: &dyn Reads, chunk: usize, emit: impl FnMut(Vec<u8>, u64) -> bool) -> crate::Result<()> {
    let (mut count, mut size) = (0u64, 0u64);
    for_each_pair(r, &mut |k, v| {
        count += 1;
        size += pair_size(k, v);
        true
    })?;
    let mut w = Writer::new(count, size, chunk, emit);
    for_each_pair(r, &mut |k, v| w.pair(k, v))?;
    w.finish();
    Ok(())
}

/// Writes a snapshot file in chunks (see [`stream`]).
struct Writer<F> {
    buf: Vec<u8>,
    chunk: usize,
    sum: Sha256,
    /// Bytes of the file not yet emitted.
    remaining: u64,
    emit: F,
    open: bool,
}

impl<F: FnMut(Vec<u8>, u64) -> bool> Writer<F> {
    /// A writer for `count` pairs of `size` bytes in all (see [`pair_size`]); writes the header.
    fn new(count: u64, size: u64, chunk: usize, emit: F) -> Self {
        let body = (MAGIC.len() as u64 + 12 + size).div_ceil(PAD as u64) * PAD as u64;
        let mut w =
            Self { buf: Vec::new(), chunk: chunk.max(1), sum: Sha256::new(), remaining: body + 32, emit, open: true };
        w.bytes(MAGIC);
        w.bytes(&VERSION.to_be_bytes());
        w.bytes(&count.to_be_bytes());
        w
    }

    /// Writes one pair; false once the receiver went away.
    fn pair(&mut self, k: &[u8], v: &[u8]) -> bool {
        self.bytes(&(k.len() as u32).to_be_bytes());
        self.bytes(k);
        self.bytes(&(v.len() as u32).to_be_bytes());
        self.bytes(v);
        self.open
    }

    /// Writes bytes the checksum covers.
    fn bytes(&mut self, b: &[u8]) {
        self.sum.update(b);
        self.raw(b);
    }

    /// Writes bytes, emitting every full chunk.
    fn raw(&mut self, mut b: &[u8]) {
        while !b.is_empty() && self.open {
            let n = b.len().min(self.chunk - self.buf.len());
            self.buf.extend_from_slice(&b[..n]);
            b = &b[n..];
            if self.buf.len() == self.chunk {
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        if self.buf.is_empty() || !self.open {
            return;
        }
        let chunk = std::mem::take(&mut self.buf);
        self.remaining -= chunk.len() as u64;
        self.open = (self.emit)(chunk, self.remaining);
    }

    /// Pads the body to a multiple of [`PAD`], then appends the checksum of everything before it.
    fn finish(mut self) {
        if !self.open {
            return;
        }
        let pad = self.remaining - self.buf.len() as u64 - 32;
        self.bytes(&vec![0; pad as usize]);
        let sum = std::mem::take(&mut self.sum).finalize();
        self.raw(&sum);
        self.flush();
    }
}

/// Decodes a snapshot file; refuses a bad header, truncation or a checksum mismatch.
pub fn decode(bytes: &[u8]) -> Result<Vec<Pair>, String> {
    if bytes.len() < MAGIC.len() + 12 + 32 || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a keel snapshot file".into());
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != sum {
        return Err("snapshot file checksum mismatch".into());
    }
    let mut rest = &body[MAGIC.len()..];
    let mut take = |n: usize| -> Result<&[u8], String> {
        if rest.len() < n {
            return Err("truncated snapshot file".into());
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let version = u32::from_be_bytes(take(4)?.try_into().unwrap());
    if version != VERSION {
        return Err(format!("unsupported snapshot version {version}"));
    }
    let count = u64::from_be_bytes(take(8)?.try_into().unwrap());
    let mut pairs = Vec::new();
    for _ in 0..count {
        let klen = u32::from_be_bytes(take(4)?.try_into().unwrap()) as usize;
        let k = take(klen)?.to_vec();
        let vlen = u32::from_be_bytes(take(4)?.try_into().unwrap()) as usize;
        let v = take(vlen)?.to_vec();
        pairs.push((k, v));
    }
    if rest.len() >= PAD || rest.iter().any(|b| *b != 0) {
        return Err("trailing bytes in snapshot file".into());
    }
    Ok(pairs)
}

/// `keel snapshot restore FILE [flags]`: a new data directory holding the snapshot's keyspace and
/// leases, from which `keel` started with the same `--name`, `--initial-cluster`,
/// `--initial-cluster-token` and `--initial-advertise-peer-urls` bootstraps a new cluster (each
/// member restores the same file into its own data directory, as with etcd).
pub fn restore(file: &Path, cfg: &Config) -> anyhow::Result<()> {
    if cfg.data_dir.exists() {
        anyhow::bail!("data-dir {:?} exists", cfg.data_dir);
    }
    let bytes = std::fs::read(file)?;
    let pairs = decode(&bytes).map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(&cfg.data_dir)?;
    let engine: Arc<dyn Engine> = Arc::new(RocksEngine::open(&cfg.data_dir.join("db"))?);
    let mut batch = Batch::default();
    for (k, v) in pairs.into_iter().filter(|(k, _)| restorable(k)) {
        batch.put(k, v);
    }
    engine.write(batch, true)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_damage() {
        let pairs = vec![(b"r1".to_vec(), b"one".to_vec()), (b"m".to_vec(), Vec::new())];
        let file = encode(&pairs);
        assert_eq!(file.len() % 512, 32, "etcdctl looks for a SHA-256 after 512-byte blocks");
        assert_eq!(decode(&file).unwrap(), pairs);
        let mut flipped = file.clone();
        flipped[14] ^= 1;
        assert!(decode(&flipped).unwrap_err().contains("checksum"));
        assert!(decode(&file[..file.len() - 1]).is_err());
        assert!(decode(b"etcd bbolt file with some more bytes in it, long enough for a header").is_err());
    }

    #[test]
    fn streamed_in_chunks_it_is_the_same_file() {
        let engine = crate::engine::MemEngine::new();
        let mut batch = Batch::default();
        for i in 0..300u32 {
            let key = crate::mvcc::keys::rev_key(crate::mvcc::keys::Rev { main: i as i64 + 1, sub: 0 }, false);
            batch.put(key, vec![i as u8; (i % 97) as usize]);
        }
        engine.write(batch, false).unwrap();
        let whole = encode(&crate::raft::state_machine::dump_of(&engine).unwrap());
        for chunk in [1, 7, 512, 4096, 1 << 20] {
            let (mut file, mut said) = (Vec::new(), Vec::new());
            stream(&engine, chunk, |c, remaining| {
                assert!(c.len() <= chunk, "a chunk of {} bytes, over {chunk}", c.len());
                file.extend_from_slice(&c);
                said.push(remaining);
                true
            })
            .unwrap();
            assert_eq!(file, whole, "chunks of {chunk}");
            let expected: Vec<u64> = {
                let mut at = 0;
                let mut out = Vec::new();
                for c in file.chunks(chunk) {
                    at += c.len();
                    out.push((file.len() - at) as u64);
                }
                out
            };
            assert_eq!(said, expected, "what remains, in chunks of {chunk}");
        }
        // A receiver that goes away stops the stream.
        let mut calls = 0;
        stream(&engine, 64, |_, _| {
            calls += 1;
            false
        })
        .unwrap();
        assert_eq!(calls, 1);
    }
}
