//! A Raft snapshot's bytes as openraft handles them (`TypeConfig::SnapshotData`), and their
//! encoding: a u64 LE count of pairs, then for each pair its key and its value, each a u64 LE
//! length and the bytes (bincode's encoding of a `Vec<(Vec<u8>, Vec<u8>)>`).
//!
//! A snapshot this member built is never held as bytes: it is an engine snapshot (a
//! point-in-time view of the state-machine pairs) encoded a piece at a time as openraft reads it
//! to send it. Every reader shares the one engine snapshot; each holds one piece.
//!
//! A snapshot received from the leader is spooled into a file in the engine's spill directory
//! (in memory for an engine without one, the in-memory engine) and read back a piece at a time
//! when it is installed. The file is removed when the data is dropped, unless the process dies
//! first: then the install marker names it and the install is finished at start-up.

use std::fs::File;
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use crate::engine::{Pair, Reads};
use crate::error::{Error, Result};
use crate::raft::state_machine::{for_each_pair_from, Resume};

/// Bytes a built snapshot's reader encodes at a time.
const PIECE: usize = 256 * 1024;

/// Bytes one pair takes in the encoding.
fn pair_len(k: &[u8], v: &[u8]) -> u64 {
    16 + k.len() as u64 + v.len() as u64
}

fn encode_pair(out: &mut Vec<u8>, k: &[u8], v: &[u8]) {
    for s in [k, v] {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
    }
}

/// A built snapshot: the engine snapshot it encodes, and the encoding's size.
pub struct Built {
    reads: Arc<dyn Reads>,
    count: u64,
    len: u64,
}

impl Built {
    /// The snapshot of the state-machine pairs `reads` holds (one pass, to size it).
    pub fn of(reads: Arc<dyn Reads>) -> Result<Arc<Built>> {
        let (mut count, mut len) = (0u64, 8u64);
        for_each_pair_from(&*reads, Resume::start(), &mut |k, v| {
            count += 1;
            len += pair_len(k, v);
            true
        })?;
        Ok(Arc::new(Built { reads, count, len }))
    }

    /// The encoded snapshot's size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Reads a [`Built`] snapshot's encoding: one piece, `[at, at + piece.len())`, in memory.
struct Encoder {
    built: Arc<Built>,
    piece: Vec<u8>,
    at: u64,
    /// Where the next piece's pairs start; `None` once every pair is encoded.
    next: Option<Resume>,
}

impl Encoder {
    fn new(built: Arc<Built>) -> Self {
        let mut piece = Vec::with_capacity(PIECE);
        piece.extend_from_slice(&built.count.to_le_bytes());
        Encoder { built, piece, at: 0, next: Some(Resume::start()) }
    }

    /// Encodes the next piece; false at the end.
    fn advance(&mut self) -> Result<bool> {
        let Some(from) = self.next.take() else { return Ok(false) };
        self.at += self.piece.len() as u64;
        self.piece.clear();
        let piece = &mut self.piece;
        self.next = for_each_pair_from(&*self.built.reads, from, &mut |k, v| {
            encode_pair(piece, k, v);
            piece.len() < PIECE
        })?;
        Ok(true)
    }

    /// Copies the bytes at `pos` into `buf`: 0 at the end.
    fn read_at(&mut self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        if pos < self.at {
            *self = Encoder::new(self.built.clone());
        }
        while pos >= self.at + self.piece.len() as u64 {
            if !self.advance()? {
                return Ok(0);
            }
        }
        let from = (pos - self.at) as usize;
        let n = buf.len().min(self.piece.len() - from);
        buf[..n].copy_from_slice(&self.piece[from..from + n]);
        Ok(n)
    }
}

/// Where a received snapshot is spooled.
enum Spool {
    Memory(Cursor<Vec<u8>>),
    /// A file, removed when the spool is dropped.
    File(File, PathBuf),
}

impl Drop for Spool {
    fn drop(&mut self) {
        if let Spool::File(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Snapshot bytes and a position in them.
pub struct SnapshotData {
    inner: Inner,
    pos: u64,
}

enum Inner {
    Built(Box<Encoder>),
    Received(Spool),
}

impl std::fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.inner {
            Inner::Built(e) => format!("built snapshot of {} bytes", e.built.len),
            Inner::Received(Spool::Memory(c)) => format!("received snapshot of {} bytes", c.get_ref().len()),
            Inner::Received(Spool::File(_, path)) => format!("received snapshot in {}", path.display()),
        };
        f.debug_struct("SnapshotData").field("data", &what).field("pos", &self.pos).finish()
    }
}

fn io(e: Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl SnapshotData {
    /// A reader of a built snapshot.
    pub fn built(built: Arc<Built>) -> Self {
        Self { inner: Inner::Built(Box::new(Encoder::new(built))), pos: 0 }
    }

    /// An empty spool to receive a snapshot into: a new file in `dir` (created if missing), or
    /// memory without one.
    pub fn receiving(dir: Option<&Path>) -> io::Result<Self> {
        let spool = match dir {
            None => Spool::Memory(Cursor::new(Vec::new())),
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                let (file, path) = tempfile::Builder::new().prefix("snapshot-").tempfile_in(dir)?.keep()?;
                Spool::File(file, path)
            }
        };
        Ok(Self { inner: Inner::Received(spool), pos: 0 })
    }

    /// Reopens a spool file left by an install the process did not live to finish.
    pub fn reopen(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        Ok(Self { inner: Inner::Received(Spool::File(file, path.to_path_buf())), pos: 0 })
    }

    /// The file the data is spooled in, if it is.
    pub fn file(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Received(Spool::File(_, path)) => Some(path),
            _ => None,
        }
    }

