//! The snapshot format keel served before it served etcd's (`super::etcd`), still read by
//! `keel snapshot restore`:
//!
//! ```text
//! "KEELSNAP" <version:4 BE> <count:8 BE> { <klen:4 BE> <key> <vlen:4 BE> <value> } x count
//!     <zeros up to a multiple of 512 bytes> <sha256:32>
//! ```
//! The pairs are the state machine's keys (`mvcc::keys::STATE_MACHINE`) at one applied index; the
//! SHA-256 covers everything before it.

use sha2::{Digest, Sha256};

use crate::engine::Pair;

const MAGIC: &[u8; 8] = b"KEELSNAP";
const VERSION: u32 = 1;
/// The body is padded to a multiple of this many bytes.
const PAD: usize = 512;

/// Whether `bytes` starts as this format does.
pub fn looks_like(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Encodes state-machine pairs in this format.
pub fn encode(pairs: &[Pair]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&(pairs.len() as u64).to_be_bytes());
    for (k, v) in pairs {
        for s in [k, v] {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s);
        }
    }
    out.resize(out.len().div_ceil(PAD) * PAD, 0);
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
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
}
