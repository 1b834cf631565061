//! Differential test: the same seeded random KV and lease operations against real etcd 3.4 and
//! keel, every answer compared, plus etcdctl watches over the whole run.
//!
//! For each seed a fresh etcd and a fresh keel start side by side (own data dirs), and a
//! `ChaCha8Rng` seeded with it generates operations over the raw gRPC KV and Lease APIs: Put (also
//! with leases: live, revoked, never granted), Range, DeleteRange, Txn (compares on every target
//! with every result, over single keys and key ranges, nested txns, invalid txns, puts with
//! leases), Compact, LeaseGrant (server- and client-chosen ids, ids in use, TTLs below etcd's
//! minimum and above its maximum), LeaseRevoke, LeaseTimeToLive (with and without keys),
//! LeaseLeases and one-shot LeaseKeepAlive. Each operation goes to etcd, then to keel; the two
//! answers must be equal:
//! - successes: the whole prost response, after `header.cluster_id`, `header.member_id` and
//!   `header.raft_term` are normalised (these differ between two servers by construction). The
//!   normalisation maps a non-zero value to 1 and keeps 0, at every level of a txn response, so
//!   whether a field is set at all (etcd leaves them unset in the headers nested inside a txn
//!   response) is still compared;
//! - lease ids a server chose (LeaseGrant with ID 0) differ between servers by construction: each
//!   is compared as a symbolic id, `SYMBOLIC_LEASE + n` for the server's n-th such grant, wherever
//!   it appears (grant, time-to-live, keep-alive and lease-list answers, `lease` of every key-value,
//!   watch events), and requests naming a symbolic id are sent with the server's own id. Ids a
//!   client chose are the same on both servers and stay as they are;
//! - the remaining TTL of a time-to-live answer depends on timing: it must lie in
//!   `0..=granted TTL` and is then replaced by `REMAINING_TTL`. Lists etcd returns in map or
//!   expiry order (leases, keys of a lease) are sorted;
//! - errors: gRPC code and message, exactly (clients match on etcd's strings).
//!
//! After the operations, a sweep reads all keys at every revision from just below the compacted
//! revision to just above the current one, so the whole retained history is compared too. Then a
//! lease with a short TTL gets keys attached and must expire on both servers (polled with a
//! deadline), deleting its keys at the same revision.
//!
//! Watches: before the operations, `etcdctl watch -w json --prefix --prev-kv --rev=2 ''` starts
//! against each server (from revision 2, the first write, so its output does not depend on when the
//! watch gets registered); before each compaction the test waits until both watches have shown the
//! current revision (a compaction racing a pending event would make etcd drop that event's
//! `prev_kv`, as it does in a replay). At the end a sentinel key is written, each watch's output
//! must show it, and the two outputs must be equal. Then `etcdctl watch --rev=R` replays run from
//! the compacted revision, a middle one and the latest one, and from just below the compacted
//! revision, which etcd refuses (etcdctl exits 5). Watch output is compared event by event: the
//! grouping of events into responses is timing-dependent (a watch catching up gets many revisions
//! in one response), and so are the headers of responses with events, which are dropped.
//!
//! The generator keeps a model of the current and compacted revisions (taken from etcd's answers)
//! so that revisions land around both — both error paths (compacted, future) stay exercised. The
//! key space is 9 written keys (plus a few never-written ones for reads), so no result exceeds 12
//! keys: Go's sort is only stable up to 12 elements, and etcd's sort on non-key targets is not
//! stable beyond that. At the end the test asserts that every op kind, every error and the main
//! success paths occurred, so it cannot silently cover nothing.
//!
//! Leases the generator keeps get long TTLs (600 s and more), so none expires during a run; a
//! grant at or below the minimum TTL (etcd raises shorter ones to 2 s) is revoked right after its
//! answers are compared, and that revoke may find it already expired. The test assumes a server
//! never picks one of the ids the generator uses as client-chosen or unknown ids (`GRANT_IDS`,
//! `LEASES`).
//!
//! Knobs (environment):
//! - `KEEL_DIFF_SEEDS`: seeds to run, e.g. `7`, `1,5,9`, `1..=50`, `1..50` (default `1..=5`);
//! - `KEEL_DIFF_OPS`: operations per seed (default 300);
//! - `KEEL_DIFF_AGAINST=etcd`: compare etcd with a second etcd (validates the harness);
//! - `KEEL_DIFF_FLAGS="--flag value"`: extra flags for the server under test;
//! - `KEEL_DIFF_TRACE=1`: print every operation and etcd's answer.
//!
//! Run: `cargo test --workspace --test differential -- --nocapture`.

mod common;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Debug;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::etcdctl::Etcdctl;
use common::{Kind, Server, REQUEST_TIMEOUT};
use keel_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::lease_client::LeaseClient;
use keel_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use keel_proto::etcdserverpb::{
    request_op, response_op, CompactionRequest, CompactionResponse, Compare, DeleteRangeRequest, DeleteRangeResponse,
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseLeasesRequest,
    LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp, ResponseHeader, TxnRequest, TxnResponse,
};
use keel_proto::mvccpb::KeyValue;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

const DEFAULT_SEEDS: &str = "1..=5";
const DEFAULT_OPS: usize = 300;
/// Below this many operations in total, the coverage assertions are skipped (short replays).
const COVERAGE_MIN_OPS: usize = 1000;

/// The only keys ever written: 9 of them, so every result holds at most 9 (≤ 12) keys. The last
/// but one ends in 0xff, whose prefix end is computed by dropping it ("e\xff" → "f").
const KEYS: &[&[u8]] = &[b"a", b"a/1", b"a/2", b"b", b"b/1", b"c", b"d", b"e\xff", b"f"];
/// Never written; used by reads, compares and deletes (missing keys, range bounds between keys).
const ABSENT: &[&[u8]] = &[b"0", b"a/0", b"bb", b"e", b"z"];
const VALUES: &[&[u8]] = &[b"", b"0", b"1", b"2", b"x", b"yy", b"\xff"];
/// Lease ids named without being granted by the generator (some of them get granted as
/// client-chosen ids, see `GRANT_IDS`).
const LEASES: &[i64] = &[1, 0x1234, 7_587_869_349_000_000_001];
/// Ids a client asks LeaseGrant for.
const GRANT_IDS: &[i64] = &[0x1234, 7_587_869_349_000_000_001, i64::MAX, -7];
/// Server-chosen lease ids are compared as `SYMBOLIC_LEASE + n` (n = 1, 2, ... in grant order).
const SYMBOLIC_LEASE: i64 = 0x5EED_0000_0000_0000;
/// etcd's largest lease TTL (`lease.MaxLeaseTTL`).
const MAX_LEASE_TTL: i64 = 9_000_000_000;
/// etcd's smallest lease TTL with the default flags: 1.5 election timeouts (1.5 s), rounded up to
/// whole seconds. Shorter TTLs are raised to it.
const MIN_LEASE_TTL: i64 = 2;
/// TTLs of the leases the generator keeps: long enough never to expire during a run.
const LONG_TTLS: &[i64] = &[600, 900, 3600, 86_400, MAX_LEASE_TTL];
/// TTLs at or below etcd's minimum (such leases are revoked right after the grant).
const SHORT_TTLS: &[i64] = &[i64::MIN, -5, 0, 1, MIN_LEASE_TTL];
const TOO_LONG_TTLS: &[i64] = &[MAX_LEASE_TTL + 1, i64::MAX];
/// TTL of the lease the expiry check lets run out.
const EXPIRING_TTL: i64 = 3;
/// Replaces a time-to-live answer's remaining TTL once it is checked to lie in `0..=granted`.
const REMAINING_TTL: i64 = -1000;
/// How long a watch may take to show an event, or a lease to expire.
const WATCH_DEADLINE: Duration = Duration::from_secs(30);
/// Written at the end of a seed; each watch must show it.
const SENTINEL_KEY: &[u8] = b"zz/sentinel";

