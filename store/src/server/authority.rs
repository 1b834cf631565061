//! Accepts gRPC clients that send a malformed HTTP/2 `:authority`.
//!
//! etcd 3.4's clients (etcdctl `endpoint status`, `endpoint hashkv`, `defrag`, …) dial each
//! endpoint with a target such as `passthrough:///http://127.0.0.1:2379`, and grpc-go then sends
//! `:authority: http://127.0.0.1:2379`. Go's server ignores the malformed value; Rust's `h2`
//! resets the stream with PROTOCOL_ERROR. So the server reads every client connection through
//! [`Fixing`], which watches the client's frames up to its first header block. If that block's
//! `:authority` is valid (or absent), it is handed on unchanged and the connection from then on is
//! the bare socket: a client sends the same authority on every stream. If not, every header block
//! of the connection is HPACK-decoded with the client's table state and re-encoded as literals
//! without indexing (so the server's HPACK table stays empty and cannot diverge), with a
//! scheme-prefixed or path-suffixed `:authority` cut back to `host:port`; every other frame is
//! handed on unchanged. What the server writes goes straight to the socket, and a connection that
//! does not open with the HTTP/2 preface (plain HTTP/1.1 for `/health`) is read as is.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::tls::{Conn, ConnInfo, Incoming};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame we emit: HTTP/2's default SETTINGS_MAX_FRAME_SIZE.
const MAX_FRAME: usize = 16_384;
/// The largest header block we accept from a client before giving up on the connection.
const MAX_HEADER_BLOCK: usize = 1 << 20;
/// How much is read from the socket at once while frames are watched.
const READ_CHUNK: usize = 16 * 1024;

/// A listener whose connections (plain or TLS, handshakes done) are read through [`Fixing`].
pub struct FixingListener {
    inner: Incoming,
}

impl FixingListener {
    pub fn new(inner: Incoming) -> Self {
        Self { inner }
    }
}

