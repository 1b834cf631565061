//! Accepts gRPC clients that send a malformed HTTP/2 `:authority`.
//!
//! etcd 3.4's clients (etcdctl `endpoint status`, `endpoint hashkv`, `defrag`, …) dial each
//! endpoint with a target such as `passthrough:///http://127.0.0.1:2379`, and grpc-go then sends
//! `:authority: http://127.0.0.1:2379`. Go's server ignores the malformed value; Rust's `h2`
//! resets the stream with PROTOCOL_ERROR. So every client connection passes through this pump:
//! client frames are read; each header block is HPACK-decoded with the client's table state and
//! re-encoded as literals without indexing (so the server's HPACK table stays empty and cannot
//! diverge), with a scheme-prefixed or path-suffixed `:authority` cut back to `host:port`. Every
//! other frame, and everything the server sends, passes through unchanged. A connection that does
//! not open with the HTTP/2 preface (plain HTTP/1.1 for `/health`) is copied as is.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};

use crate::tls::{ConnInfo, Incoming};

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

/// A listener whose connections (plain or TLS, handshakes done) go through the `:authority` pump.
pub struct FixingListener {
    inner: Incoming,
}

impl FixingListener {
    pub fn new(inner: Incoming) -> Self {
        Self { inner }
    }
}

impl axum::serve::Listener for FixingListener {
    type Io = DuplexStream;
    type Addr = ConnInfo;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (conn, info) = self.inner.accept().await;
        let (server_side, pump_side) = tokio::io::duplex(256 * 1024);
        tokio::spawn(async move {
            let (client_r, mut client_w) = tokio::io::split(conn);
            let (pump_r, pump_w) = tokio::io::split(pump_side);
            let up = tokio::spawn(pump_client(client_r, pump_w));
            let mut pump_r = pump_r;
            let _ = tokio::io::copy(&mut pump_r, &mut client_w).await;
            let _ = client_w.shutdown().await;
            up.abort();
        });
        (server_side, info)
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

/// Copies the client's bytes to the server, rewriting header blocks (see the module doc).
async fn pump_client<R, W>(mut r: R, mut w: W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut first = vec![0u8; PREFACE.len()];
    let mut got = 0;
    while got < first.len() {
        let n = r.read(&mut first[got..]).await?;
        if n == 0 {
            w.write_all(&first[..got]).await?;
            return w.shutdown().await;
        }
        got += n;
        if first[..got] != PREFACE[..got] {
            // Not HTTP/2 with prior knowledge: pass everything through untouched.
            w.write_all(&first[..got]).await?;
            tokio::io::copy(&mut r, &mut w).await?;
            return w.shutdown().await;
        }
    }
    w.write_all(PREFACE).await?;
    let mut decoder = hpack::Decoder::new();
    // The header block being collected: (stream, END_STREAM, fragments so far).
    let mut pending: Option<(u32, bool, Vec<u8>)> = None;
    let mut head = [0u8; 9];
    loop {
        if let Err(e) = r.read_exact(&mut head).await {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                return w.shutdown().await;
            }
            return Err(e);
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload).await?;
        let fragment = match kind {
            HEADERS => {
                let mut body: &[u8] = &payload;
                let mut pad = 0usize;
                if flags & PADDED != 0 {
                    pad = *body.first().ok_or_else(|| bad("short HEADERS"))? as usize;
                    body = &body[1..];
                }
                if flags & PRIORITY != 0 {
                    body = body.get(5..).ok_or_else(|| bad("short HEADERS"))?;
                }
                let body = body.get(..body.len().checked_sub(pad).ok_or_else(|| bad("bad padding"))?).unwrap();
                pending = Some((stream, flags & END_STREAM != 0, body.to_vec()));
                None
            }
            CONTINUATION if pending.is_some() => Some(payload),
            _ => {
                w.write_all(&head).await?;
                w.write_all(&payload).await?;
                continue;
            }
        };
        let (pstream, end_stream, block) = pending.as_mut().unwrap();
        if let Some(f) = fragment {
            block.extend_from_slice(&f);
        }
        if block.len() > MAX_HEADER_BLOCK {
            return Err(bad("header block too large"));
        }
        if flags & END_HEADERS != 0 {
            let headers = decoder.decode(block).map_err(|e| bad(&format!("hpack: {e:?}")))?;
            let out = header_frames(&encode_block(&headers), *pstream, *end_stream);
            pending = None;
            w.write_all(&out).await?;
        }
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

    #[tokio::test]
    async fn frames_pass_and_header_blocks_are_rewritten() {
        let mut enc = hpack::Encoder::new();
        let block = enc.encode(vec![(&b":authority"[..], &b"http://a:1"[..])]);
        let mut input = PREFACE.to_vec();
        frame_header(&mut input, 0, 0x4, 0, 0); // SETTINGS
                                                // HEADERS split over a CONTINUATION
        let (a, b) = block.split_at(block.len() / 2);
        frame_header(&mut input, a.len(), HEADERS, END_STREAM, 1);
        input.extend_from_slice(a);
        frame_header(&mut input, b.len(), CONTINUATION, END_HEADERS, 1);
        input.extend_from_slice(b);
        let mut out = Vec::new();
        pump_client(&input[..], &mut out).await.unwrap();
        assert_eq!(&out[..PREFACE.len()], PREFACE);
        let rest = &out[PREFACE.len() + 9..];
        assert_eq!(rest[3], HEADERS);
        assert_eq!(rest[4], END_STREAM | END_HEADERS);
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        let got = hpack::Decoder::new().decode(&rest[9..9 + len]).unwrap();
        assert_eq!(got, vec![(b":authority".to_vec(), b"a:1".to_vec())]);
    }
}