const ERR_EMPTY_KEY: &str = "etcdserver: key is not provided";
const ERR_VALUE_PROVIDED: &str = "etcdserver: value is provided";
const ERR_LEASE_PROVIDED: &str = "etcdserver: lease is provided";
const ERR_KEY_NOT_FOUND: &str = "etcdserver: key not found";
const ERR_LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";
const ERR_COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
const ERR_FUTURE_REV: &str = "etcdserver: mvcc: required revision is a future revision";
const ERR_DUPLICATE_KEY: &str = "etcdserver: duplicate key given in txn request";
const ERR_TOO_MANY_OPS: &str = "etcdserver: too many operations in txn request";
const ERR_LEASE_EXISTS: &str = "etcdserver: lease already exists";
const ERR_LEASE_TTL_TOO_LARGE: &str = "etcdserver: too large lease TTL";

/// (op kind, outcome) pairs that must each occur at least once over a full run.
const REQUIRED: &[(&str, &str)] = &[
    ("put", "ok"),
    ("put", "ok: prev_kv returned"),
    ("put", "ok: ignore_value"),
    ("put", "ok: ignore_lease"),
    ("put", ERR_EMPTY_KEY),
    ("put", ERR_VALUE_PROVIDED),
    ("put", ERR_LEASE_PROVIDED),
    ("put", ERR_KEY_NOT_FOUND),
    ("put", ERR_LEASE_NOT_FOUND),
    ("put", "ok: with a lease"),
    ("range", "ok"),
    ("range", "ok: more"),
    ("range", "ok: historical"),
    ("range", "ok: at the compacted revision"),
    ("range", "ok: sorted"),
    ("range", "ok: count_only"),
    ("range", "ok: keys_only"),
    ("range", "ok: all keys"),
    ("range", ERR_EMPTY_KEY),
    ("range", ERR_COMPACTED),
    ("range", ERR_FUTURE_REV),
    ("delete", "ok: deleted some"),
    ("delete", "ok: deleted none"),
    ("delete", "ok: prev_kv returned"),
    ("delete", ERR_EMPTY_KEY),
    ("txn", "ok: succeeded"),
    ("txn", "ok: failed"),
    ("txn", "ok: nested txn"),
    ("txn", "ok: compare over a range"),
    ("txn", ERR_EMPTY_KEY),
    ("txn", ERR_DUPLICATE_KEY),
    ("txn", ERR_TOO_MANY_OPS),
    ("txn", ERR_COMPACTED),
    ("txn", ERR_FUTURE_REV),
    ("txn", ERR_LEASE_NOT_FOUND),
    ("txn", "ok: put with a lease"),
    ("txn", "ok: compare on a granted lease"),
    ("compact", "ok"),
    ("compact", "ok: physical"),
    ("compact", "ok: at the current revision"),
    ("compact", "ok: at a past revision"),
    ("compact", ERR_COMPACTED),
    ("compact", ERR_FUTURE_REV),
    ("lease grant", "ok: server-chosen id"),
    ("lease grant", "ok: client-chosen id"),
    ("lease grant", "ok: TTL raised to the minimum"),
    ("lease grant", "ok: the largest TTL"),
    ("lease grant", ERR_LEASE_EXISTS),
    ("lease grant", ERR_LEASE_TTL_TOO_LARGE),
    ("lease revoke", "ok: keys deleted"),
    ("lease revoke", "ok: no keys"),
    ("lease revoke", ERR_LEASE_NOT_FOUND),
    ("lease ttl", "ok: keys listed"),
    ("lease ttl", "ok: keys not asked for"),
    ("lease ttl", "ok: unknown lease"),
    ("lease list", "ok: several"),
    ("keepalive", "ok: renewed"),
    ("keepalive", "ok: unknown lease"),
    ("expiry", "ok: keys deleted"),
    ("watch", "ok: live"),
    ("watch", "ok: replay"),
    ("watch", "refused: compacted"),
];

#[derive(Clone, Debug)]
enum Op {
    Put(PutRequest),
    Range(RangeRequest),
    Delete(DeleteRangeRequest),
    Txn(TxnRequest),
    Compact(CompactionRequest),
    Grant(LeaseGrantRequest),
    Revoke(LeaseRevokeRequest),
    TimeToLive(LeaseTimeToLiveRequest),
    Leases,
    /// One request on a LeaseKeepAlive stream, one response.
    KeepAlive(LeaseKeepAliveRequest),
}

impl Op {
    fn kind(&self) -> &'static str {
        match self {
            Op::Put(_) => "put",
            Op::Range(_) => "range",
            Op::Delete(_) => "delete",
            Op::Txn(_) => "txn",
            Op::Compact(_) => "compact",
            Op::Grant(_) => "lease grant",
            Op::Revoke(_) => "lease revoke",
            Op::TimeToLive(_) => "lease ttl",
            Op::Leases => "lease list",
            Op::KeepAlive(_) => "keepalive",
        }
    }

    /// The op as sent to a server: symbolic lease ids replaced by the server's own.
    fn to_server(&self, ids: &LeaseIds) -> Op {
        let mut op = self.clone();
        match &mut op {
            Op::Put(p) => p.lease = ids.to_server(p.lease),
            Op::Txn(t) => txn_to_server(t, ids),
            Op::Grant(g) => g.id = ids.to_server(g.id),
            Op::Revoke(r) => r.id = ids.to_server(r.id),
            Op::TimeToLive(r) => r.id = ids.to_server(r.id),
            Op::KeepAlive(r) => r.id = ids.to_server(r.id),
            Op::Range(_) | Op::Delete(_) | Op::Compact(_) | Op::Leases => {}
        }
        op
    }
}

fn txn_to_server(txn: &mut TxnRequest, ids: &LeaseIds) {
    for c in &mut txn.compare {
        if let Some(TargetUnion::Lease(id)) = &mut c.target_union {
            *id = ids.to_server(*id);
        }
    }
    for op in txn.success.iter_mut().chain(txn.failure.iter_mut()) {
        match &mut op.request {
            Some(request_op::Request::RequestPut(p)) => p.lease = ids.to_server(p.lease),
            Some(request_op::Request::RequestTxn(t)) => txn_to_server(t, ids),
            _ => {}
        }
    }
}

/// Maps lease ids a server chose to symbolic ones and back (see the module documentation).
#[derive(Default)]
struct LeaseIds {
    /// Server id → symbolic id.
    symbolic: HashMap<i64, i64>,
    /// Symbolic id → server id.
    server: HashMap<i64, i64>,
}

impl LeaseIds {
    fn to_server(&self, id: i64) -> i64 {
        self.server.get(&id).copied().unwrap_or(id)
    }

    fn to_test(&self, id: i64) -> i64 {
        self.symbolic.get(&id).copied().unwrap_or(id)
    }

    /// Gives the id a server chose for a grant the next symbolic id.
    fn chosen(&mut self, id: i64) -> i64 {
        let symbolic = SYMBOLIC_LEASE + self.server.len() as i64 + 1;
        self.symbolic.insert(id, symbolic);
        self.server.insert(symbolic, id);
        symbolic
    }

    fn kv(&self, kv: &mut KeyValue) {
        kv.lease = self.to_test(kv.lease);
    }

    fn txn(&self, txn: &mut TxnResponse) {
        for op in &mut txn.responses {
            match &mut op.response {
                Some(response_op::Response::ResponseRange(r)) => r.kvs.iter_mut().for_each(|kv| self.kv(kv)),
                Some(response_op::Response::ResponsePut(r)) => r.prev_kv.iter_mut().for_each(|kv| self.kv(kv)),
                Some(response_op::Response::ResponseDeleteRange(r)) => r.prev_kvs.iter_mut().for_each(|kv| self.kv(kv)),
                Some(response_op::Response::ResponseTxn(r)) => self.txn(r),
                None => {}
            }
        }
    }