    /// The pairs encoded in the data, read a piece at a time. The whole encoding is checked
    /// first, so a truncated or malformed one is refused before any pair is yielded.
    pub fn pairs(&mut self) -> Result<impl Iterator<Item = Result<Pair>> + '_> {
        let corrupt = || Error::Corrupt("malformed snapshot data".into());
        let end = self.seek(SeekFrom::End(0))?;
        self.seek(SeekFrom::Start(0))?;
        let mut r = io::BufReader::with_capacity(PIECE, &mut *self);
        let count = read_u64(&mut r)?.ok_or_else(corrupt)?;
        let mut at = 8u64;
        for _ in 0..count.saturating_mul(2) {
            let len = read_u64(&mut r)?.ok_or_else(corrupt)?;
            at = at.checked_add(8).and_then(|a| a.checked_add(len)).filter(|e| *e <= end).ok_or_else(corrupt)?;
            r.seek_relative(len as i64)?;
        }
        if at != end {
            return Err(corrupt());
        }
        r.seek(SeekFrom::Start(8))?;
        let mut bytes = move || -> Result<Vec<u8>> {
            let len = read_u64(&mut r)?.ok_or_else(corrupt)?;
            let mut b = vec![0; usize::try_from(len).map_err(|_| corrupt())?];
            r.read_exact(&mut b)?;
            Ok(b)
        };
        Ok((0..count).map(move |_| Ok((bytes()?, bytes()?))))
    }
}

/// A u64 LE, or `None` at the end of the data.
fn read_u64(r: &mut impl Read) -> io::Result<Option<u64>> {
    let mut b = [0; 8];
    match r.read_exact(&mut b) {
        Ok(()) => Ok(Some(u64::from_le_bytes(b))),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

impl Read for SnapshotData {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match &mut self.inner {
            Inner::Built(e) => e.read_at(self.pos, buf).map_err(io)?,
            Inner::Received(Spool::Memory(c)) => {
                c.set_position(self.pos);
                c.read(buf)?
            }
            Inner::Received(Spool::File(f, _)) => {
                f.seek(SeekFrom::Start(self.pos))?;
                f.read(buf)?
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for SnapshotData {
    /// Writes at the position, as a `Cursor<Vec<u8>>` does (zeros fill a gap).
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = match &mut self.inner {
            Inner::Built(_) => {
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, "a built snapshot is read only"))
            }
            Inner::Received(Spool::Memory(c)) => {
                c.set_position(self.pos);
                c.write(data)?
            }
            Inner::Received(Spool::File(f, _)) => {
                f.seek(SeekFrom::Start(self.pos))?;
                f.write(data)?
            }
        };
        self.pos += n as u64;
        Ok(n)
    }

    /// A spool file is made durable (a received snapshot is installed from it, and finished
    /// from it after a crash).
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.inner {
            Inner::Received(Spool::File(f, _)) => f.sync_all(),
            _ => Ok(()),
        }
    }
}

impl Seek for SnapshotData {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let (base, offset) = match to {
            SeekFrom::Start(n) => {
                self.pos = n;
                return Ok(n);
            }
            SeekFrom::End(n) => {
                let end = match &mut self.inner {
                    Inner::Built(e) => e.built.len,
                    Inner::Received(Spool::Memory(c)) => c.get_ref().len() as u64,
                    Inner::Received(Spool::File(f, _)) => f.metadata()?.len(),
                };
                (end, n)
            }
            SeekFrom::Current(n) => (self.pos, n),
        };
        self.pos = base
            .checked_add_signed(offset)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

// openraft reads and writes the data through tokio's traits; the work is synchronous (a piece of
// an engine snapshot, or a file the kernel buffers), as the state machine's own reads are.

impl AsyncRead for SnapshotData {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = this.read(buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(self.get_mut().write(data))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().flush())
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().flush())
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        self.get_mut().seek(to).map(|_| ())
    }

    fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(self.pos))
    }
}

