//! What a Raft snapshot costs a member: `cargo bench --workspace --bench raft_snapshot --profile
//! dev -- [KEYS]` (default 1,000,000 keys of 256-byte values, loaded in txns of 100 puts) on the
//! RocksDB engine in a temporary directory. It builds a snapshot while single puts apply beside
//! it (the longest apply is the stall the build caused), reads it to the end in openraft's 3 MiB
//! chunks as a send does, keeps it as openraft does, then receives it into a second state
//! machine and installs it there. For each step: its time and how far this process's resident
//! set rose above where it stood before (peak, sampled every 5 ms, and after).
//!
//! Only openraft's state-machine API is used, so the same file measures any revision of keel.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_proto::etcdserverpb::{request_op, PutRequest, RequestOp, TxnRequest};
use keel_store::engine::{Engine, RocksEngine};
use keel_store::mvcc::Mvcc;
use keel_store::raft::state_machine::StateMachine;
use keel_store::raft::{Command, Proto, TypeConfig};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() / 1024.0
}

/// Samples the resident set every 5 ms; `peak()` is the highest since the last `reset()`.
struct Sampler {
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Sampler {
    fn start() -> Self {
        let (peak_kib, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (p, s) = (peak_kib.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max((rss_mib() * 1024.0) as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Sampler { peak_kib, stop }
    }

    fn reset(&self) -> f64 {
        let now = rss_mib();
        self.peak_kib.store((now * 1024.0) as u64, Ordering::Relaxed);
        now
    }

    fn peak(&self) -> f64 {
        self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn entry(index: u64, cmd: Command) -> Entry<TypeConfig> {
    Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload: EntryPayload::Normal(cmd) }
}

fn put(key: String, value: Vec<u8>) -> PutRequest {
    PutRequest { key: key.into_bytes().into(), value: value.into(), ..Default::default() }
}

fn open(dir: &std::path::Path) -> StateMachine {
    let engine: Arc<dyn Engine> = Arc::new(RocksEngine::open(dir).unwrap());
    StateMachine::open(Arc::new(Mvcc::open(engine).unwrap())).unwrap()
}

fn report(step: &str, took: Duration, before: f64, peak: f64, after: f64, extra: &str) {
    println!(
        "| {step} | {:.2} s | {:.0} MiB | {:.0} MiB |{extra}",
        took.as_secs_f64(),
        (peak - before).max(0.0),
        (after - before).max(0.0)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let keys: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let mut leader = open(&dir.path().join("leader"));
    let mut index = 0;
    let value = vec![b'v'; 256];
    let started = Instant::now();
    for first in (0..keys).step_by(10_000) {
        let entries: Vec<_> = (first..(first + 10_000).min(keys))
            .step_by(100)
            .map(|b| {
                let ops = (b..(b + 100).min(keys))
                    .map(|k| RequestOp {
                        request: Some(request_op::Request::RequestPut(put(format!("key{k:08}"), value.clone()))),
                    })
                    .collect();
                index += 1;
                entry(index, Command::Txn(Proto(TxnRequest { success: ops, ..Default::default() })))
            })
            .collect();
        leader.apply(entries).await.unwrap();
    }
    println!("{keys} keys loaded in {:.1} s; resident set {:.0} MiB\n", started.elapsed().as_secs_f64(), rss_mib());
    println!("| step | time | RSS rise, peak | RSS rise, after | ");
    println!("|---|---:|---:|---:|---|");
    let sampler = Sampler::start();

    // Build, with single puts applying beside it.
    let before = sampler.reset();
    let stop = Arc::new(AtomicBool::new(false));
    let applier = {
        let (mut sm, stop) = (leader.clone(), stop.clone());
        let mut index = index;
        tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                index += 1;
                n += 1;
                let t = Instant::now();
                sm.apply([entry(index, Command::Put(Proto(put(format!("side{n}"), b"x".to_vec()))))]).await.unwrap();
                longest = longest.max(t.elapsed());
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (index, n, longest)
        })
    };
    let t = Instant::now();
    let mut builder = leader.get_snapshot_builder().await;
    let snapshot = builder.build_snapshot().await.unwrap();
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (_, applied, longest) = applier.await.unwrap();
    let meta = snapshot.meta.clone();
    drop(snapshot);
    report(
        "build (puts beside it)",
        took,
        before,
        sampler.peak(),
        rss_mib(),
        &format!(" {applied} puts applied meanwhile, the longest {:.1} ms", longest.as_secs_f64() * 1e3),
    );

    // Send: read the kept snapshot to the end in openraft's chunks.
    let before = sampler.reset();
    let t = Instant::now();
    let mut sent = leader.get_current_snapshot().await.unwrap().expect("a kept snapshot").snapshot;
    let end = sent.seek(std::io::SeekFrom::End(0)).await.unwrap();
    let mut chunks = Vec::new();
    let mut offset = 0;
    while offset < end {
        sent.seek(std::io::SeekFrom::Start(offset)).await.unwrap();
        let mut chunk = vec![0; (3 << 20).min((end - offset) as usize)];
        sent.read_exact(&mut chunk).await.unwrap();
        offset += chunk.len() as u64;
        chunks.push(chunk.len());
    }
    drop(sent);
    report("send (read to the end)", t.elapsed(), before, sampler.peak(), rss_mib(), &format!(" {end} bytes"));

    // Receive and install on a second member, the chunks coming from the leader's snapshot.
    let mut follower = open(&dir.path().join("follower"));
    let before = sampler.reset();
    let t = Instant::now();
    let mut from = leader.get_current_snapshot().await.unwrap().expect("a kept snapshot").snapshot;
    let mut into = follower.begin_receiving_snapshot().await.unwrap();
    let mut chunk = vec![0; 3 << 20];
    for len in chunks {
        from.read_exact(&mut chunk[..len]).await.unwrap();
        into.write_all(&chunk[..len]).await.unwrap();
    }
    into.shutdown().await.unwrap();
    drop(from);
    let received = t.elapsed();
    let peak_received = sampler.peak();
    follower.install_snapshot(&meta, into).await.unwrap();
    report(
        "receive + install",
        t.elapsed(),
        before,
        sampler.peak(),
        rss_mib(),
        &format!(
            " receiving {:.2} s, peak rise while receiving {:.0} MiB",
            received.as_secs_f64(),
            peak_received - before
        ),
    );
    println!(
        "\nthe follower installed revision {} (the leader is at {})",
        follower.mvcc().current_rev(),
        leader.mvcc().current_rev()
    );
}
