//! keel's fuzz targets, each a function of arbitrary bytes that must never panic:
//!
//! - [`client_request`]: a client's KV or lease request as protobuf bytes, through the edge's
//!   checks (`server::validate`) and, when they pass, applied to a store holding a few keys and a
//!   lease. A request the store refuses changes nothing: every state-machine pair is the same
//!   after the refusal as before it.
//! - [`keys`]: the MVCC's stored-key encoding (history and log keys): decoding never panics, and
//!   what decodes encodes back to the same bytes.
//! - [`peer_message`]: a peer's Raft RPC payload (AppendEntries, Vote, InstallSnapshot, their
//!   replies, or a log entry's command) through the peer service's decoding; every command an
//!   AppendEntries carries is applied as a member would, with the same no-change-on-refusal check.
//!
//! - [`snapshot_file`]: a snapshot file `keel snapshot restore` reads (etcd's bbolt file or keel's
//!   older format): a hostile file is refused, never a panic or an unbounded walk.
//! - [`api_request`]: a request to keel-apiserver (method, path, headers, body) through its whole
//!   request path in process; a refused request leaves the store as it was (`api`).
//!
//! libFuzzer drives them through `fuzz/libfuzzer` (`cargo fuzz`, nightly); on stable,
//! [`Driver`] mutates seed inputs ([`Target::seeds`]) with a seeded generator, which is what the
//! CI smoke test and the `keel-fuzz` binary run.

mod api;

