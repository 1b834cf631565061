//! The watch workloads. `streams` gRPC watch streams, spread over `conns` connections, each carry
//! `watchers_per_stream` watchers; watcher `g` (numbered over all streams) watches key
//! `g % watched_keys`. Once every watcher is created, puts go to the watched keys in turn at
//! `put_rate` per second (an open loop: a slow answer does not slow the next put), each value
//! starting with the moment it was sent (nanoseconds since the run began, big-endian). So every
//! put reaches `watchers / watched_keys` watchers, and:
//!
//! - delivery latency is receive time minus that timestamp: the write's commit plus the fan-out;
//! - events/s is events received over the time from the first put to the last event;
//! - completeness: every watcher must receive exactly the revisions of the successful puts to
//!   its key, ascending, each once. Watchers that miss any, get one twice, one out of order or an
//!   unexpected one are counted; a run is `complete` only with none.
//!
//! `watch-latency` is the same with one watched key (etcd benchmark's fan-out latency), and
//! `put_total = 0` measures only what the watchers cost the server (`--pid`: its resident set
//! before and after creating them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::watch_client::WatchClient;
use keel_proto::etcdserverpb::{watch_request::RequestUnion, PutRequest, WatchCreateRequest, WatchRequest};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::conn;
use crate::hist::Latencies;
use crate::memory::settled_rss_kib;
use crate::progress::{Goal, Progress};
use crate::report::Report;
use crate::workload::Keys;

/// Creates answered per stream before more are sent.
const CREATES_IN_FLIGHT: usize = 512;
/// Puts in flight at once (the open loop's bound).
const PUTS_IN_FLIGHT: usize = 256;
/// Connections the puts use.
const PUT_CONNS: usize = 4;
/// How long creating all watchers may take.
const SETUP_DEADLINE: Duration = Duration::from_secs(900);

#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
pub struct WatchSpec {
    /// Watch streams (gRPC Watch calls).
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    #[arg(long, default_value_t = 100)]
    pub watchers_per_stream: usize,
    /// Distinct watched keys: watcher g watches key g % watched-keys [default: one per watcher].
    #[arg(long)]
    pub watched_keys: Option<u64>,
    /// HTTP/2 connections for the watch streams (the puts use 4 of their own).
    #[arg(long, default_value_t = 10)]
    pub conns: usize,
    /// Puts per second.
    #[arg(long, default_value_t = 100)]
    pub put_rate: u64,
    /// Puts in all (0: only create the watchers).
    #[arg(long, default_value_t = 1000)]
    pub put_total: u64,
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size; at least 8 (the timestamp).
    #[arg(long, default_value_t = 256)]
    pub val_size: usize,
    /// Seconds to wait for outstanding events after the last put was answered.
    #[arg(long, default_value_t = 10.0)]
    pub drain_secs: f64,
}

impl WatchSpec {
    pub fn watchers(&self) -> usize {
        self.streams * self.watchers_per_stream
    }

    fn keys(&self) -> u64 {
        self.watched_keys.unwrap_or(self.watchers() as u64).max(1)
    }

    /// Key `k` of the watched set: a `w` then zero-padded decimal, clear of the other workloads'
    /// all-digit keys.
    fn key(&self, k: u64) -> Bytes {
        let digits = Keys { key_size: self.key_size.saturating_sub(1).max(1), ..Keys::default() }.key(k);
        let mut key = b"w".to_vec();
        key.extend_from_slice(&digits);
        key.into()
    }
}

/// Nanoseconds since the first call: the clock put timestamps and receive times share.
fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// What one stream's receiver saw.
#[derive(Default)]
struct Seen {
    /// Per watcher of the stream (creation order): the revisions received, in arrival order.
    revs: Vec<Vec<i64>>,
    latency: Latencies,
    canceled: u64,
    last_event: Option<Instant>,
}

struct Stream {
    /// Global number of the stream's first watcher.
    first: usize,
    task: JoinHandle<Result<Seen>>,
    /// Kept so the stream stays open until the run ends.
    _requests: mpsc::Sender<WatchRequest>,
}

