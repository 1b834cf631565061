//! The closed-loop workloads: `put`, `range`, `txn-put` (compare-and-swap) and
//! `lease-keepalive`. Each client task sends one request, waits for its answer, records the
//! latency and sends the next, until the run's total is issued or its time is up. Setup (lease
//! grants, streams, connections) happens before the clock starts.
//!
//! Keys are the key space's numbers as zero-padded decimal, exactly `key_size` bytes (`00004711`
//! for 8-byte keys), so keys sort in number order and the 100 keys that share all but the last
//! two digits form a prefix (what `range --page` reads). Values are `val_size` bytes cut from a
//! random pool at an offset that moves with each request, so they do not compress.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use bytes::Bytes;
use keel_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::lease_client::LeaseClient;
use keel_proto::etcdserverpb::request_op::Request;
use keel_proto::etcdserverpb::response_op::Response;
use keel_proto::etcdserverpb::{
    Compare, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse, PutRequest, RangeRequest, RequestOp,
    TxnRequest,
};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::conn;
use crate::hist::Latencies;
use crate::progress::{Goal, Progress};
use crate::report::Report;

/// How many requests a run sends when neither `--total` nor `--duration` is given.
pub const DEFAULT_TOTAL: u64 = 10_000;
/// A client that gets this many errors in a row stops (the server is down or refusing).
const ERROR_STREAK: u32 = 100;

/// How many clients send and over how many connections, for how long.
#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
pub struct Load {
    /// Concurrent clients (tokio tasks), each with one request in flight.
    #[arg(long, default_value_t = 1)]
    pub clients: usize,
    /// HTTP/2 connections the clients share (client i uses connection i % conns).
    #[arg(long, default_value_t = 1)]
    pub conns: usize,
    /// Requests to send in all [default: 10000 unless --duration is given].
    #[arg(long)]
    pub total: Option<u64>,
    /// Seconds to send for, instead of a total.
    #[arg(long)]
    pub duration: Option<f64>,
}

impl Load {
    pub fn new(clients: usize, conns: usize) -> Self {
        Self { clients, conns, total: None, duration: None }
    }

    pub fn for_secs(mut self, secs: f64) -> Self {
        self.duration = Some(secs);
        self
    }

    pub fn for_total(mut self, total: u64) -> Self {
        self.total = Some(total);
        self
    }

    fn goal(&self) -> Goal {
        match (self.duration, self.total) {
            (Some(s), _) => Goal::Time(Duration::from_secs_f64(s)),
            (None, n) => Goal::Count(n.unwrap_or(DEFAULT_TOTAL)),
        }
    }
}

/// Which keys and values the requests carry.
#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
pub struct Keys {
    /// Key length in bytes.
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value length in bytes.
    #[arg(long, default_value_t = 256)]
    pub val_size: usize,
    /// How many distinct keys requests pick from.
    #[arg(long, default_value_t = 100_000)]
    pub key_space_size: u64,
    /// Pick keys 0, 1, 2, ... (wrapping at the key space) instead of at random.
    #[arg(long)]
    pub sequential_keys: bool,
}

impl Default for Keys {
    fn default() -> Self {
        Self { key_size: 8, val_size: 256, key_space_size: 100_000, sequential_keys: false }
    }
}

impl Keys {
    /// Refuses key spaces the key size cannot number.
    pub fn check(&self) -> Result<()> {
        let fits = 10f64.powi(self.key_size.min(19) as i32);
        if self.key_size == 0 || self.key_space_size == 0 || self.key_space_size as f64 > fits {
            bail!(
                "--key-space-size {} needs keys of at least {} bytes (--key-size is {})",
                self.key_space_size,
                self.key_space_size.to_string().len(),
                self.key_size
            );
        }
        Ok(())
    }

    /// The key numbered `n`: zero-padded decimal, `key_size` bytes.
    pub fn key(&self, n: u64) -> Bytes {
        Bytes::from(format!("{n:0width$}", width = self.key_size).into_bytes())
    }

    /// The number of the key request `seq` uses.
    pub fn pick(&self, seq: u64, rng: &mut StdRng) -> u64 {
        if self.sequential_keys {
            seq % self.key_space_size
        } else {
            rng.random_range(0..self.key_space_size)
        }
    }
}

/// Incompressible values: slices of one random pool, shared, so making one copies nothing.
#[derive(Clone)]
pub struct Values {
    pool: Bytes,
    size: usize,
}

const POOL_BYTES: usize = 64 << 10;

impl Values {
    pub fn new(size: usize, seed: u64) -> Self {
        let mut pool = vec![0u8; POOL_BYTES + size];
        StdRng::seed_from_u64(seed).fill_bytes(&mut pool);
        Self { pool: pool.into(), size }
    }