impl axum::serve::Listener for FixingListener {
    type Io = Fixing<Box<dyn Conn>>;
    type Addr = ConnInfo;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (conn, info) = self.inner.accept().await;
        (Fixing::new(conn), info)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, FixingListener>> for ConnInfo {
    fn connect_info(stream: axum::serve::IncomingStream<'_, FixingListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// Cuts `http://host:port/...` back to `host:port`; leaves a valid authority alone.
pub fn fix_authority(v: &[u8]) -> Option<Vec<u8>> {
    let s = std::str::from_utf8(v).ok()?;
    if s.parse::<http::uri::Authority>().is_ok() {
        return None;
    }
    let rest = s.split_once("://").map(|(_, r)| r).unwrap_or(s);
    let host = rest.split('/').next().unwrap_or("");
    Some(host.as_bytes().to_vec())
}

/// An HPACK string literal without Huffman coding.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_int(out, 0x00, 7, s.len());
    out.extend_from_slice(s);
}

/// An HPACK integer with an `n`-bit prefix, the prefix's high bits set to `flags`.
fn put_int(out: &mut Vec<u8>, flags: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

/// Re-encodes a decoded header list as literals without indexing (new names).
pub fn encode_block(headers: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.push(0x00);
        put_string(&mut out, name);
        if name.as_slice() == b":authority" {
            if let Some(fixed) = fix_authority(value) {
                put_string(&mut out, &fixed);
                continue;
            }
        }
        put_string(&mut out, value);
    }
    out
}

fn frame_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// HEADERS (+ CONTINUATION) frames carrying `block`.
fn header_frames(block: &[u8], stream: u32, end_stream: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(block.len() + 18);
    let chunks: Vec<&[u8]> = if block.is_empty() { vec![&[][..]] } else { block.chunks(MAX_FRAME).collect() };
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i == chunks.len() - 1;
        let mut flags = if last { END_HEADERS } else { 0 };
        let kind = if i == 0 {
            if end_stream {
                flags |= END_STREAM;
            }
            HEADERS
        } else {
            CONTINUATION
        };
        frame_header(&mut out, chunk.len(), kind, flags, stream);
        out.extend_from_slice(chunk);
    }
    out
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// How far [`Fixing`] is in a connection.
enum Mode {
    /// Waiting for the HTTP/2 preface.
    Preface,
    /// Watching frames for the first header block.
    FirstBlock,
    /// Rewriting every header block: the first one's `:authority` needed fixing.
    Rewrite,
    /// Handing everything on as it is.
    Through,
}

/// A client connection, read with its header blocks fixed (see the module doc).
pub struct Fixing<S> {
    io: S,
    mode: Mode,
    /// What was read from the client and not yet handed on.
    input: BytesMut,
    /// How many bytes at the front of `input` are handed on as they are.
    ready: usize,
    /// Payload bytes of a frame handed on as it is that are still to come.
    passing: usize,
    /// Header frames to hand on before anything in `input`.
    out: BytesMut,
    decoder: hpack::Decoder<'static>,
    /// The header block being collected: its stream, END_STREAM, the block so far, and the
    /// frames as the client sent them (handed on if the block needs no fix).
    pending: Option<(u32, bool, Vec<u8>, Vec<u8>)>,
}

impl<S> Fixing<S> {
    pub fn new(io: S) -> Self {
        Fixing {
            io,
            mode: Mode::Preface,
            input: BytesMut::new(),
            ready: 0,
            passing: 0,
            out: BytesMut::new(),
            decoder: hpack::Decoder::new(),
            pending: None,
        }
    }

    /// Moves what `input` holds on: marks bytes to hand on as they are (`ready`) or turns a
    /// complete header frame into `out`. False if more input is needed first.
    fn advance(&mut self) -> io::Result<bool> {
        match self.mode {
            Mode::Through => self.ready = self.input.len(),
            Mode::Preface => {
                let n = self.input.len().min(PREFACE.len());
                if self.input[..n] != PREFACE[..n] {
                    // Not HTTP/2 with prior knowledge.
                    self.mode = Mode::Through;
                    return Ok(true);
                }
                if n == PREFACE.len() {
                    self.ready = n;
                    self.mode = Mode::FirstBlock;
                }
            }
            Mode::FirstBlock | Mode::Rewrite => {
                let mut at = self.passing.min(self.input.len());
                self.passing -= at;
                while self.passing == 0 && self.input.len() >= at + 9 {
                    let head = &self.input[at..at + 9];
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    let kind = head[3];
                    if kind == HEADERS || (kind == CONTINUATION && self.pending.is_some()) {
                        if at > 0 {
                            break;
                        }
                        if len > MAX_HEADER_BLOCK {
                            return Err(bad("header block too large"));
                        }
                        if self.input.len() < 9 + len {
                            return Ok(false);
                        }
                        let frame = self.input.split_to(9 + len);
                        self.header_frame(&frame)?;
                        return Ok(true);
                    }
                    // Any other frame is handed on as it arrives.
                    let have = len.min(self.input.len() - at - 9);
                    self.passing = len - have;
                    at += 9 + have;
                }
                self.ready = at;
            }
        }
        Ok(self.ready > 0)
    }

    /// Takes in one HEADERS or CONTINUATION frame (header and payload); at the end of the
    /// block, puts what the server is to get of it in `out`.
    fn header_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let mut body = &frame[9..];
        if kind == HEADERS {
            let mut pad = 0usize;
            if flags & PADDED != 0 {
                pad = *body.first().ok_or_else(|| bad("short HEADERS"))? as usize;
                body = &body[1..];
            }
            if flags & PRIORITY != 0 {
                body = body.get(5..).ok_or_else(|| bad("short HEADERS"))?;
            }
            body = &body[..body.len().checked_sub(pad).ok_or_else(|| bad("bad padding"))?];
            self.pending = Some((stream, flags & END_STREAM != 0, Vec::new(), Vec::new()));
        }
        let (stream, end_stream, block, raw) = self.pending.as_mut().expect("a header block is open");
        block.extend_from_slice(body);
        raw.extend_from_slice(frame);
        if block.len() > MAX_HEADER_BLOCK {
            return Err(bad("header block too large"));
        }
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        let headers = self.decoder.decode(block).map_err(|e| bad(&format!("hpack: {e:?}")))?;
        let needs_fix = headers.iter().any(|(n, v)| n.as_slice() == b":authority" && fix_authority(v).is_some());
        if matches!(self.mode, Mode::FirstBlock) && !needs_fix {
            self.out.extend_from_slice(raw);
            self.mode = Mode::Through;
        } else {
            self.out.extend_from_slice(&header_frames(&encode_block(&headers), *stream, *end_stream));
            self.mode = Mode::Rewrite;
        }
        self.pending = None;
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Fixing<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.out.is_empty() {
                let n = this.out.len().min(buf.remaining());
                buf.put_slice(&this.out[..n]);
                this.out.advance(n);
                return Poll::Ready(Ok(()));
            }
            if this.ready > 0 {
                let n = this.ready.min(buf.remaining());
                buf.put_slice(&this.input[..n]);
                this.input.advance(n);
                this.ready -= n;
                return Poll::Ready(Ok(()));
            }
            if matches!(this.mode, Mode::Through) && this.input.is_empty() {
                return Pin::new(&mut this.io).poll_read(cx, buf);
            }
            if this.advance()? {
                continue;
            }
            let len = this.input.len();
            this.input.resize(len + READ_CHUNK, 0);
            let mut read = ReadBuf::new(&mut this.input[len..]);
            let polled = Pin::new(&mut this.io).poll_read(cx, &mut read);
            let n = read.filled().len();
            this.input.truncate(len + n);
            match polled {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // The client is done: what is left goes on as it is (a cut-off frame is the
                // server's to report).
                Poll::Ready(Ok(())) if n == 0 => this.mode = Mode::Through,
                Poll::Ready(Ok(())) => {}
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Fixing<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_are_fixed_only_when_malformed() {
        assert_eq!(fix_authority(b"127.0.0.1:2379"), None);
        assert_eq!(fix_authority(b"localhost"), None);
        assert_eq!(fix_authority(b"http://127.0.0.1:2379").unwrap(), b"127.0.0.1:2379");
        assert_eq!(fix_authority(b"https://h:1/x/y").unwrap(), b"h:1");
    }

    #[test]
    fn re_encoded_blocks_decode_to_the_fixed_headers() {
        let headers = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":authority".to_vec(), b"http://127.0.0.1:2379".to_vec()),
            (b"x-long".to_vec(), vec![b'v'; 300]),
        ];
        let block = encode_block(&headers);
        let got = hpack::Decoder::new().decode(&block).unwrap();
        assert_eq!(got[1], (b":authority".to_vec(), b"127.0.0.1:2379".to_vec()));
        assert_eq!(got[2], headers[2]);
    }

    /// What the server reads of a client that sends `input`.
    async fn read_through(input: &[u8]) -> Vec<u8> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(input.len() + 1);
        client.write_all(input).await.unwrap();
        client.shutdown().await.unwrap();
        let mut out = Vec::new();
        Fixing::new(server).read_to_end(&mut out).await.unwrap();
        out
    }