/// Opens stream `s` and creates its watchers, then receives until `stop`.
async fn open_stream(
    spec: &WatchSpec,
    s: usize,
    channel: Channel,
    created: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> Result<Stream> {
    let n = spec.watchers_per_stream;
    let first = s * n;
    let spec = spec.clone();
    let create = move |w: usize| {
        let key = spec.key((first + w) as u64 % spec.keys());
        let req = WatchCreateRequest { key, ..Default::default() };
        WatchRequest { request_union: Some(RequestUnion::CreateRequest(req)) }
    };
    let (tx, rx) = mpsc::channel(CREATES_IN_FLIGHT * 2);
    // The first request goes out before the call: a server may send its response headers only
    // with its first message.
    tx.send(create(0)).await?;
    let mut responses = WatchClient::new(channel).watch(ReceiverStream::new(rx)).await?.into_inner();
    let requests = tx.clone();
    let task = tokio::spawn(async move {
        // The i-th `created` answers the i-th create: a stream's requests are served in order.
        let mut ids: HashMap<i64, usize> = HashMap::with_capacity(n);
        let mut seen = Seen { revs: vec![Vec::new(); n], ..Default::default() };
        let mut sent = 1;
        loop {
            while sent < n && sent - ids.len() < CREATES_IN_FLIGHT {
                tx.send(create(sent)).await?;
                sent += 1;
            }
            let msg = tokio::select! {
                _ = stop.changed() => break,
                m = responses.message() => m?,
            };
            let Some(r) = msg else { bail!("watch stream {s} ended") };
            if r.created {
                if r.canceled {
                    bail!("watch create refused on stream {s}: {}", r.cancel_reason);
                }
                ids.insert(r.watch_id, ids.len());
                created.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if r.canceled {
                seen.canceled += 1;
                continue;
            }
            let Some(&w) = ids.get(&r.watch_id) else { continue };
            let at = now_ns();
            for e in &r.events {
                let Some(kv) = &e.kv else { continue };
                if let Some(ts) = kv.value.get(..8) {
                    let sent_at = u64::from_be_bytes(ts.try_into().expect("8 bytes"));
                    seen.latency.record_us(at.saturating_sub(sent_at) / 1_000);
                }
                seen.revs[w].push(kv.mod_revision);
            }
            received.fetch_add(r.events.len() as u64, Ordering::Relaxed);
            seen.last_event = Some(Instant::now());
        }
        anyhow::Ok(seen)
    });
    Ok(Stream { first, task, _requests: requests })
}

/// Runs the workload against `endpoints`; `pids` (may be empty) are the server processes whose
/// resident set is read before and after the watchers are created.
pub async fn run(endpoints: &[String], spec: &WatchSpec, pids: &[u32]) -> Result<Report> {
    if spec.streams == 0 || spec.watchers_per_stream == 0 || spec.conns == 0 {
        bail!("--streams, --watchers-per-stream and --conns must be positive");
    }
    if spec.put_total > 0 && (spec.val_size < 8 || spec.put_rate == 0) {
        bail!("--val-size must be at least 8 (the timestamp) and --put-rate positive");
    }
    now_ns();
    let channels = conn::connect(endpoints, spec.conns).await?;
    let rss_before = if pids.is_empty() { None } else { Some(settled_rss_kib(pids).await?) };

    let total = spec.watchers();
    let (created, received) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let setup = Instant::now();
    let progress = Progress::start("creating watchers", "watchers", Goal::Count(total as u64));
    let mut streams = Vec::with_capacity(spec.streams);
    for s in 0..spec.streams {
        let ch = channels[s % channels.len()].clone();
        streams.push(open_stream(spec, s, ch, created.clone(), received.clone(), stop_rx.clone()).await?);
    }
    loop {
        let done = created.load(Ordering::Relaxed);
        progress.counter().store(done, Ordering::Relaxed);
        if done == total as u64 {
            break;
        }
        if let Some(st) = streams.iter_mut().find(|st| st.task.is_finished()) {
            let err = (&mut st.task).await?.err().map_or("ended".to_string(), |e| format!("{e:#}"));
            bail!("a watch stream failed while creating watchers: {err}");
        }
        if setup.elapsed() > SETUP_DEADLINE {
            bail!("only {done} of {total} watchers created after {SETUP_DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    progress.finish();
    let setup_s = setup.elapsed().as_secs_f64();
    let rss_after = if pids.is_empty() { None } else { Some(settled_rss_kib(pids).await?) };

    let (wrote, puts) = put_phase(endpoints, spec).await?;

    // Every successful put reaches the watchers of its key; wait for them (bounded).
    let mut per_key = vec![0u64; spec.keys() as usize];
    for g in 0..total as u64 {
        per_key[(g % spec.keys()) as usize] += 1;
    }
    let expected: u64 = wrote.iter().map(|&(k, _)| per_key[k as usize]).sum();
    let drain = Instant::now();
    let progress = Progress::start("draining events", "events", Goal::Count(expected));
    while received.load(Ordering::Relaxed) < expected && drain.elapsed().as_secs_f64() < spec.drain_secs {
        progress.counter().store(received.load(Ordering::Relaxed), Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    progress.finish();
    // Anything late or unexpected would show up now: give it a moment before stopping.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = stop_tx.send(true);

    let mut by_key: Vec<Vec<i64>> = vec![Vec::new(); spec.keys() as usize];
    for &(k, rev) in &wrote {
        by_key[k as usize].push(rev);
    }
    by_key.iter_mut().for_each(|revs| revs.sort_unstable());
    let mut latency = Latencies::default();
    let mut check = Check::default();
    let mut last_event = None;
    for st in streams {
        let seen = st.task.await?.context("watch stream failed")?;
        latency.merge(&seen.latency);
        check.canceled += seen.canceled;
        last_event = last_event.max(seen.last_event);
        for (i, got) in seen.revs.iter().enumerate() {
            check.watcher(got, &by_key[((st.first + i) as u64 % spec.keys()) as usize]);
        }
    }
    let events = latency.count();
    let span = match (puts.first_sent, last_event) {
        (Some(a), Some(b)) if b > a => (b - a).as_secs_f64(),
        _ => puts.elapsed_s,
    };
    let mut r = Report {
        workload: "watch".into(),
        params: serde_json::to_value(spec)?,
        ops: events,
        errors: puts.errors,
        first_error: puts.first_error.clone(),
        elapsed_s: span,
        ops_per_s: events as f64 / span.max(1e-9),
        latency: latency.summary(),
        ..Default::default()
    };
    let x = &mut r.extra;
    x.insert("watchers".into(), total as f64);
    x.insert("setup_s".into(), setup_s);
    x.insert("puts".into(), wrote.len() as f64);
    x.insert("put_p99_us".into(), puts.latency.p99_us as f64);
    x.insert("events_expected".into(), expected as f64);
    x.insert("events_received".into(), received.load(Ordering::Relaxed) as f64);
    x.insert("watchers_missing_events".into(), check.missing as f64);
    x.insert("watchers_out_of_order".into(), check.out_of_order as f64);
    x.insert("watchers_unexpected_events".into(), check.unexpected as f64);
    x.insert("watchers_canceled".into(), check.canceled as f64);
    x.insert("complete".into(), check.complete() as u8 as f64);
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        x.insert("server_rss_before_mib".into(), before as f64 / 1024.0);
        x.insert("server_rss_mib".into(), after as f64 / 1024.0);
        x.insert("rss_per_watcher_bytes".into(), after.saturating_sub(before) as f64 * 1024.0 / total as f64);
    }
    Ok(r)
}

/// What the put phase did.
#[derive(Default)]
struct Puts {
    latency: crate::hist::Summary,
    errors: u64,
    first_error: Option<String>,
    first_sent: Option<Instant>,
    elapsed_s: f64,
}

/// Puts `put_total` values at `put_rate`; returns (key, revision) of each successful put.
async fn put_phase(endpoints: &[String], spec: &WatchSpec) -> Result<(Vec<(u64, i64)>, Puts)> {
    if spec.put_total == 0 {
        return Ok((Vec::new(), Puts::default()));
    }
    let channels = conn::connect(endpoints, PUT_CONNS).await?;
    let wrote = Arc::new(Mutex::new(Vec::with_capacity(spec.put_total as usize)));
    let lat = Arc::new(Mutex::new(Latencies::default()));
    let errors = Arc::new(Mutex::new((0u64, None::<String>)));
    let gate = Arc::new(Semaphore::new(PUTS_IN_FLIGHT));
    let progress = Progress::start("watch puts", "puts", Goal::Count(spec.put_total));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / spec.put_rate as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let pad = vec![b'x'; spec.val_size - 8];
    let start = Instant::now();
    for seq in 0..spec.put_total {
        tick.tick().await;
        let permit = gate.clone().acquire_owned().await?;
        let mut kv = KvClient::new(channels[seq as usize % channels.len()].clone());
        let k = seq % spec.keys();
        let key = spec.key(k);
        let (wrote, lat, errors, done) = (wrote.clone(), lat.clone(), errors.clone(), progress.counter());
        let mut value = Vec::with_capacity(spec.val_size);
        value.extend_from_slice(&now_ns().to_be_bytes());
        value.extend_from_slice(&pad);
        tokio::spawn(async move {
            let t = Instant::now();
            match kv.put(PutRequest { key, value: value.into(), ..Default::default() }).await {
                Ok(resp) => {
                    lat.lock().expect("latency lock").record(t.elapsed());
                    let rev = resp.into_inner().header.map_or(0, |h| h.revision);
                    wrote.lock().expect("wrote lock").push((k, rev));
                }
                Err(e) => {
                    let mut g = errors.lock().expect("errors lock");
                    g.0 += 1;
                    g.1.get_or_insert_with(|| format!("put: {}: {}", e.code(), e.message()));
                }
            }
            done.fetch_add(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    let _all = gate.acquire_many(PUTS_IN_FLIGHT as u32).await?;
    progress.finish();
    let elapsed_s = start.elapsed().as_secs_f64();
    let wrote = std::mem::take(&mut *wrote.lock().expect("wrote lock"));
    let (errors, first_error) = errors.lock().expect("errors lock").clone();
    let latency = lat.lock().expect("latency lock").summary();
    Ok((wrote, Puts { latency, errors, first_error, first_sent: Some(start), elapsed_s }))
}

/// Per-watcher completeness counts.
#[derive(Default, Debug)]
struct Check {
    missing: u64,
    out_of_order: u64,
    unexpected: u64,
    canceled: u64,
}

impl Check {
    /// Compares what a watcher got with the ascending revisions it should have got.
    fn watcher(&mut self, got: &[i64], want: &[i64]) {
        if got == want {
            return;
        }
        if got.windows(2).any(|w| w[0] >= w[1]) {
            self.out_of_order += 1;
        }
        let mut sorted = got.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if want.iter().any(|r| sorted.binary_search(r).is_err()) {
            self.missing += 1;
        }
        if sorted.len() < got.len() || sorted.iter().any(|r| want.binary_search(r).is_err()) {
            self.unexpected += 1;
        }
    }

    fn complete(&self) -> bool {
        self.missing == 0 && self.out_of_order == 0 && self.unexpected == 0 && self.canceled == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completeness_check() {
        let mut c = Check::default();
        c.watcher(&[3, 5, 9], &[3, 5, 9]);
        assert!(c.complete());
        c.watcher(&[3, 9], &[3, 5, 9]);
        assert_eq!(c.missing, 1);
        c.watcher(&[5, 3, 9], &[3, 5, 9]);
        assert_eq!((c.out_of_order, c.missing, c.unexpected), (1, 1, 0));
        c.watcher(&[3, 3, 5, 9], &[3, 5, 9]);
        assert_eq!((c.out_of_order, c.unexpected), (2, 1));
        c.watcher(&[3, 4, 5, 9], &[3, 5, 9]);
        assert_eq!(c.unexpected, 2);
        assert!(!c.complete());
    }

    #[test]
    fn watched_keys_have_their_size_and_a_prefix() {
        let spec = WatchSpec {
            streams: 2,
            watchers_per_stream: 3,
            watched_keys: None,
            conns: 1,
            put_rate: 1,
            put_total: 0,
            key_size: 8,
            val_size: 256,
            drain_secs: 1.0,
        };
        assert_eq!(&spec.key(42)[..], b"w0000042");
        assert_eq!(spec.keys(), 6);
    }
}