    /// The value for request `seq`.
    pub fn get(&self, seq: u64) -> Bytes {
        let off = (seq.wrapping_mul(4099) % POOL_BYTES as u64) as usize;
        self.pool.slice(off..off + self.size)
    }
}

/// One client of a closed-loop workload.
pub trait Client: Send + 'static {
    /// Sends request number `seq` (numbered over the whole run) and waits for its answer.
    fn call(&mut self, seq: u64) -> impl Future<Output = Result<(), Status>> + Send;
}

/// Runs `clients` until the load's total is issued or its time is up; the report's `params` are
/// `params`. Errors are counted, not timed.
pub async fn drive<C: Client>(name: &str, params: serde_json::Value, load: &Load, clients: Vec<C>) -> Report {
    let goal = load.goal();
    let progress = Progress::start(name, "ops", goal);
    let issued = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            let (issued, done) = (issued.clone(), progress.counter());
            tokio::spawn(async move {
                let (mut lat, mut errors, mut streak, mut first_error) = (Latencies::default(), 0u64, 0u32, None);
                loop {
                    let seq = issued.fetch_add(1, Ordering::Relaxed);
                    let over = match goal {
                        Goal::Count(n) => seq >= n,
                        Goal::Time(d) => start.elapsed() >= d,
                        Goal::Open => false,
                    };
                    if over {
                        break;
                    }
                    let t = Instant::now();
                    match c.call(seq).await {
                        Ok(()) => {
                            lat.record(t.elapsed());
                            streak = 0;
                        }
                        Err(e) => {
                            errors += 1;
                            streak += 1;
                            first_error.get_or_insert_with(|| format!("{}: {}", e.code(), e.message()));
                            if streak >= ERROR_STREAK {
                                break;
                            }
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                (lat, errors, first_error)
            })
        })
        .collect();
    let mut report = Report { workload: name.to_string(), params, ..Default::default() };
    let mut lat = Latencies::default();
    for t in tasks {
        match t.await {
            Ok((l, e, first)) => {
                lat.merge(&l);
                report.errors += e;
                if report.first_error.is_none() {
                    report.first_error = first;
                }
            }
            Err(join) => report.first_error = Some(format!("client task failed: {join}")),
        }
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    progress.finish();
    report.ops = lat.count();
    report.ops_per_s = report.ops as f64 / report.elapsed_s.max(1e-9);
    report.latency = lat.summary();
    report
}

/// Connects and builds one client per `load.clients`, each given its index and its channel.
async fn clients<C, F, Fut>(endpoints: &[String], load: &Load, make: F) -> Result<Vec<C>>
where
    F: Fn(usize, Channel) -> Fut,
    Fut: Future<Output = Result<C>>,
{
    if load.clients == 0 {
        bail!("--clients must be positive");
    }
    let channels = conn::connect(endpoints, load.conns).await?;
    futures::future::try_join_all((0..load.clients).map(|i| make(i, channels[i % channels.len()].clone()))).await
}

/// `put`: puts of `key_size`-byte keys and `val_size`-byte values.
#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
pub struct PutSpec {
    #[command(flatten)]
    pub load: Load,
    #[command(flatten)]
    pub keys: Keys,
}

struct PutClient {
    kv: KvClient<Channel>,
    keys: Keys,
    values: Values,
    rng: StdRng,
}

impl Client for PutClient {
    async fn call(&mut self, seq: u64) -> Result<(), Status> {
        let key = self.keys.key(self.keys.pick(seq, &mut self.rng));
        let req = PutRequest { key, value: self.values.get(seq), ..Default::default() };
        self.kv.put(req).await.map(|_| ())
    }
}

pub async fn put(endpoints: &[String], spec: &PutSpec) -> Result<Report> {
    spec.keys.check()?;
    let clients = clients(endpoints, &spec.load, |i, ch| async move {
        Ok(PutClient {
            kv: KvClient::new(ch),
            keys: spec.keys.clone(),
            values: Values::new(spec.keys.val_size, i as u64),
            rng: StdRng::seed_from_u64(i as u64),
        })
    })
    .await?;
    Ok(drive("put", serde_json::to_value(spec)?, &spec.load, clients).await)
}

/// Writes every key of the key space once (sequential keys, 256 clients over 32 connections),
/// so reads find what they ask for. Fails if any put failed.
pub async fn preload(endpoints: &[String], keys: &Keys) -> Result<Report> {
    let keys = Keys { sequential_keys: true, ..keys.clone() };
    let spec = PutSpec { load: Load::new(256, 32).for_total(keys.key_space_size), keys };
    let mut r = put(endpoints, &spec).await?;
    r.workload = "preload".into();
    if r.errors > 0 || r.ops < spec.keys.key_space_size {
        bail!("preload wrote {} of {} keys: {:?}", r.ops, spec.keys.key_space_size, r.first_error);
    }
    Ok(r)
}

/// Range consistency, as etcd's benchmark names it.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Consistency {
    /// Linearizable: a ReadIndex round through the leader first.
    L,
    /// Serializable: the member's local state.
    S,
}

/// `range`: reads of single keys, or of pages of a 100-key prefix.
#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
pub struct RangeSpec {
    #[command(flatten)]
    pub load: Load,
    #[command(flatten)]
    pub keys: Keys,
    #[arg(long, value_enum, default_value = "l")]
    pub consistency: Consistency,
    /// 0: read one key. N > 0: read the prefix of the 100 keys sharing all but the last two
    /// digits with a random key, at most N of them (a page; `count` still counts all 100).
    #[arg(long, default_value_t = 0)]
    pub page: i64,
    /// Write every key of the key space first (not timed).
    #[arg(long)]
    pub preload: bool,
}

struct RangeClient {
    kv: KvClient<Channel>,
    spec: RangeSpec,
    rng: StdRng,
}

impl Client for RangeClient {
    async fn call(&mut self, seq: u64) -> Result<(), Status> {
        let keys = &self.spec.keys;
        let n = keys.pick(seq, &mut self.rng);
        let serializable = self.spec.consistency == Consistency::S;
        let req = if self.spec.page > 0 {
            let first = keys.key(n - n % 100);
            let prefix = first.slice(..first.len().saturating_sub(2));
            RangeRequest {
                range_end: prefix_end(&prefix),
                key: prefix,
                limit: self.spec.page,
                serializable,
                ..Default::default()
            }
        } else {
            RangeRequest { key: keys.key(n), serializable, ..Default::default() }
        };
        self.kv.range(req).await.map(|_| ())
    }
}

/// The smallest key after every key that starts with `prefix` (etcd's `GetPrefixRangeEnd`).
pub fn prefix_end(prefix: &[u8]) -> Bytes {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end.into();
        }
    }
    Bytes::from_static(&[0])
}