    /// Turns the server's lease ids in `reply` (to `sent`, the op as sent) into symbolic ones.
    fn reply(&mut self, sent: &Op, reply: &mut Reply) {
        match reply {
            Reply::Put(r) => r.prev_kv.iter_mut().for_each(|kv| self.kv(kv)),
            Reply::Range(r) => r.kvs.iter_mut().for_each(|kv| self.kv(kv)),
            Reply::Delete(r) => r.prev_kvs.iter_mut().for_each(|kv| self.kv(kv)),
            Reply::Txn(r) => self.txn(r),
            Reply::Compact(_) | Reply::Revoke(_) => {}
            Reply::Grant(r) => {
                r.id = match sent {
                    Op::Grant(g) if g.id == 0 => self.chosen(r.id),
                    _ => self.to_test(r.id),
                }
            }
            Reply::TimeToLive(r) => r.id = self.to_test(r.id),
            Reply::Leases(r) => r.leases.iter_mut().for_each(|l| l.id = self.to_test(l.id)),
            Reply::KeepAlive(r) => r.id = self.to_test(r.id),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Reply {
    Put(PutResponse),
    Range(RangeResponse),
    Delete(DeleteRangeResponse),
    Txn(TxnResponse),
    Compact(CompactionResponse),
    Grant(LeaseGrantResponse),
    Revoke(LeaseRevokeResponse),
    TimeToLive(LeaseTimeToLiveResponse),
    Leases(LeaseLeasesResponse),
    KeepAlive(LeaseKeepAliveResponse),
}

impl Reply {
    fn header(&self) -> &Option<ResponseHeader> {
        match self {
            Reply::Put(r) => &r.header,
            Reply::Range(r) => &r.header,
            Reply::Delete(r) => &r.header,
            Reply::Txn(r) => &r.header,
            Reply::Compact(r) => &r.header,
            Reply::Grant(r) => &r.header,
            Reply::Revoke(r) => &r.header,
            Reply::TimeToLive(r) => &r.header,
            Reply::Leases(r) => &r.header,
            Reply::KeepAlive(r) => &r.header,
        }
    }
}

/// A gRPC error as a client sees it.
#[derive(Clone, Debug, PartialEq)]
struct Failure {
    code: tonic::Code,
    message: String,
}

type Answer = Result<Reply, Failure>;

/// One server's clients, and its lease ids.
struct Conn {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    ids: LeaseIds,
}

impl Conn {
    async fn new(server: &Server) -> Conn {
        let channel = server.channel().await;
        Conn { kv: KvClient::new(channel.clone()), lease: LeaseClient::new(channel), ids: LeaseIds::default() }
    }
}

/// Sends `op` (symbolic lease ids translated) and returns the normalised answer.
async fn execute(conn: &mut Conn, op: &Op) -> Answer {
    let sent = op.to_server(&conn.ids);
    let (kv, lease) = (&mut conn.kv, &mut conn.lease);
    let reply = match sent.clone() {
        Op::Put(r) => kv.put(r).await.map(|r| Reply::Put(r.into_inner())),
        Op::Range(r) => kv.range(r).await.map(|r| Reply::Range(r.into_inner())),
        Op::Delete(r) => kv.delete_range(r).await.map(|r| Reply::Delete(r.into_inner())),
        Op::Txn(r) => kv.txn(r).await.map(|r| Reply::Txn(r.into_inner())),
        Op::Compact(r) => kv.compact(r).await.map(|r| Reply::Compact(r.into_inner())),
        Op::Grant(r) => lease.lease_grant(r).await.map(|r| Reply::Grant(r.into_inner())),
        Op::Revoke(r) => lease.lease_revoke(r).await.map(|r| Reply::Revoke(r.into_inner())),
        Op::TimeToLive(r) => lease.lease_time_to_live(r).await.map(|r| Reply::TimeToLive(r.into_inner())),
        Op::Leases => lease.lease_leases(LeaseLeasesRequest {}).await.map(|r| Reply::Leases(r.into_inner())),
        Op::KeepAlive(r) => keep_alive_once(lease, r).await.map(Reply::KeepAlive),
    };
    match reply {
        Ok(mut reply) => {
            normalise(&mut reply);
            conn.ids.reply(&sent, &mut reply);
            normalise_lease_reply(&mut reply);
            Ok(reply)
        }
        Err(status) => Err(Failure { code: status.code(), message: status.message().to_string() }),
    }
}

/// Sends one keep-alive request on a fresh stream and returns the first response. The request
/// stream stays open until then (the RPC is cancelled when the response stream is dropped).
async fn keep_alive_once(
    lease: &mut LeaseClient<Channel>,
    request: LeaseKeepAliveRequest,
) -> Result<LeaseKeepAliveResponse, tonic::Status> {
    let requests = tokio_stream::iter([request]).chain(tokio_stream::pending());
    let exchange = async {
        let mut responses = lease.lease_keep_alive(requests).await?.into_inner();
        responses.message().await?.ok_or_else(|| tonic::Status::unknown("keep-alive stream ended without a response"))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no keep-alive response")))
}

/// Sorts what etcd returns in map or expiry order and replaces a remaining TTL in range.
fn normalise_lease_reply(reply: &mut Reply) {
    match reply {
        Reply::Leases(r) => r.leases.sort_by_key(|l| l.id),
        Reply::TimeToLive(r) => {
            r.keys.sort();
            if r.granted_ttl > 0 && (0..=r.granted_ttl).contains(&r.ttl) {
                r.ttl = REMAINING_TTL;
            }
        }
        _ => {}
    }
}

/// Whether `code` is one etcd answers requests with, rather than a sign that the server is gone.
fn etcd_api_error(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(code, InvalidArgument | NotFound | OutOfRange | FailedPrecondition | ResourceExhausted)
}

/// Maps the per-server header fields to "set" (1) or "unset" (0), at every nesting level.
fn normalise(reply: &mut Reply) {
    match reply {
        Reply::Put(r) => normalise_header(&mut r.header),
        Reply::Range(r) => normalise_header(&mut r.header),
        Reply::Delete(r) => normalise_header(&mut r.header),
        Reply::Compact(r) => normalise_header(&mut r.header),
        Reply::Txn(r) => normalise_txn(r),
        Reply::Grant(r) => normalise_header(&mut r.header),
        Reply::Revoke(r) => normalise_header(&mut r.header),
        Reply::TimeToLive(r) => normalise_header(&mut r.header),
        Reply::Leases(r) => normalise_header(&mut r.header),
        Reply::KeepAlive(r) => normalise_header(&mut r.header),
    }
}

fn normalise_txn(txn: &mut TxnResponse) {
    normalise_header(&mut txn.header);
    for op in &mut txn.responses {
        match &mut op.response {
            Some(response_op::Response::ResponseRange(r)) => normalise_header(&mut r.header),
            Some(response_op::Response::ResponsePut(r)) => normalise_header(&mut r.header),
            Some(response_op::Response::ResponseDeleteRange(r)) => normalise_header(&mut r.header),
            Some(response_op::Response::ResponseTxn(r)) => normalise_txn(r),
            None => {}
        }
    }
}

fn normalise_header(header: &mut Option<ResponseHeader>) {
    if let Some(h) = header {
        h.cluster_id = u64::from(h.cluster_id != 0);
        h.member_id = u64::from(h.member_id != 0);
        h.raft_term = u64::from(h.raft_term != 0);
    }
}

/// What the generator knows of the store, from etcd's answers.
#[derive(Clone, Copy, Debug)]
struct Model {
    /// Current revision (1 on a fresh store).
    rev: i64,
    /// Last successful compaction revision (0: none yet).
    compacted: i64,
}

/// Generates operations; all randomness comes from the seeded `rng`.
struct Gen {
    rng: ChaCha8Rng,
    /// Leases granted and neither revoked nor expired (symbolic or client-chosen ids), from
    /// etcd's answers.
    leases: Vec<i64>,
    /// Leases granted once and gone since.
    gone: Vec<i64>,
}

fn prefix_end(key: &[u8]) -> Bytes {
    let mut end = key.to_vec();
    while let Some(last) = end.last_mut() {
        if *last < 0xff {
            *last += 1;
            return end.into();
        }
        end.pop();
    }
    Bytes::from_static(b"\0")
}

impl Gen {
    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.random_range(0..items.len())]
    }

    fn written_key(&mut self) -> Bytes {
        Bytes::from_static(self.pick(KEYS))
    }

    fn read_key(&mut self) -> Bytes {
        if self.chance(0.15) {
            Bytes::from_static(self.pick(ABSENT))
        } else {
            self.written_key()
        }
    }

    fn value(&mut self) -> Bytes {
        Bytes::from_static(self.pick(VALUES))
    }

    /// A (key, range_end) pair: single key, prefix, from-key, all keys, arbitrary bounds
    /// (including range_end < key and range_end == key), or an empty key.
    fn key_range(&mut self) -> (Bytes, Bytes) {
        let roll = self.rng.random_range(0..100);
        if roll < 3 {
            let end = if self.chance(0.5) { Bytes::new() } else { Bytes::from_static(b"\0") };
            return (Bytes::new(), end);
        }
        if roll < 10 {
            return (Bytes::from_static(b"\0"), Bytes::from_static(b"\0"));
        }
        let key = self.read_key();
        let end = match self.rng.random_range(0..100) {
            0..=44 => Bytes::new(),
            45..=64 => prefix_end(&key),
            65..=74 => Bytes::from_static(b"\0"),
            75..=94 => self.read_key(),
            _ => Bytes::from_static(b"\xff"),
        };
        (key, end)
    }

    /// A revision to read at: current (0, negative, explicit), within history, exactly the
    /// compacted one, below it (compacted error) or above the current one (future error).
    fn read_rev(&mut self, m: Model) -> i64 {
        let lowest = m.compacted.max(1);
        match self.rng.random_range(0..12) {
            0 => m.rev,
            1 => (m.rev - 1).max(1),
            2..=4 => self.rng.random_range(lowest..=m.rev),
            5 => lowest,
            6 | 7 if m.compacted >= 2 => self.rng.random_range(1..m.compacted),
            6 | 7 => self.rng.random_range(1..=m.rev),
            8 | 9 => m.rev + self.rng.random_range(1..=3),
            10 => -self.rng.random_range(1..=2),
            _ => 1,
        }
    }

    /// A revision bound for filters and compares: anywhere from 0 to just past the current one.
    fn any_rev(&mut self, m: Model) -> i64 {
        self.rng.random_range(0..=m.rev + 1)
    }

    fn op(&mut self, m: Model) -> Op {
        match self.rng.random_range(0..100) {
            0..=25 => Op::Put(self.put()),
            26..=48 => Op::Range(self.range(m)),
            49..=58 => Op::Delete(self.delete()),
            59..=82 => Op::Txn(self.txn(m)),
            83..=87 => Op::Compact(self.compact(m)),
            88..=92 => Op::Grant(self.grant()),
            93..=94 => Op::Revoke(LeaseRevokeRequest { id: self.lease_ref() }),
            95..=97 => Op::TimeToLive(LeaseTimeToLiveRequest { id: self.lease_ref(), keys: self.chance(0.6) }),
            98 => Op::Leases,
            _ => Op::KeepAlive(LeaseKeepAliveRequest { id: self.lease_ref() }),
        }
    }

    /// A lease id to use: mostly a live one (often the latest, so that leases collect keys), else
    /// one revoked or expired, or one never granted.
    fn lease_ref(&mut self) -> i64 {
        match self.rng.random_range(0..10) {
            0..=3 if !self.leases.is_empty() => self.leases[self.leases.len() - 1],
            4..=6 if !self.leases.is_empty() => self.leases[self.rng.random_range(0..self.leases.len())],
            7 if !self.gone.is_empty() => self.gone[self.rng.random_range(0..self.gone.len())],
            _ => self.pick(LEASES),
        }
    }

    /// TTLs mostly long, some at or below etcd's minimum, some above its maximum; ids mostly
    /// server-chosen, some client-chosen, some already in use.
    fn grant(&mut self) -> LeaseGrantRequest {
        let ttl = match self.rng.random_range(0..20) {
            0..=14 => self.pick(LONG_TTLS),
            15..=17 => self.pick(SHORT_TTLS),
            _ => self.pick(TOO_LONG_TTLS),
        };
        let id = match self.rng.random_range(0..20) {
            0..=11 => 0,
            12..=16 => self.pick(GRANT_IDS),
            _ if !self.leases.is_empty() => self.leases[self.rng.random_range(0..self.leases.len())],
            _ => 0,
        };
        LeaseGrantRequest { ttl, id }
    }

    fn put(&mut self) -> PutRequest {
        let key = if self.chance(0.03) { Bytes::new() } else { self.written_key() };
        let mut put = PutRequest { key, value: self.value(), prev_kv: self.chance(0.4), ..Default::default() };
        if self.chance(0.25) {
            put.lease = self.lease_ref();
        }
        if self.chance(0.1) {
            put.ignore_value = true;
            if self.chance(0.7) {
                put.value = Bytes::new();
            }
        }
        if self.chance(0.1) {
            put.ignore_lease = true;
            if self.chance(0.3) {
                put.lease = self.lease_ref();
            }
        }
        put
    }

    fn range(&mut self, m: Model) -> RangeRequest {
        let (key, range_end) = self.key_range();
        let mut range = RangeRequest {
            key,
            range_end,
            serializable: self.chance(0.2),
            keys_only: self.chance(0.15),
            count_only: self.chance(0.1),
            ..Default::default()
        };
        if self.chance(0.3) {
            range.limit = self.pick(&[1, 1, 2, 3, 5, 20, -1]);
        }
        if self.chance(0.3) {
            range.revision = self.read_rev(m);
        }
        if self.chance(0.4) {
            range.sort_order = self.rng.random_range(0..3);
            range.sort_target = self.rng.random_range(0..5);
        }
        if self.chance(0.1) {
            range.min_mod_revision = self.any_rev(m);
        }
        if self.chance(0.1) {
            range.max_mod_revision = self.any_rev(m);
        }
        if self.chance(0.1) {
            range.min_create_revision = self.any_rev(m);
        }
        if self.chance(0.1) {
            range.max_create_revision = self.any_rev(m);
        }
        range
    }

    fn delete(&mut self) -> DeleteRangeRequest {
        let (key, range_end) = self.key_range();
        DeleteRangeRequest { key, range_end, prev_kv: self.chance(0.5) }
    }

    fn compact(&mut self, m: Model) -> CompactionRequest {
        let revision = match self.rng.random_range(0..20) {
            0..=7 if m.rev - 1 > m.compacted => self.rng.random_range(m.compacted + 1..m.rev),
            0..=11 => m.rev,
            12..=15 if m.compacted > 0 => self.rng.random_range(1..=m.compacted),
            12..=15 => m.rev + 1,
            16..=18 => m.rev + self.rng.random_range(1..=3),
            _ => self.pick(&[0, -1]),
        };
        CompactionRequest { revision, physical: self.chance(0.5) }
    }

    fn compare(&mut self, m: Model) -> Compare {
        let key = if self.chance(0.02) { Bytes::new() } else { self.read_key() };
        let range_end = match self.rng.random_range(0..100) {
            0..=69 => Bytes::new(),
            70..=81 => prefix_end(&key),
            82..=91 => Bytes::from_static(b"\0"),
            _ => self.read_key(),
        };
        let target = self.rng.random_range(0..5);
        let union_target = if self.chance(0.04) {
            self.rng.random_range(0..6) // mismatched target union, or none at all (5)
        } else {
            target
        };
        let target_union = match CompareTarget::try_from(union_target) {
            Ok(CompareTarget::Version) => Some(TargetUnion::Version(self.rng.random_range(0..=4))),
            Ok(CompareTarget::Create) => Some(TargetUnion::CreateRevision(self.any_rev(m))),
            Ok(CompareTarget::Mod) => Some(TargetUnion::ModRevision(self.any_rev(m))),
            Ok(CompareTarget::Value) => Some(TargetUnion::Value(self.value())),
            Ok(CompareTarget::Lease) => Some(TargetUnion::Lease(if self.chance(0.4) { 0 } else { self.lease_ref() })),
            Err(_) => None,
        };
        Compare { result: self.rng.random_range(0..4), target, key, range_end, target_union }
    }

    fn request_op(&mut self, m: Model, depth: u32) -> RequestOp {
        let request = match self.rng.random_range(0..100) {
            0..=34 => request_op::Request::RequestRange(self.range(m)),
            35..=69 => request_op::Request::RequestPut(self.put()),
            70..=89 => {
                // Deletes in txns mostly hit single keys, so that not every txn with a put
                // collides with a delete range.
                let mut delete = self.delete();
                if self.chance(0.6) {
                    delete.range_end = Bytes::new();
                }
                request_op::Request::RequestDeleteRange(delete)
            }
            _ if depth < 2 => request_op::Request::RequestTxn(self.txn_at(m, depth + 1)),
            _ => request_op::Request::RequestRange(self.range(m)),
        };
        RequestOp { request: Some(request) }
    }

    fn ops(&mut self, m: Model, depth: u32, max: usize) -> Vec<RequestOp> {
        let n = self.rng.random_range(0..=max);
        (0..n).map(|_| self.request_op(m, depth)).collect()
    }

    fn txn(&mut self, m: Model) -> TxnRequest {
        let mut txn = if self.chance(0.15) { self.special_txn(m) } else { self.txn_at(m, 0) };
        avoid_etcd_apply_panic(&mut txn);
        txn
    }

    fn txn_at(&mut self, m: Model, depth: u32) -> TxnRequest {
        let compares = self.rng.random_range(0..=3);
        TxnRequest {
            compare: (0..compares).map(|_| self.compare(m)).collect(),
            success: self.ops(m, depth, 3),
            failure: self.ops(m, depth, 3),
        }
    }

    fn put_op(key: Bytes, value: Bytes) -> RequestOp {
        RequestOp { request: Some(request_op::Request::RequestPut(PutRequest { key, value, ..Default::default() })) }
    }

    fn range_op(key: Bytes) -> RequestOp {
        RequestOp { request: Some(request_op::Request::RequestRange(RangeRequest { key, ..Default::default() })) }
    }

    fn txn_op(txn: TxnRequest) -> RequestOp {
        RequestOp { request: Some(request_op::Request::RequestTxn(txn)) }
    }

    /// Txns aimed at validation: duplicate puts, puts overlapping delete ranges (also across
    /// nesting levels, where then/else of a nested txn may legitimately share keys), the
    /// 128-operation limit (also the budget left to nested txns), empty compare keys.
    fn special_txn(&mut self, m: Model) -> TxnRequest {
        let mut txn = self.txn_at(m, 1);
        let key = self.written_key();
        let value = self.value();
        match self.rng.random_range(0..7) {
            0 => {
                // Two puts of one key.
                txn.success.push(Self::put_op(key.clone(), value.clone()));
                txn.success.push(Self::put_op(key, value));
            }
            1 => {
                // A put inside a delete range of the same branch, in either order.
                let end = if self.chance(0.5) { prefix_end(&key) } else { Bytes::from_static(b"\0") };
                let delete = RequestOp {
                    request: Some(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                        key: key.clone(),
                        range_end: end,
                        prev_kv: false,
                    })),
                };
                let put = Self::put_op(key, value);
                txn.failure = if self.chance(0.5) { vec![delete, put] } else { vec![put, delete] };
            }
            2 => {
                // Around the 128 limit, in compares, success or failure.
                let n = self.pick(&[128, 129, 129, 200]);
                match self.rng.random_range(0..3) {
                    0 => {
                        txn.compare = (0..n)
                            .map(|_| Compare {
                                key: key.clone(),
                                result: CompareResult::Greater as i32,
                                target: CompareTarget::Version as i32,
                                target_union: Some(TargetUnion::Version(-1)),
                                ..Default::default()
                            })
                            .collect()
                    }
                    1 => txn.success = (0..n).map(|_| Self::range_op(key.clone())).collect(),
                    _ => txn.failure = (0..n).map(|_| Self::range_op(key.clone())).collect(),
                }
            }
            3 => {
                // A nested txn gets only what its parent left of the 128 budget.
                let outer = self.rng.random_range(55..=70);
                let inner = self.rng.random_range(55..=70);
                let mut ops: Vec<RequestOp> = (0..outer).map(|_| Self::range_op(key.clone())).collect();
                ops.push(Self::txn_op(TxnRequest {
                    success: (0..inner).map(|_| Self::range_op(key.clone())).collect(),
                    ..Default::default()
                }));
                txn.success = ops;
            }
            4 => {
                // An empty key in one of the compares.
                let mut compare = self.compare(m);
                compare.key = Bytes::new();
                let at = self.rng.random_range(0..=txn.compare.len());
                txn.compare.insert(at, compare);
            }
            5 => {
                // The same key put by the parent and by a nested txn branch: duplicate.
                let nested = TxnRequest {
                    compare: vec![self.compare(m)],
                    success: if self.chance(0.5) { vec![Self::put_op(key.clone(), value.clone())] } else { vec![] },
                    failure: vec![Self::put_op(key.clone(), value.clone())],
                };
                txn.success = vec![Self::put_op(key, value), Self::txn_op(nested)];
            }
            _ => {
                // The same key in both branches of a nested txn: allowed (only one runs), and a
                // sibling nested txn putting it again: duplicate.
                let branchy = TxnRequest {
                    compare: vec![self.compare(m)],
                    success: vec![Self::put_op(key.clone(), value.clone())],
                    failure: vec![Self::put_op(key.clone(), Bytes::from_static(b"else"))],
                };
                let mut ops = vec![Self::txn_op(branchy.clone())];
                if self.chance(0.4) {
                    ops.push(Self::txn_op(branchy));
                }
                txn.success = ops;
            }
        }
        txn
    }
}