pub use api::api_request;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel_proto::etcdserverpb::{
    compare, request_op, CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest,
    PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use keel_proto::keelraft::RaftPayload;
use keel_store::auth::{AuthCommand, Tokens};
use keel_store::engine::MemEngine;
use keel_store::mvcc::{keys, kv, Mvcc};
use keel_store::raft::apply::{apply_command, EntryContext};
use keel_store::raft::network::{decode, encode};
use keel_store::raft::state_machine::dump;
use keel_store::raft::{Command, Proto, TypeConfig};
use keel_store::server::validate;
use keel_store::{bbolt, snapshot};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{Entry, EntryPayload};
use prost::bytes::Bytes;
use prost::Message;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// etcd's default `--max-txn-ops`.
const MAX_TXN_OPS: usize = 128;
/// The lease the seeded store holds.
const LEASE: i64 = 0x1234;

/// A store with a little history: three keys (one twice, one on the lease), a delete, a lease.
fn seeded_store() -> Mvcc {
    let mvcc = Mvcc::open(Arc::new(MemEngine::new())).expect("open a memory store");
    let tokens = Tokens::new(Duration::from_secs(300));
    let cmds = [
        Command::LeaseGrant(Proto(LeaseGrantRequest { id: LEASE, ttl: 60 })),
        put_cmd(b"a", b"1", 0),
        put_cmd(b"b", b"2", LEASE),
        put_cmd(b"a", b"3", 0),
        put_cmd(b"c", b"4", 0),
        Command::DeleteRange(Proto(DeleteRangeRequest { key: b(b"c"), ..Default::default() })),
    ];
    for (i, cmd) in cmds.iter().enumerate() {
        let mut batch = mvcc.apply(false);
        apply_command(&mut batch, &EntryContext { index: i as u64 + 1, term: 1, tokens: &tokens }, cmd)
            .expect("seed applies");
        batch.commit(false).expect("commit");
    }
    mvcc
}

fn b(bytes: &'static [u8]) -> Bytes {
    Bytes::from_static(bytes)
}

fn put_cmd(key: &[u8], value: &[u8], lease: i64) -> Command {
    Command::Put(Proto(PutRequest {
        key: key.to_vec().into(),
        value: value.to_vec().into(),
        lease,
        ..Default::default()
    }))
}

/// How many commands the targets applied, and how many of those the store refused: the smoke
/// test checks that mutated inputs get that far.
pub static APPLIED: AtomicU64 = AtomicU64::new(0);
pub static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Applies `cmd` to `mvcc` as the state machine does (one batch, committed); a refusal must leave
/// every state-machine pair as it was.
fn apply_checked(mvcc: &Mvcc, tokens: &Tokens, index: u64, cmd: &Command) {
    let before = dump(mvcc).expect("dump");
    let mut batch = mvcc.apply(false);
    let result = apply_command(&mut batch, &EntryContext { index, term: 1, tokens }, cmd);
    batch.commit(false).expect("commit");
    APPLIED.fetch_add(1, Ordering::Relaxed);
    if let Err(refusal) = result {
        REFUSED.fetch_add(1, Ordering::Relaxed);
        let after = dump(mvcc).expect("dump");
        assert!(before == after, "{cmd:?} was refused ({refusal}) but changed the store");
    }
}

/// Reads `r` from the store's current view; errors are answers, panics are bugs.
fn read(mvcc: &Mvcc, r: &RangeRequest) -> bool {
    let _ = kv::range(&mvcc.read(), r);
    true
}

/// A client request: the first byte picks the message, the rest is its protobuf encoding.
/// Whether it got past decoding and the edge's checks (to the store).
pub fn client_request(data: &[u8]) -> bool {
    let Some((&kind, body)) = data.split_first() else { return false };
    let cmd = match kind % 7 {
        0 => match RangeRequest::decode(body) {
            Ok(r) if validate::range(&r).is_ok() => return read(&seeded_store(), &r),
            _ => return false,
        },
        1 => match PutRequest::decode(body) {
            Ok(p) if validate::put(&p).is_ok() => Command::Put(Proto(p)),
            _ => return false,
        },
        2 => match DeleteRangeRequest::decode(body) {
            Ok(d) if validate::delete_range(&d).is_ok() => Command::DeleteRange(Proto(d)),
            _ => return false,
        },
        3 => match TxnRequest::decode(body) {
            Ok(t) if validate::txn(&t, MAX_TXN_OPS).is_ok() => {
                if kv::is_read_only(&t) {
                    let mvcc = seeded_store();
                    let _ = kv::txn_read(&mvcc.read(), &t);
                    return true;
                }
                Command::Txn(Proto(t))
            }
            _ => return false,
        },
        4 => match CompactionRequest::decode(body) {
            Ok(c) => Command::Compact(Proto(c)),
            _ => return false,
        },
        5 => match LeaseGrantRequest::decode(body) {
            Ok(g) => Command::LeaseGrant(Proto(g)),
            _ => return false,
        },
        _ => match LeaseRevokeRequest::decode(body) {
            Ok(r) => Command::LeaseRevoke(Proto(r)),
            _ => return false,
        },
    };
    let mvcc = seeded_store();
    apply_checked(&mvcc, &Tokens::new(Duration::from_secs(300)), 100, &cmd);
    true
}

/// Stored-key decoding: never a panic, and a decoded key encodes back to itself.
pub fn keys(data: &[u8]) -> bool {
    let mut decoded = false;
    if let Ok((rev, tombstone)) = keys::decode_rev_key(data) {
        assert_eq!(keys::rev_key(rev, tombstone), data, "history key round trip");
        decoded = true;
    }
    if let Ok(index) = keys::decode_log_key(data) {
        assert_eq!(keys::log_key(index), data, "log key round trip");
        decoded = true;
    }
    decoded
}

/// A snapshot file as `keel snapshot restore` reads it once its hash is checked: etcd's bbolt
/// file through the bbolt reader and the bucket mapping, or keel's older format. Never a panic,
/// and nothing read is larger than the file. Whether it read.
pub fn snapshot_file(data: &[u8]) -> bool {
    if snapshot::keel::looks_like(data) {
        return snapshot::keel::decode(data).is_ok();
    }
    let Ok(file) = bbolt::File::open(data) else { return false };
    let read = snapshot::etcd::import(&file, &mut |k, v| {
        assert!(k.len() + v.len() <= data.len() + 64, "a pair larger than its file");
        Ok(())
    });
    read.is_ok()
}

fn snapshot_seeds() -> Vec<Vec<u8>> {
    let mvcc = seeded_store();
    let etcd = snapshot::etcd::export(&*mvcc.engine_snapshot(), std::io::Cursor::new(Vec::new()))
        .expect("export the seeded store")
        .into_inner();
    vec![etcd, snapshot::keel::encode(&dump(&mvcc).expect("dump the seeded store"))]
}

/// A peer message: the first byte picks the RPC, the rest is its payload as the peer service
/// receives it. Whether it decoded.
pub fn peer_message(data: &[u8]) -> bool {
    let Some((&kind, body)) = data.split_first() else { return false };
    let payload = RaftPayload { data: body.to_vec().into() };
    match kind % 7 {
        0 => decode::<AppendEntriesRequest<TypeConfig>>(&payload).map(|req| apply_entries(&req.entries)).is_ok(),
        1 => decode::<VoteRequest<u64>>(&payload).is_ok(),
        2 => decode::<InstallSnapshotRequest<TypeConfig>>(&payload).is_ok(),
        3 => decode::<AppendEntriesResponse<u64>>(&payload).is_ok(),
        4 => decode::<VoteResponse<u64>>(&payload).is_ok(),
        5 => decode::<InstallSnapshotResponse<u64>>(&payload).is_ok(),
        _ => decode::<Command>(&payload)
            .map(|cmd| apply_entries(&[Entry { log_id: Default::default(), payload: EntryPayload::Normal(cmd) }]))
            .is_ok(),
    }
}

fn apply_entries(entries: &[Entry<TypeConfig>]) {
    let mvcc = seeded_store();
    let tokens = Tokens::new(Duration::from_secs(300));
    for (i, entry) in entries.iter().enumerate() {
        if let EntryPayload::Normal(cmd) = &entry.payload {
            apply_checked(&mvcc, &tokens, 100 + i as u64, cmd);
        }
    }
}

/// A fuzz target: its function (true when the input got past decoding: the driver keeps such
/// inputs to mutate further) and the valid inputs its mutations start from.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]) -> bool,
    pub seeds: fn() -> Vec<Vec<u8>>,
}

