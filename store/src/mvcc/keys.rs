//! Every on-disk key keel writes, encoded in one place. Keys sort in byte order, so revisions are
//! big-endian and history scans are range scans.
//!
//! ```text
//! r <main:8 BE> <sub:8 BE> [t]   MVCC history: a KeyValue (proto) per revision; a trailing `t`
//!                                marks a tombstone (the value is then a KeyValue with only `key`)
//! m <name>                       state-machine metadata (applied log id, membership, revision,
//!                                compacted revision); written in the same batch as the data
//! l <index:8 BE>                 Raft log entries
//! v <name>                       Raft metadata (vote, committed, last purged log id)
//! e <id:8 BE>                    a lease: granted and checkpointed TTLs (bincode `LeaseRecord`)
//! ```
//! The state machine owns the prefixes `e`, `m` and `r` (a snapshot is exactly those); the Raft
//! log store owns `l` and `v`.

use crate::error::{Error, Result};

/// A revision: `main` is the store revision of a write, `sub` orders the changes inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Rev {
    pub main: i64,
    pub sub: i64,
}

impl Rev {
    pub fn new(main: i64, sub: i64) -> Self {
        Self { main, sub }
    }
}

pub const HISTORY: u8 = b'r';
pub const SM_META: u8 = b'm';
pub const LOG: u8 = b'l';
pub const RAFT_META: u8 = b'v';
pub const LEASE: u8 = b'e';
/// The prefixes the state machine owns: what a snapshot holds.
pub const STATE_MACHINE: [u8; 3] = [LEASE, SM_META, HISTORY];
/// The prefixes the Raft log store owns.
pub const RAFT_PREFIXES: [u8; 2] = [LOG, RAFT_META];
const TOMBSTONE: u8 = b't';

/// The key of one revision in the history.
pub fn rev_key(rev: Rev, tombstone: bool) -> Vec<u8> {
    let mut k = Vec::with_capacity(18);
    k.push(HISTORY);
    k.extend_from_slice(&(rev.main as u64).to_be_bytes());
    k.extend_from_slice(&(rev.sub as u64).to_be_bytes());
    if tombstone {
        k.push(TOMBSTONE);
    }
    k
}

/// The key of one lease.
pub fn lease_key(id: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(LEASE);
    k.extend_from_slice(&(id as u64).to_be_bytes());
    k
}

/// The first history key at or after main revision `main`.
pub fn rev_key_from(main: i64) -> Vec<u8> {
    rev_key(Rev::new(main, 0), false)
}

/// Decodes a history key into its revision and tombstone flag; anything else is corruption.
pub fn decode_rev_key(k: &[u8]) -> Result<(Rev, bool)> {
    let bad = || Error::Corrupt(format!("bad history key {k:?}"));
    if k.first() != Some(&HISTORY) || !(k.len() == 17 || k.len() == 18) {
        return Err(bad());
    }
    let main = u64::from_be_bytes(k[1..9].try_into().unwrap()) as i64;
    let sub = u64::from_be_bytes(k[9..17].try_into().unwrap()) as i64;
    let tomb = match k.get(17) {
        None => false,
        Some(&TOMBSTONE) => true,
        Some(_) => return Err(bad()),
    };
    Ok((Rev::new(main, sub), tomb))
}

/// The end (exclusive) of a one-byte prefix.
pub fn prefix_end(prefix: u8) -> Vec<u8> {
    vec![prefix + 1]
}

/// The state machine's metadata records, `m <name>`: each is written in the same engine batch as
/// the state it describes.
pub mod meta {
    /// The last applied log id (bincode `LogId`).
    pub const APPLIED: &str = "applied";
    /// The applied membership (bincode `StoredMembership`).
    pub const MEMBERSHIP: &str = "membership";
    /// A snapshot install under way (bincode `Installing`, raft/state_machine.rs): present only
    /// between an install's first engine batch and its last.
    pub const INSTALLING: &str = "installing";
    /// The current revision (8 bytes BE).
    pub const REV: &str = "rev";
    /// The compacted revision (8 bytes BE).
    pub const COMPACT: &str = "compact";
    /// Member attributes and alarms (bincode `Registry`).
    pub const REGISTRY: &str = "registry";
    /// Users, roles and whether auth is on (bincode `AuthState`).
    pub const AUTH: &str = "auth";
}

/// Raft's metadata records, `v <name>`: the log store's, and the member's identity.
pub mod raft_meta {
    /// The vote (bincode `Vote`).
    pub const VOTE: &str = "vote";
    /// The committed log id (bincode `LogId`).
    pub const COMMITTED: &str = "committed";
    /// The last purged log id (bincode `LogId`).
    pub const PURGED: &str = "purged";
    /// The member and cluster ids a data directory was created with.
    pub const IDENTITY: &str = "identity";
}

/// The key of a state-machine metadata record ([`meta`]).
pub fn sm_meta(name: &str) -> Vec<u8> {
    let mut k = vec![SM_META];
    k.extend_from_slice(name.as_bytes());
    k
}

/// The key of a Raft metadata record ([`raft_meta`](mod@raft_meta)).
pub fn raft_meta(name: &str) -> Vec<u8> {
    let mut k = vec![RAFT_META];
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn log_key(index: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(LOG);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

pub fn decode_log_key(k: &[u8]) -> Result<u64> {
    if k.len() != 9 || k[0] != LOG {
        return Err(Error::Corrupt(format!("bad log key {k:?}")));
    }
    Ok(u64::from_be_bytes(k[1..9].try_into().unwrap()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keys_sort_by_revision_and_round_trip() {
        let revs = [Rev::new(1, 0), Rev::new(1, 1), Rev::new(2, 0), Rev::new(256, 3), Rev::new(1 << 40, 0)];
        let keys: Vec<_> = revs.iter().enumerate().map(|(i, r)| rev_key(*r, i % 2 == 1)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(decode_rev_key(k).unwrap(), (revs[i], i % 2 == 1));
        }
        assert!(decode_rev_key(b"r123").is_err());
        let mut bad = rev_key(Rev::new(1, 0), false);
        bad.push(b'x');
        assert!(decode_rev_key(&bad).is_err());
    }

    #[test]
    fn log_keys_round_trip() {
        assert_eq!(decode_log_key(&log_key(42)).unwrap(), 42);
        assert!(log_key(1) < log_key(256));
        assert!(decode_log_key(b"l1").is_err());
    }
}