/// etcd 3.4 crashes on some txns, so the generator must not send them.
///
/// etcd's duplicate-key check models a delete with `range_end = "\0"` (from-key, or all keys) as
/// the empty interval `[key, "\0")`, so a put after such a delete in the same txn is accepted; if
/// that put has `ignore_value` or `ignore_lease`, it was validated against the state *before* the
/// txn (key present) but at apply time the key is gone, and etcd panics with "unexpected error
/// during txn: etcdserver: key not found" (seen with seed 17). Such txns get those two flags
/// cleared; plain puts after from-key deletes stay, since etcd answers them normally.
fn avoid_etcd_apply_panic(txn: &mut TxnRequest) {
    fn has_from_key_delete(ops: &[RequestOp]) -> bool {
        ops.iter().any(|op| match &op.request {
            Some(request_op::Request::RequestDeleteRange(d)) => d.range_end.as_ref() == b"\0",
            Some(request_op::Request::RequestTxn(t)) => {
                has_from_key_delete(&t.success) || has_from_key_delete(&t.failure)
            }
            _ => false,
        })
    }
    fn clear_ignore_flags(ops: &mut [RequestOp]) {
        for op in ops {
            match &mut op.request {
                Some(request_op::Request::RequestPut(p)) => {
                    p.ignore_value = false;
                    p.ignore_lease = false;
                }
                Some(request_op::Request::RequestTxn(t)) => {
                    clear_ignore_flags(&mut t.success);
                    clear_ignore_flags(&mut t.failure);
                }
                _ => {}
            }
        }
    }
    if has_from_key_delete(&txn.success) {
        clear_ignore_flags(&mut txn.success);
    }
    if has_from_key_delete(&txn.failure) {
        clear_ignore_flags(&mut txn.failure);
    }
}

