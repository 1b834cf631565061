//! A Raft snapshot's bytes as openraft handles them (`TypeConfig::SnapshotData`). A snapshot
//! this member built is one buffer, shared by the copy it keeps and every reader openraft opens
//! to send it to a follower (a `Cursor<Vec<u8>>` would be a whole copy per send). A snapshot
//! being received from the leader is written into a buffer of its own.

use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

/// Snapshot bytes and a position in them.
#[derive(Debug)]
pub struct SnapshotData {
    bytes: Bytes,
    pos: u64,
}

#[derive(Debug)]
enum Bytes {
    /// A built snapshot: read only.
    Shared(Arc<Vec<u8>>),
    /// A snapshot being received.
    Receiving(Vec<u8>),
}

impl SnapshotData {
    /// A reader of a built snapshot.
    pub fn shared(bytes: Arc<Vec<u8>>) -> Self {
        Self { bytes: Bytes::Shared(bytes), pos: 0 }
    }

    /// An empty buffer to receive a snapshot into.
    pub fn receiving() -> Self {
        Self { bytes: Bytes::Receiving(Vec::new()), pos: 0 }
    }

    fn as_slice(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Shared(b) => b,
            Bytes::Receiving(b) => b,
        }
    }

    /// The bytes, shared with whoever else holds them.
    pub fn into_shared(self) -> Arc<Vec<u8>> {
        match self.bytes {
            Bytes::Shared(b) => b,
            Bytes::Receiving(b) => Arc::new(b),
        }
    }
}

impl AsyncRead for SnapshotData {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let bytes = self.as_slice();
        let from = usize::try_from(self.pos).unwrap_or(usize::MAX).min(bytes.len());
        let n = buf.remaining().min(bytes.len() - from);
        buf.put_slice(&bytes[from..from + n]);
        self.pos += n as u64;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SnapshotData {
    /// Writes at the position, as a `Cursor<Vec<u8>>` does (zeros fill a gap).
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let pos = usize::try_from(self.pos).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let Bytes::Receiving(bytes) = &mut self.bytes else {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::PermissionDenied, "a built snapshot is read only")));
        };
        let end = pos.checked_add(data.len()).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[pos..end].copy_from_slice(data);
        self.pos = end as u64;
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(mut self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        let (base, offset) = match to {
            SeekFrom::Start(n) => {
                self.pos = n;
                return Ok(());
            }
            SeekFrom::End(n) => (self.as_slice().len() as u64, n),
            SeekFrom::Current(n) => (self.pos, n),
        };
        self.pos = base
            .checked_add_signed(offset)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(self.pos))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn reads_seeks_and_receives_as_a_cursor_does() {
        let mut received = SnapshotData::receiving();
        received.write_all(b"hello ").await.unwrap();
        received.seek(SeekFrom::Start(8)).await.unwrap();
        received.write_all(b"world").await.unwrap();
        let bytes = received.into_shared();
        assert_eq!(bytes.as_slice(), b"hello \0\0world");

        let (mut a, mut b) = (SnapshotData::shared(bytes.clone()), SnapshotData::shared(bytes.clone()));
        assert!(a.write_all(b"x").await.is_err(), "a built snapshot is read only");
        a.seek(SeekFrom::End(-5)).await.unwrap();
        let mut s = String::new();
        a.read_to_string(&mut s).await.unwrap();
        assert_eq!(s, "world");
        let mut head = [0; 5];
        b.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"hello");
        assert!(b.seek(SeekFrom::Current(-6)).await.is_err());
        assert_eq!(Arc::strong_count(&bytes), 3, "the readers share the bytes");
    }
}