#[cfg(test)]
mod tests {
    use std::io::SeekFrom;
    use std::path::Path;

    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    use super::{Built, Pair, Result, SnapshotData, PIECE};
    use crate::engine::{Batch, Engine, MemEngine};
    use crate::mvcc::keys;

    /// An engine with `n` state-machine pairs (and a Raft log record, which is not one).
    fn engine(n: usize) -> MemEngine {
        let e = MemEngine::new();
        let mut b = Batch::default();
        for i in 0..n {
            b.put(keys::sm_meta(&format!("k{i:06}")), vec![i as u8; i % 300]);
        }
        b.put(keys::raft_meta("vote"), b"not state".to_vec());
        e.write(b, true).unwrap();
        e
    }

    /// The encoding, written the plain way.
    fn plain(e: &MemEngine) -> Vec<u8> {
        let pairs = crate::raft::state_machine::dump_of(e).unwrap();
        bincode::serialize(&pairs).unwrap()
    }

    #[tokio::test]
    async fn a_built_snapshot_reads_as_its_encoding_in_pieces_and_after_seeks() {
        let e = engine(5000);
        let want = plain(&e);
        assert!(want.len() > 2 * PIECE, "more than one piece");
        let built = Built::of(e.snapshot()).unwrap();
        assert_eq!(built.len(), want.len() as u64);
        // Writes after the build are not in it.
        let mut b = Batch::default();
        b.put(keys::sm_meta("later"), b"x".to_vec());
        e.write(b, true).unwrap();

        let mut r = SnapshotData::built(built.clone());
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        assert!(got == want, "the encoding differs");
        for at in [want.len() as u64 - 3, 5, PIECE as u64 + 17, 0] {
            r.seek(SeekFrom::Start(at)).await.unwrap();
            let mut chunk = vec![0; 1000];
            let n = r.read(&mut chunk).await.unwrap();
            assert!(n > 0 && chunk[..n] == want[at as usize..at as usize + n], "read at {at}");
        }
        assert_eq!(r.seek(SeekFrom::End(0)).await.unwrap(), want.len() as u64);
        assert!(r.write_all(b"x").await.is_err(), "a built snapshot is read only");
    }

    #[tokio::test]
    async fn a_received_snapshot_spools_to_a_file_and_yields_its_pairs() {
        let e = engine(3000);
        let want = crate::raft::state_machine::dump_of(&e).unwrap();
        let dir = tempfile::tempdir().unwrap();
        for spill in [None, Some(dir.path())] {
            let mut received = SnapshotData::receiving(spill).unwrap();
            let mut sent = SnapshotData::built(Built::of(e.snapshot()).unwrap());
            tokio::io::copy(&mut sent, &mut received).await.unwrap();
            received.flush().await.unwrap();
            assert_eq!(received.file().is_some(), spill.is_some());
            let got: Vec<Pair> = received.pairs().unwrap().collect::<Result<_>>().unwrap();
            assert!(got == want, "the pairs differ");
            let path = received.file().map(Path::to_path_buf);
            drop(received);
            assert!(path.is_none_or(|p| !p.exists()), "the spool file outlived its data");
        }
    }

    #[tokio::test]
    async fn malformed_data_is_refused_before_any_pair() {
        let e = engine(50);
        let good = plain(&e);
        let mut cases: Vec<Vec<u8>> = (0..good.len()).step_by(7).map(|cut| good[..cut].to_vec()).collect();
        cases.push([good.clone(), vec![0]].concat());
        let mut huge = good.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        cases.push(huge);
        for bad in cases {
            let mut d = SnapshotData::receiving(None).unwrap();
            d.write_all(&bad).await.unwrap();
            assert!(d.pairs().is_err(), "{} bytes of data were taken", bad.len());
        }
        let mut d = SnapshotData::receiving(None).unwrap();
        d.write_all(&good).await.unwrap();
        assert_eq!(d.pairs().unwrap().count(), 50);
    }
}