/// Counts (op kind, outcome) pairs.
#[derive(Default)]
struct Coverage {
    seen: BTreeMap<(&'static str, String), usize>,
    ops: usize,
}

impl Coverage {
    fn note(&mut self, kind: &'static str, outcome: impl Into<String>) {
        *self.seen.entry((kind, outcome.into())).or_default() += 1;
    }

    /// Notes what `op` exercised; `model` is the store as it was before `op`.
    fn record(&mut self, op: &Op, answer: &Answer, model: Model) {
        self.ops += 1;
        let kind = op.kind();
        let reply = match answer {
            Err(f) => {
                self.note(kind, f.message.clone());
                return;
            }
            Ok(reply) => reply,
        };
        self.note(kind, "ok");
        match (op, reply) {
            (Op::Put(req), Reply::Put(resp)) => {
                if resp.prev_kv.is_some() {
                    self.note(kind, "ok: prev_kv returned");
                }
                if req.ignore_value {
                    self.note(kind, "ok: ignore_value");
                }
                if req.ignore_lease {
                    self.note(kind, "ok: ignore_lease");
                }
                if req.lease != 0 && !req.ignore_lease {
                    self.note(kind, "ok: with a lease");
                }
            }
            (Op::Range(req), Reply::Range(resp)) => {
                if resp.more {
                    self.note(kind, "ok: more");
                }
                if req.revision > 0 && req.revision < model.rev {
                    self.note(kind, "ok: historical");
                }
                if model.compacted > 0 && req.revision == model.compacted {
                    self.note(kind, "ok: at the compacted revision");
                }
                if req.sort_order != SortOrder::None as i32 || req.sort_target != SortTarget::Key as i32 {
                    self.note(kind, "ok: sorted");
                }
                self.note(kind, sort_outcome(req.sort_order, req.sort_target));
                if req.count_only {
                    self.note(kind, "ok: count_only");
                }
                if req.keys_only {
                    self.note(kind, "ok: keys_only");
                }
                if req.key.as_ref() == b"\0" && req.range_end.as_ref() == b"\0" {
                    self.note(kind, "ok: all keys");
                }
            }
            (Op::Delete(req), Reply::Delete(resp)) => {
                if resp.deleted > 0 {
                    self.note(kind, "ok: deleted some");
                } else {
                    self.note(kind, "ok: deleted none");
                }
                if req.prev_kv && !resp.prev_kvs.is_empty() {
                    self.note(kind, "ok: prev_kv returned");
                }
            }
            (Op::Txn(req), Reply::Txn(resp)) => {
                self.note(kind, if resp.succeeded { "ok: succeeded" } else { "ok: failed" });
                let nested =
                    resp.responses.iter().any(|r| matches!(r.response, Some(response_op::Response::ResponseTxn(_))));
                if nested {
                    self.note(kind, "ok: nested txn");
                }
                if req.compare.iter().any(|c| !c.range_end.is_empty()) {
                    self.note(kind, "ok: compare over a range");
                }
                for c in &req.compare {
                    self.note(kind, compare_outcome(c.target, c.result));
                }
                let branch = if resp.succeeded { &req.success } else { &req.failure };
                let leased_put = branch.iter().any(|op| {
                    matches!(&op.request, Some(request_op::Request::RequestPut(p)) if p.lease != 0 && !p.ignore_lease)
                });
                if leased_put {
                    self.note(kind, "ok: put with a lease");
                }
                let granted = req
                    .compare
                    .iter()
                    .any(|c| matches!(c.target_union, Some(TargetUnion::Lease(id)) if is_symbolic(id)));
                if granted {
                    self.note(kind, "ok: compare on a granted lease");
                }
            }
            (Op::Compact(req), Reply::Compact(_)) => {
                if req.physical {
                    self.note(kind, "ok: physical");
                }
                if req.revision == model.rev {
                    self.note(kind, "ok: at the current revision");
                } else {
                    self.note(kind, "ok: at a past revision");
                }
            }
            (Op::Grant(req), Reply::Grant(resp)) => {
                self.note(kind, if req.id == 0 { "ok: server-chosen id" } else { "ok: client-chosen id" });
                if resp.ttl > req.ttl {
                    self.note(kind, "ok: TTL raised to the minimum");
                }
                if req.ttl == MAX_LEASE_TTL {
                    self.note(kind, "ok: the largest TTL");
                }
            }
            (Op::Revoke(_), Reply::Revoke(resp)) => {
                let deleted = resp.header.as_ref().is_some_and(|h| h.revision > model.rev);
                self.note(kind, if deleted { "ok: keys deleted" } else { "ok: no keys" });
            }
            (Op::TimeToLive(req), Reply::TimeToLive(resp)) => {
                if resp.ttl == -1 {
                    self.note(kind, "ok: unknown lease");
                } else if !req.keys {
                    self.note(kind, "ok: keys not asked for");
                } else if !resp.keys.is_empty() {
                    self.note(kind, "ok: keys listed");
                }
            }
            (Op::Leases, Reply::Leases(resp)) if resp.leases.len() >= 2 => self.note(kind, "ok: several"),
            (Op::KeepAlive(_), Reply::KeepAlive(resp)) => {
                self.note(kind, if resp.ttl > 0 { "ok: renewed" } else { "ok: unknown lease" });
            }
            _ => {}
        }
    }