pub const TARGETS: &[Target] = &[
    Target { name: "client_request", run: client_request, seeds: client_request_seeds },
    Target { name: "keys", run: keys, seeds: key_seeds },
    Target { name: "peer_message", run: peer_message, seeds: peer_message_seeds },
    Target { name: "api_request", run: api_request, seeds: api::api_request_seeds },
    Target { name: "snapshot_file", run: snapshot_file, seeds: snapshot_seeds },
];

fn tagged(kind: u8, body: Vec<u8>) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend(body);
    v
}

fn txn_seed() -> TxnRequest {
    let op = |r| RequestOp { request: Some(r) };
    TxnRequest {
        compare: vec![Compare {
            key: b(b"a"),
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Version as i32,
            target_union: Some(compare::TargetUnion::Version(2)),
            ..Default::default()
        }],
        success: vec![
            op(request_op::Request::RequestPut(PutRequest {
                key: b(b"a"),
                value: b(b"x"),
                lease: LEASE,
                prev_kv: true,
                ..Default::default()
            })),
            op(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: b(b"b"),
                range_end: b(b"z"),
                prev_kv: true,
            })),
            op(request_op::Request::RequestTxn(TxnRequest {
                success: vec![op(request_op::Request::RequestPut(PutRequest { key: b(b"n"), ..Default::default() }))],
                ..Default::default()
            })),
        ],
        failure: vec![op(request_op::Request::RequestRange(RangeRequest {
            key: b(b"a"),
            range_end: b(&[0]),
            revision: 2,
            ..Default::default()
        }))],
    }
}

fn client_request_seeds() -> Vec<Vec<u8>> {
    vec![
        tagged(0, RangeRequest { key: b(b"a"), range_end: b(b"z"), limit: 2, ..Default::default() }.encode_to_vec()),
        tagged(
            1,
            PutRequest { key: b(b"k"), value: b(b"v"), lease: LEASE, prev_kv: true, ..Default::default() }
                .encode_to_vec(),
        ),
        tagged(2, DeleteRangeRequest { key: b(b"a"), range_end: b(&[0]), prev_kv: true }.encode_to_vec()),
        tagged(3, txn_seed().encode_to_vec()),
        tagged(4, CompactionRequest { revision: 3, physical: false }.encode_to_vec()),
        tagged(5, LeaseGrantRequest { id: 7, ttl: 10 }.encode_to_vec()),
        tagged(6, LeaseRevokeRequest { id: LEASE }.encode_to_vec()),
    ]
}

fn key_seeds() -> Vec<Vec<u8>> {
    vec![keys::rev_key(keys::Rev::new(5, 1), false), keys::rev_key(keys::Rev::new(1 << 40, 0), true), keys::log_key(77)]
}

fn peer_message_seeds() -> Vec<Vec<u8>> {
    let entries = vec![
        Entry::<TypeConfig> {
            log_id: Default::default(),
            payload: EntryPayload::Normal(Command::Txn(Proto(txn_seed()))),
        },
        Entry::<TypeConfig> {
            log_id: Default::default(),
            payload: EntryPayload::Normal(Command::Batch(vec![put_cmd(b"q", b"1", 0), put_cmd(b"r", b"2", LEASE)])),
        },
        Entry::<TypeConfig> { log_id: Default::default(), payload: EntryPayload::Blank },
    ];
    let append = AppendEntriesRequest::<TypeConfig> {
        vote: Default::default(),
        prev_log_id: None,
        entries,
        leader_commit: None,
    };
    let vote = VoteRequest::<u64> { vote: Default::default(), last_log_id: None };
    let payload = |p: RaftPayload| p.data.to_vec();
    vec![
        tagged(0, payload(encode(&append))),
        tagged(1, payload(encode(&vote))),
        tagged(6, payload(encode(&Command::LeaseRevoke(Proto(LeaseRevokeRequest { id: LEASE }))))),
        // Refused on the seeded store (no root user; no such user): found by a longer run, when a
        // refused auth change still wrote the auth record.
        tagged(6, payload(encode(&Command::Auth(AuthCommand::Enable)))),
        tagged(6, payload(encode(&Command::Auth(AuthCommand::UserGrantRole { user: "u".into(), role: "r".into() })))),
        tagged(6, payload(encode(&Command::Auth(AuthCommand::RoleAdd { name: "r".into() })))),
    ]
}