    type Headers = Vec<(Vec<u8>, Vec<u8>)>;

    /// The header blocks in `frames`, each decoded with one decoder, and the kinds of the frames.
    fn decode_frames(mut frames: &[u8]) -> (Vec<Headers>, Vec<u8>) {
        let (mut decoder, mut blocks, mut kinds) = (hpack::Decoder::new(), Vec::new(), Vec::new());
        while !frames.is_empty() {
            let len = u32::from_be_bytes([0, frames[0], frames[1], frames[2]]) as usize;
            kinds.push(frames[3]);
            if frames[3] == HEADERS {
                blocks.push(decoder.decode(&frames[9..9 + len]).unwrap());
            }
            frames = &frames[9 + len..];
        }
        (blocks, kinds)
    }

    /// A preface, SETTINGS, a HEADERS block split over a CONTINUATION, a 40 KiB DATA frame and
    /// a second block from the same HPACK encoder (so it refers to its table), for `authority`.
    fn client_frames(authority: &[u8]) -> Vec<u8> {
        let mut enc = hpack::Encoder::new();
        let headers = vec![(&b":authority"[..], authority), (&b":path"[..], &b"/etcdserverpb.KV/Range"[..])];
        let first = enc.encode(headers.clone());
        let mut input = PREFACE.to_vec();
        frame_header(&mut input, 0, 0x4, 0, 0);
        let (a, b) = first.split_at(first.len() / 2);
        frame_header(&mut input, a.len(), HEADERS, 0, 1);
        input.extend_from_slice(a);
        frame_header(&mut input, b.len(), CONTINUATION, END_HEADERS, 1);
        input.extend_from_slice(b);
        frame_header(&mut input, 40_000, 0x0, END_STREAM, 1);
        input.extend((0..40_000).map(|i| i as u8));
        let second = enc.encode(headers);
        frame_header(&mut input, second.len(), HEADERS, END_HEADERS | END_STREAM, 3);
        input.extend_from_slice(&second);
        input
    }

    #[tokio::test]
    async fn a_malformed_authority_is_fixed_in_every_header_block() {
        let out = read_through(&client_frames(b"http://a:1")).await;
        assert_eq!(&out[..PREFACE.len()], PREFACE);
        let (blocks, kinds) = decode_frames(&out[PREFACE.len()..]);
        assert_eq!(kinds, [0x4, HEADERS, 0x0, HEADERS]);
        for block in blocks {
            assert_eq!(block[0], (b":authority".to_vec(), b"a:1".to_vec()));
            assert_eq!(block[1], (b":path".to_vec(), b"/etcdserverpb.KV/Range".to_vec()));
        }
        assert!(out.windows(40_000).any(|w| w.iter().enumerate().all(|(i, b)| *b == i as u8)), "DATA changed");
    }

    #[tokio::test]
    async fn a_valid_authority_and_plain_http_pass_unchanged() {
        let input = client_frames(b"127.0.0.1:2379");
        assert_eq!(read_through(&input).await, input);
        let http1 = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        assert_eq!(read_through(http1).await, http1);
    }
}