    /// Required outcomes that never occurred: [`REQUIRED`], every sort order × target of a
    /// successful range, every compare target × result of a successful txn.
    fn missing(&self) -> Vec<String> {
        let mut required: Vec<(&'static str, String)> =
            REQUIRED.iter().map(|(kind, outcome)| (*kind, outcome.to_string())).collect();
        for order in 0..3 {
            for target in 0..5 {
                required.push(("range", sort_outcome(order, target)));
            }
        }
        for target in 0..5 {
            for result in 0..4 {
                required.push(("txn", compare_outcome(target, result)));
            }
        }
        required
            .into_iter()
            .filter(|key| !self.seen.contains_key(key))
            .map(|(kind, outcome)| format!("{kind}: {outcome}"))
            .collect()
    }

    fn table(&self) -> String {
        let mut out = String::new();
        for ((kind, outcome), n) in &self.seen {
            out.push_str(&format!("  {kind:12} {n:6}  {outcome}\n"));
        }
        out
    }
}

/// Whether `id` is a symbolic id of a server-chosen lease.
fn is_symbolic(id: i64) -> bool {
    (SYMBOLIC_LEASE..SYMBOLIC_LEASE + (1 << 32)).contains(&id)
}

fn sort_outcome(order: i32, target: i32) -> String {
    let order = SortOrder::try_from(order).map(|o| o.as_str_name()).unwrap_or("?");
    let target = SortTarget::try_from(target).map(|t| t.as_str_name()).unwrap_or("?");
    format!("ok: sort {order} by {target}")
}

fn compare_outcome(target: i32, result: i32) -> String {
    let target = CompareTarget::try_from(target).map(|t| t.as_str_name()).unwrap_or("?");
    let result = CompareResult::try_from(result).map(|r| r.as_str_name()).unwrap_or("?");
    format!("ok: compare {target} {result}")
}

/// Debug text cut to `max` characters (txns of 200 ops are long).
fn short(value: &impl Debug, max: usize) -> String {
    let text = format!("{value:?}");
    if text.chars().count() <= max {
        text
    } else {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}… ({} chars)", text.len())
    }
}

/// The end of a server log, or its last panic (a Go panic is followed by a long goroutine dump).
fn log_excerpt(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    match lines.iter().rposition(|l| l.starts_with("panic:") || l.starts_with("thread '")) {
        Some(at) if at + 15 < lines.len() => lines[at..lines.len().min(at + 50)].join("\n"),
        _ => common::tail(log, 15),
    }
}

fn parse_seeds(spec: &str) -> Vec<u64> {
    let parse =
        |s: &str| -> u64 { s.trim().parse().unwrap_or_else(|_| panic!("KEEL_DIFF_SEEDS: bad seed {s:?} in {spec:?}")) };
    let mut seeds = Vec::new();
    for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
        if let Some((lo, hi)) = part.split_once("..=") {
            seeds.extend(parse(lo)..=parse(hi));
        } else if let Some((lo, hi)) = part.split_once("..") {
            seeds.extend(parse(lo)..parse(hi));
        } else {
            seeds.push(parse(part));
        }
    }
    assert!(!seeds.is_empty(), "KEEL_DIFF_SEEDS={spec:?} names no seed");
    seeds
}

/// Polls `done` every 20 ms until it holds (true) or [`WATCH_DEADLINE`] passes (false).
async fn poll_until(done: impl FnMut() -> bool) -> bool {
    common::poll_until(WATCH_DEADLINE, Duration::from_millis(20), done).await
}

/// Waits until `watch` (with `-w json`) has shown an event at revision `rev` or later, or exited.
async fn shows_revision(watch: &mut Etcdctl, rev: i64) -> bool {
    poll_until(|| watched_revision(&watch.stdout()) >= rev || watch.exited()).await;
    watched_revision(&watch.stdout()) >= rev
}

/// `etcdctl watch -w json --prefix --prev-kv --rev=<rev> ''`: every key, from `rev` on.
fn watch_args(rev: i64) -> Vec<String> {
    ["watch", "-w", "json", "--prefix", "--prev-kv", &format!("--rev={rev}"), ""].map(String::from).to_vec()
}