pub async fn range(endpoints: &[String], spec: &RangeSpec) -> Result<Report> {
    spec.keys.check()?;
    if spec.preload {
        preload(endpoints, &spec.keys).await?;
    }
    let clients = clients(endpoints, &spec.load, |i, ch| async move {
        Ok(RangeClient { kv: KvClient::new(ch), spec: spec.clone(), rng: StdRng::seed_from_u64(i as u64) })
    })
    .await?;
    Ok(drive("range", serde_json::to_value(spec)?, &spec.load, clients).await)
}

/// `txn-put`: compare-and-swap. Each request is a Txn "if the key's mod revision is the one
/// this client last saw, put; else read it", as an optimistic-concurrency client (Kubernetes'
/// GuaranteedUpdate) writes. Client `i` of `n` updates the keys numbered `i mod n` (clients
/// share keys only when there are more clients than keys). After a conflict (the else branch,
/// counted in `cas_conflicts`) the client retries the same key with the revision it just read,
/// as GuaranteedUpdate does; so a key written before the run costs one conflict.
#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
pub struct TxnSpec {
    #[command(flatten)]
    pub load: Load,
    #[command(flatten)]
    pub keys: Keys,
}

struct TxnClient {
    kv: KvClient<Channel>,
    /// This client's number and the number of clients: it owns keys `index mod clients`.
    index: u64,
    clients: u64,
    keys: Keys,
    values: Values,
    rng: StdRng,
    /// The mod revision this client last saw per key (0: absent).
    seen: std::collections::HashMap<u64, i64>,
    /// The key to retry after a conflict.
    retry: Option<u64>,
    conflicts: Arc<AtomicU64>,
}