/// A mutation fuzzer on stable Rust: each input is a seed or a kept input changed by a few random
/// edits (bit flips, byte and integer overwrites, insertions, deletions, splices). Inputs that got
/// past decoding are kept (a crude stand-in for libFuzzer's coverage feedback).
pub struct Driver {
    rng: ChaCha8Rng,
    corpus: Vec<Vec<u8>>,
}

/// An input that made a target panic, with the panic's message.
#[derive(Debug)]
pub struct Crash {
    pub input: Vec<u8>,
    pub message: String,
}

const MAX_CORPUS: usize = 1024;

const INTERESTING: &[u64] = &[0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x7fff_ffff, 0xffff_ffff, u64::MAX, 1 << 63];

impl Driver {
    pub fn new(target: &Target, seed: u64) -> Driver {
        Driver { rng: ChaCha8Rng::seed_from_u64(seed), corpus: (target.seeds)() }
    }

    /// The next input to try.
    pub fn next_input(&mut self) -> Vec<u8> {
        let base = self.rng.random_range(0..self.corpus.len());
        let mut input = self.corpus[base].clone();
        for _ in 0..self.rng.random_range(1..=3) {
            self.mutate(&mut input);
        }
        input
    }

    /// Tells the driver how `input` fared: one that got past decoding joins the corpus (which
    /// is bounded; a newcomer then replaces a random member, never a seed).
    pub fn tell(&mut self, input: Vec<u8>, decoded: bool, seeds: usize) {
        if !decoded {
            return;
        }
        if self.corpus.len() < MAX_CORPUS {
            self.corpus.push(input);
        } else {
            let at = self.rng.random_range(seeds..MAX_CORPUS);
            self.corpus[at] = input;
        }
    }

    fn mutate(&mut self, input: &mut Vec<u8>) {
        let len = input.len();
        match self.rng.random_range(0..7) {
            0 if len > 0 => {
                let i = self.rng.random_range(0..len);
                input[i] ^= 1 << self.rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = self.rng.random_range(0..len);
                input[i] = self.rng.random();
            }
            2 => {
                let i = self.rng.random_range(0..=len);
                let n = self.rng.random_range(1..=8);
                let bytes: Vec<u8> = (0..n).map(|_| self.rng.random()).collect();
                input.splice(i..i, bytes);
            }
            3 if len > 1 => {
                let i = self.rng.random_range(0..len);
                let n = self.rng.random_range(1..=(len - i).min(16));
                input.drain(i..i + n);
            }
            4 if len > 0 => {
                let at = self.rng.random_range(0..len);
                let value = INTERESTING[self.rng.random_range(0..INTERESTING.len())].to_le_bytes();
                let width = [1, 2, 4, 8][self.rng.random_range(0..4)].min(len - at);
                input[at..at + width].copy_from_slice(&value[..width]);
            }
            5 => {
                let other = self.corpus[self.rng.random_range(0..self.corpus.len())].clone();
                let cut = self.rng.random_range(0..=len);
                let from = self.rng.random_range(0..=other.len());
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            _ if len > 0 => {
                input.truncate(self.rng.random_range(0..len));
            }
            _ => input.push(self.rng.random()),
        }
    }
}

/// Runs `target` on `input`, catching a panic: whether it decoded.
pub fn run_one(target: &Target, input: &[u8]) -> Result<bool, Crash> {
    catch_unwind(AssertUnwindSafe(|| (target.run)(input))).map_err(|p| Crash {
        input: input.to_vec(),
        message: p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into()),
    })
}

/// Runs `target` on its seeds, then on `iterations` mutated inputs from `seed`: how many of the
/// mutated inputs got past decoding, or the first crash.
pub fn smoke(target: &Target, seed: u64, iterations: u64) -> Result<u64, Crash> {
    let seeds = (target.seeds)();
    for input in &seeds {
        run_one(target, input)?;
    }
    let mut driver = Driver::new(target, seed);
    let mut decoded_count = 0;
    for _ in 0..iterations {
        let input = driver.next_input();
        let decoded = run_one(target, &input)?;
        decoded_count += u64::from(decoded);
        driver.tell(input, decoded, seeds.len());
    }
    Ok(decoded_count)
}