/// The events of etcdctl's `watch -w json` output, one line each (lease ids symbolic), and every
/// response without events (a cancellation) with its header normalised like gRPC headers; lines
/// that are not JSON (etcdctl's own messages) are kept as they are. How events are grouped into
/// responses, and so the headers of responses with events, depend on timing and are dropped.
fn watch_events(stdout: &str, ids: &LeaseIds) -> Vec<String> {
    let mut lines = Vec::new();
    for line in stdout.lines() {
        let Ok(Value::Object(mut response)) = serde_json::from_str::<Value>(line) else {
            lines.push(line.to_string());
            continue;
        };
        match response.remove("Events") {
            Some(Value::Array(events)) if !events.is_empty() => {
                for mut event in events {
                    for kv in ["kv", "prev_kv"] {
                        if let Some(lease) = event.get_mut(kv).and_then(|kv| kv.get_mut("lease")) {
                            if let Some(id) = lease.as_i64() {
                                *lease = Value::from(ids.to_test(id));
                            }
                        }
                    }
                    lines.push(event.to_string());
                }
                response.remove("Header");
                let rest = Value::Object(response);
                if rest != serde_json::json!({"CompactRevision": 0, "Canceled": false, "Created": false}) {
                    lines.push(rest.to_string());
                }
            }
            _ => {
                if let Some(Value::Object(header)) = response.get_mut("Header") {
                    for field in ["cluster_id", "member_id", "raft_term"] {
                        if let Some(value) = header.get_mut(field) {
                            *value = Value::from(u64::from(value.as_u64() != Some(0)));
                        }
                    }
                }
                lines.push(Value::Object(response).to_string());
            }
        }
    }
    lines
}

/// The revision of the last event in etcdctl's `watch -w json` output (0: none). Events come in
/// revision order, so only the last response with events is read.
fn watched_revision(stdout: &str) -> i64 {
    stdout
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|response| {
            let events = response.get("Events")?.as_array()?;
            events.iter().filter_map(|event| event.get("kv")?.get("mod_revision")?.as_i64()).max()
        })
        .unwrap_or(0)
}

/// What a watch printed, normalised.
#[derive(Debug, PartialEq)]
struct WatchOutcome {
    /// `None`: still running when stopped.
    code: Option<i32>,
    /// [`watch_events`] of stdout.
    stdout: Vec<String>,
    stderr: String,
}

impl WatchOutcome {
    fn of(process: Etcdctl, ids: &LeaseIds) -> WatchOutcome {
        let (code, stdout, stderr) = process.finish();
        WatchOutcome { code, stdout: watch_events(&stdout, ids), stderr }
    }
}

/// Where two watch outcomes first differ, with a few lines of context.
fn watch_difference(want: &WatchOutcome, got: &WatchOutcome, name: &str) -> String {
    let at = want.stdout.iter().zip(&got.stdout).take_while(|(a, b)| a == b).count();
    let window = |lines: &[String]| -> String {
        let from = at.saturating_sub(3);
        lines.iter().enumerate().skip(from).take(8).map(|(i, l)| format!("    {i:5}: {}\n", short(l, 400))).collect()
    };
    format!(
        "etcd: exit {:?}, {} lines, stderr {:?}\n{name}: exit {:?}, {} lines, stderr {:?}\n\
         first difference at line {at}\n  etcd:\n{}  {name}:\n{}",
        want.code,
        want.stdout.len(),
        want.stderr,
        got.code,
        got.stdout.len(),
        got.stderr,
        window(&want.stdout),
        window(&got.stdout)
    )
}

struct Run {
    against: Kind,
    /// Extra flags for the server under test (`KEEL_DIFF_FLAGS`).
    flags: String,
    ops: usize,
    trace: bool,
}

impl Run {
    fn replay(&self, seed: u64, ops: usize) -> String {
        let against = match self.against {
            Kind::Etcd => "KEEL_DIFF_AGAINST=etcd ",
            Kind::Keel => "",
        };
        let flags = if self.flags.is_empty() { String::new() } else { format!("KEEL_DIFF_FLAGS={:?} ", self.flags) };
        format!(
            "{against}{flags}KEEL_DIFF_SEEDS={seed} KEEL_DIFF_OPS={ops} KEEL_DIFF_TRACE=1 \
             cargo test --workspace --test differential -- --nocapture"
        )
    }

    /// Runs one seed on a fresh pair of servers; `Err` describes the first difference, with the
    /// last lines of both servers' logs (a crash shows up there).
    async fn seed(&self, seed: u64, coverage: &mut Coverage) -> Result<(), String> {
        let flags: Vec<&str> = self.flags.split_whitespace().collect();
        let (etcd, other) = tokio::join!(Server::start(Kind::Etcd), Server::start_with(self.against, &flags));
        self.compare(seed, &etcd, &other, coverage).await.map_err(|report| {
            let logs: String = [&etcd, &other]
                .iter()
                .map(|s| format!("--- last lines of {}'s log ---\n{}\n", s.kind().name(), log_excerpt(&s.log())))
                .collect();
            format!("{report}\n{logs}")
        })
    }