impl Client for TxnClient {
    async fn call(&mut self, seq: u64) -> Result<(), Status> {
        let space = self.keys.key_space_size;
        let owned = (space / self.clients).max(1);
        let n = match self.retry.take() {
            Some(n) => n,
            None => ((self.keys.pick(seq, &mut self.rng) % owned) * self.clients + self.index) % space,
        };
        let key = self.keys.key(n);
        let seen = self.seen.get(&n).copied().unwrap_or(0);
        let req = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: key.clone(),
                target_union: Some(TargetUnion::ModRevision(seen)),
                ..Default::default()
            }],
            success: vec![RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: key.clone(),
                    value: self.values.get(seq),
                    ..Default::default()
                })),
            }],
            failure: vec![RequestOp {
                request: Some(Request::RequestRange(RangeRequest { key, ..Default::default() })),
            }],
        };
        let resp = self.kv.txn(req).await?.into_inner();
        let now = if resp.succeeded {
            resp.header.map_or(0, |h| h.revision)
        } else {
            self.conflicts.fetch_add(1, Ordering::Relaxed);
            self.retry = Some(n);
            match resp.responses.into_iter().next().and_then(|r| r.response) {
                Some(Response::ResponseRange(r)) => r.kvs.first().map_or(0, |kv| kv.mod_revision),
                _ => 0,
            }
        };
        self.seen.insert(n, now);
        Ok(())
    }
}

pub async fn txn_put(endpoints: &[String], spec: &TxnSpec) -> Result<Report> {
    spec.keys.check()?;
    let conflicts = Arc::new(AtomicU64::new(0));
    let clients = clients(endpoints, &spec.load, |i, ch| {
        let conflicts = conflicts.clone();
        async move {
            Ok(TxnClient {
                kv: KvClient::new(ch),
                index: i as u64,
                clients: spec.load.clients as u64,
                keys: spec.keys.clone(),
                values: Values::new(spec.keys.val_size, i as u64),
                rng: StdRng::seed_from_u64(i as u64),
                seen: Default::default(),
                retry: None,
                conflicts,
            })
        }
    })
    .await?;
    let mut r = drive("txn-put", serde_json::to_value(spec)?, &spec.load, clients).await;
    r.extra.insert("cas_conflicts".into(), conflicts.load(Ordering::Relaxed) as f64);
    Ok(r)
}

/// `lease-keepalive`: each client grants a lease, then renews it over its own keep-alive stream,
/// one renewal in flight at a time.
#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
pub struct LeaseSpec {
    #[command(flatten)]
    pub load: Load,
    /// TTL of the granted leases, seconds.
    #[arg(long, default_value_t = 60)]
    pub ttl: i64,
}

struct KeepAliveClient {
    id: i64,
    tx: mpsc::Sender<LeaseKeepAliveRequest>,
    answers: Streaming<LeaseKeepAliveResponse>,
}

impl Client for KeepAliveClient {
    async fn call(&mut self, _seq: u64) -> Result<(), Status> {
        self.tx
            .send(LeaseKeepAliveRequest { id: self.id })
            .await
            .map_err(|_| Status::unavailable("keep-alive stream closed"))?;
        match self.answers.message().await? {
            Some(a) if a.ttl > 0 => Ok(()),
            Some(_) => Err(Status::not_found("lease expired")),
            None => Err(Status::unavailable("keep-alive stream ended")),
        }
    }
}

pub async fn lease_keepalive(endpoints: &[String], spec: &LeaseSpec) -> Result<Report> {
    let clients = clients(endpoints, &spec.load, |_, ch| async move {
        let mut lease = LeaseClient::new(ch);
        let id = lease.lease_grant(LeaseGrantRequest { ttl: spec.ttl, id: 0 }).await?.into_inner().id;
        let (tx, rx) = mpsc::channel(1);
        // The first request goes out before the call: a server may send its response headers
        // only with its first message.
        tx.send(LeaseKeepAliveRequest { id }).await?;
        let mut answers = lease.lease_keep_alive(ReceiverStream::new(rx)).await?.into_inner();
        answers.message().await?;
        anyhow::Ok(KeepAliveClient { id, tx, answers })
    })
    .await?;
    Ok(drive("lease-keepalive", serde_json::to_value(spec)?, &spec.load, clients).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fixed_width_decimal() {
        let k = Keys::default();
        assert_eq!(&k.key(4711)[..], b"00004711");
        assert!(k.check().is_ok());
        assert!(Keys { key_size: 4, ..Keys::default() }.check().is_err());
        let mut rng = StdRng::seed_from_u64(1);
        let seq = Keys { sequential_keys: true, key_space_size: 3, ..Keys::default() };
        assert_eq!((0..4).map(|s| seq.pick(s, &mut rng)).collect::<Vec<_>>(), [0, 1, 2, 0]);
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(&prefix_end(b"000047")[..], b"000048");
        assert_eq!(&prefix_end(b"a\xff")[..], b"b");
        assert_eq!(&prefix_end(b"\xff")[..], b"\0");
    }

    #[test]
    fn values_differ_and_have_their_size() {
        let v = Values::new(256, 7);
        assert_eq!(v.get(0).len(), 256);
        assert_ne!(v.get(0), v.get(1));
    }
}