    async fn compare(&self, seed: u64, etcd: &Server, other: &Server, coverage: &mut Coverage) -> Result<(), String> {
        let (mut a, mut b) = (Conn::new(etcd).await, Conn::new(other).await);
        let name = self.against.name();
        let mut gen = Gen { rng: ChaCha8Rng::seed_from_u64(seed), leases: Vec::new(), gone: Vec::new() };
        let mut model = Model { rev: 1, compacted: 0 };
        let mut recent: VecDeque<String> = VecDeque::new();

        let check = |label: String,
                     op: &Op,
                     want: &Answer,
                     got: &Answer,
                     recent: &VecDeque<String>,
                     model: Model,
                     replay_ops: usize|
         -> Result<(), String> {
            let etcd_broke = matches!(want, Err(f) if !etcd_api_error(f.code));
            if want == got && !etcd_broke {
                return Ok(());
            }
            let history: String = recent.iter().map(|l| format!("  {l}\n")).collect();
            let verdict = if etcd_broke {
                "etcd itself failed (crashed, hung or unreachable): fix the generator, it must only send \
                 what etcd answers"
                    .to_string()
            } else {
                format!("etcd and {name} disagree")
            };
            Err(format!(
                "{verdict}\n\
                 seed {seed}, {label}\n\
                 operation:\n{op:#?}\n\
                 etcd answered:\n{want:#?}\n\
                 {name} answered:\n{got:#?}\n\
                 preceding operations (oldest first):\n{history}\
                 model before the op: {model:?}\n\
                 replay: {}\n",
                self.replay(seed, replay_ops)
            ))
        };
        // Anything else that went wrong: a watch that did not get as far as it must, two watches
        // that differ, a lease that did not expire.
        let failure = |label: &str, detail: String| -> String {
            format!("seed {seed}, {label}\n{detail}\nreplay: {}\n", self.replay(seed, self.ops))
        };

        // The live watches, from the first write on.
        let mut live = Some([Etcdctl::spawn(etcd, &watch_args(2), None), Etcdctl::spawn(other, &watch_args(2), None)]);

        for i in 0..self.ops {
            let op = gen.op(model);
            if let (Op::Compact(_), Some(watches)) = (&op, &mut live) {
                // A compaction must not overtake an event still on its way to a live watch.
                for (watch, server) in watches.iter_mut().zip(["etcd", name]) {
                    if model.rev > 1 && !shows_revision(watch, model.rev).await {
                        let detail = format!(
                            "{server}'s live `etcdctl watch` did not show revision {} (within {WATCH_DEADLINE:?}); \
                             {}",
                            model.rev,
                            watch.report()
                        );
                        return Err(failure(&format!("before op #{i} (compact)"), detail));
                    }
                }
            }
            let want = execute(&mut a, &op).await;
            let got = execute(&mut b, &op).await;
            if self.trace {
                eprintln!("seed {seed} #{i}: {}\n  -> {}", short(&op, 2000), short(&want, 2000));
            }
            let label = format!("op #{i} ({})", op.kind());
            check(label, &op, &want, &got, &recent, model, i + 1)?;
            coverage.record(&op, &want, model);
            if let Ok(reply) = &want {
                if let Some(h) = reply.header() {
                    model.rev = h.revision;
                }
                match (&op, reply) {
                    (Op::Compact(c), Reply::Compact(_)) => model.compacted = c.revision,
                    (Op::Grant(_), Reply::Grant(r)) if r.ttl < LONG_TTLS[0] => {
                        // Revoked before anything can use it: it would expire during the run. It
                        // may already have expired (not found).
                        let revoke = Op::Revoke(LeaseRevokeRequest { id: r.id });
                        for (conn, server) in [(&mut a, "etcd"), (&mut b, name)] {
                            match execute(conn, &revoke).await {
                                Ok(_) => {}
                                Err(f) if f.code == tonic::Code::NotFound && f.message == ERR_LEASE_NOT_FOUND => {}
                                Err(f) => {
                                    let detail = format!("revoking the short lease {} failed: {f:?}", r.id);
                                    return Err(failure(&format!("after op #{i} on {server}"), detail));
                                }
                            }
                        }
                        gen.gone.push(r.id);
                    }
                    (Op::Grant(_), Reply::Grant(r)) => gen.leases.push(r.id),
                    (Op::Revoke(r), Reply::Revoke(_)) => {
                        gen.leases.retain(|&id| id != r.id);
                        gen.gone.push(r.id);
                    }
                    _ => {}
                }
            }
            recent.push_back(format!("#{i}: {} -> {}", short(&op, 300), short(&want, 300)));
            if recent.len() > 6 {
                recent.pop_front();
            }
        }

        // The whole retained history, from below the compacted revision to past the current one.
        let all_keys_at = |revision: i64| {
            Op::Range(RangeRequest {
                key: Bytes::from_static(b"\0"),
                range_end: Bytes::from_static(b"\0"),
                revision,
                ..Default::default()
            })
        };
        for rev in (model.compacted - 1).max(1)..=model.rev + 1 {
            let op = all_keys_at(rev);
            let want = execute(&mut a, &op).await;
            let got = execute(&mut b, &op).await;
            check(format!("history sweep at revision {rev}"), &op, &want, &got, &recent, model, self.ops)?;
        }

        // A lease that expires: its keys must go, on both servers, in one revision.
        let mut lease = 0;
        let doomed: [&'static [u8]; 3] = [b"a/1", b"b", b"e\xff"];
        for step in 0..=doomed.len() {
            let op = if step == 0 {
                Op::Grant(LeaseGrantRequest { ttl: EXPIRING_TTL, id: 0 })
            } else {
                Op::Put(PutRequest {
                    key: Bytes::from_static(doomed[step - 1]),
                    value: Bytes::from_static(b"expiring"),
                    lease,
                    prev_kv: true,
                    ..Default::default()
                })
            };
            let want = execute(&mut a, &op).await;
            let got = execute(&mut b, &op).await;
            check(format!("expiry check, step {step}"), &op, &want, &got, &recent, model, self.ops)?;
            match want {
                Ok(Reply::Grant(r)) => lease = r.id,
                Ok(reply) => model.rev = reply.header().as_ref().map_or(model.rev, |h| h.revision),
                Err(f) => return Err(failure("expiry check", format!("etcd refused {op:?}: {f:?}"))),
            }
        }
        for (conn, server) in [(&mut a, "etcd"), (&mut b, name)] {
            let deadline = Instant::now() + WATCH_DEADLINE;
            loop {
                let answer = execute(conn, &all_keys_at(0)).await;
                let left = match &answer {
                    Ok(Reply::Range(r)) => r.kvs.iter().any(|kv| kv.lease == lease),
                    _ => true,
                };
                if !left {
                    break;
                }
                if Instant::now() >= deadline {
                    let detail = format!(
                        "the keys of lease {lease} (TTL {EXPIRING_TTL} s) are still there after \
                         {WATCH_DEADLINE:?} on {server}: {answer:?}"
                    );
                    return Err(failure("expiry check", detail));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        for op in [all_keys_at(0), Op::TimeToLive(LeaseTimeToLiveRequest { id: lease, keys: true }), Op::Leases] {
            let want = execute(&mut a, &op).await;
            let got = execute(&mut b, &op).await;
            check(format!("after the lease expired: {}", op.kind()), &op, &want, &got, &recent, model, self.ops)?;
            if let Ok(reply) = &want {
                model.rev = reply.header().as_ref().map_or(model.rev, |h| h.revision);
            }
        }
        coverage.note("expiry", "ok: keys deleted");

        // The sentinel ends the live watches.
        let op = Op::Put(PutRequest {
            key: Bytes::from_static(SENTINEL_KEY),
            value: Bytes::from(format!("seed {seed}")),
            ..Default::default()
        });
        let want = execute(&mut a, &op).await;
        let got = execute(&mut b, &op).await;
        check("sentinel put".to_string(), &op, &want, &got, &recent, model, self.ops)?;
        if let Ok(reply) = &want {
            model.rev = reply.header().as_ref().map_or(model.rev, |h| h.revision);
        }
        let ids = [&a.ids, &b.ids];
        let watches = live.take().expect("live watches");
        let mut outcomes = Vec::new();
        for ((mut watch, server), ids) in watches.into_iter().zip(["etcd", name]).zip(ids) {
            if !shows_revision(&mut watch, model.rev).await {
                let detail = format!(
                    "{server}'s live `etcdctl watch` did not show the sentinel (revision {}) (within \
                     {WATCH_DEADLINE:?}); {}",
                    model.rev,
                    watch.report()
                );
                return Err(failure("live watch", detail));
            }
            outcomes.push(WatchOutcome::of(watch, ids));
        }
        if outcomes[0] != outcomes[1] {
            let detail = format!(
                "`etcdctl {}` saw different events:\n{}",
                watch_args(2).join(" "),
                watch_difference(&outcomes[0], &outcomes[1], name)
            );
            return Err(failure("live watch", detail));
        }
        coverage.note("watch", "ok: live");

        // Replays: from the compacted revision (the oldest one kept), a middle one, the latest one,
        // and from just below the compacted one (refused, also in plain text: etcdctl prints the
        // cancellation to stderr).
        let lowest = model.compacted.max(1);
        let mut runs: Vec<(i64, Vec<String>)> =
            [lowest, (lowest + model.rev) / 2, model.rev].into_iter().map(|start| (start, watch_args(start))).collect();
        if model.compacted >= 2 {
            let below = model.compacted - 1;
            runs.push((below, watch_args(below)));
            runs.push((below, ["watch", "--prefix", &format!("--rev={below}"), ""].map(String::from).to_vec()));
        }
        for (start, args) in runs {
            let refused = start < model.compacted;
            let mut watches = [Etcdctl::spawn(etcd, &args, None), Etcdctl::spawn(other, &args, None)];
            for (watch, server) in watches.iter_mut().zip(["etcd", name]) {
                let done =
                    if refused { poll_until(|| watch.exited()).await } else { shows_revision(watch, model.rev).await };
                if !done {
                    let detail = format!(
                        "`etcdctl {}` on {server} did not {} (within {WATCH_DEADLINE:?}); {}",
                        args.join(" "),
                        if refused { "exit".to_string() } else { format!("show revision {}", model.rev) },
                        watch.report()
                    );
                    return Err(failure("watch replay", detail));
                }
            }
            let [w0, w1] = watches;
            let (want, got) = (WatchOutcome::of(w0, &a.ids), WatchOutcome::of(w1, &b.ids));
            if self.trace {
                eprintln!("seed {seed}: etcdctl {} on etcd:\n{want:#?}", args.join(" "));
            }
            if want != got {
                let detail = format!("`etcdctl {}` differs:\n{}", args.join(" "), watch_difference(&want, &got, name));
                return Err(failure("watch replay", detail));
            }
            coverage.note("watch", if refused { "refused: compacted" } else { "ok: replay" });
        }
        Ok(())
    }
}

#[tokio::test]
async fn keel_answers_like_etcd() {
    let seeds = parse_seeds(&std::env::var("KEEL_DIFF_SEEDS").unwrap_or_else(|_| DEFAULT_SEEDS.to_string()));
    let ops =
        std::env::var("KEEL_DIFF_OPS").map(|s| s.parse().expect("KEEL_DIFF_OPS: a number")).unwrap_or(DEFAULT_OPS);
    let run = Run {
        against: Kind::under_test(),
        flags: std::env::var("KEEL_DIFF_FLAGS").unwrap_or_default(),
        ops,
        trace: std::env::var_os("KEEL_DIFF_TRACE").is_some_and(|v| !v.is_empty() && v != "0"),
    };
    let started = Instant::now();
    let mut coverage = Coverage::default();
    for &seed in &seeds {
        if let Err(report) = run.seed(seed, &mut coverage).await {
            panic!("{report}");
        }
    }
    eprintln!(
        "differential: {} seeds × {ops} ops, etcd vs {}: no difference ({:.1?})\ncoverage:\n{}",
        seeds.len(),
        run.against.name(),
        started.elapsed(),
        coverage.table()
    );
    if coverage.ops >= COVERAGE_MIN_OPS {
        let missing = coverage.missing();
        assert!(missing.is_empty(), "the generator never produced: {missing:#?}\ncoverage:\n{}", coverage.table());
    }
}
