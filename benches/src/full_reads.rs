//! `full-reads`: what reading the whole store costs the writers beside it. Loads `--keys` keys
//! (in txns of 100 puts), then runs each whole-store read once — a Range over every key, HashKV,
//! Hash, and a Maintenance.Snapshot read to the end — while one client puts a key after another.
//! For each read it reports how long the read took, the put latencies during it (their maximum
//! is the longest time applies were held up), and how far the server's resident set rose above
//! where it stood before (sampled every 20 ms). The read runs on a thread and a connection of its
//! own, so neither the client's decoding nor the connection counts against the writer. Against any etcd endpoint; the server's
//! pid is needed for the resident set.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use keel_proto::etcdserverpb::request_op::Request;
use keel_proto::etcdserverpb::{
    HashKvRequest, HashRequest, PutRequest, RangeRequest, RequestOp, SnapshotRequest, TxnRequest,
};
use serde::Serialize;

use crate::conn;
use crate::memory::rss_kib;

#[derive(clap::Args, Clone, Debug)]
pub struct FullReadsArgs {
    /// The server's client endpoint.
    #[arg(long, default_value = "127.0.0.1:2379")]
    pub endpoint: String,
    /// The server's process id (its resident set is sampled).
    #[arg(long)]
    pub pid: u32,
    /// Keys to load first (0: use what is there).
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 256)]
    pub val_size: usize,
    /// Where to write the results as JSON.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// One whole-store read and what it cost.
#[derive(Debug, Serialize)]
pub struct ReadCost {
    pub read: String,
    pub seconds: f64,
    /// Puts sent while the read ran (the last one may end after it), how many of them failed,
    /// and their latencies, failed ones included.
    pub puts: usize,
    pub failed: usize,
    pub put_p50_ms: f64,
    pub put_max_ms: f64,
    /// Peak resident set during the read, above the one before it, MiB.
    pub rss_rise_mib: f64,
}

/// Runs the measurement; prints a table and returns the rows.
pub async fn run(args: &FullReadsArgs) -> Result<Vec<ReadCost>> {
    let channel = conn::channel(&args.endpoint).await?;
    let kv = KvClient::new(channel.clone()).max_decoding_message_size(usize::MAX);
    let maintenance = MaintenanceClient::new(channel.clone()).max_decoding_message_size(usize::MAX);
    load(&conn::connect(std::slice::from_ref(&args.endpoint), 8).await?, args.keys, args.val_size).await?;
    // The writer has a connection of its own: on a shared one its answers would queue behind
    // the read's.
    let writer_kv = KvClient::new(conn::channel(&args.endpoint).await?);
    let mut rows = Vec::new();
    type Read = Box<dyn Fn() -> futures::future::BoxFuture<'static, Result<()>>>;
    let reads: Vec<(&str, Read)> = vec![
        ("none (puts alone, 2 s)", {
            Box::new(|| {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    Ok(())
                })
            })
        }),
        ("range over every key", {
            let kv = kv.clone();
            Box::new(move || {
                let mut kv = kv.clone();
                Box::pin(async move {
                    let r = RangeRequest { key: vec![0].into(), range_end: vec![0].into(), ..Default::default() };
                    let got = kv.range(r).await?.into_inner();
                    anyhow::ensure!(got.kvs.len() as i64 == got.count, "a partial range");
                    Ok(())
                })
            })
        }),
        ("hash-kv", {
            let m = maintenance.clone();
            Box::new(move || {
                let mut m = m.clone();
                Box::pin(async move { m.hash_kv(HashKvRequest { revision: 0 }).await.map(|_| ()).map_err(Into::into) })
            })
        }),
        ("hash", {
            let m = maintenance.clone();
            Box::new(move || {
                let mut m = m.clone();
                Box::pin(async move { m.hash(HashRequest {}).await.map(|_| ()).map_err(Into::into) })
            })
        }),
        ("snapshot", {
            let m = maintenance.clone();
            Box::new(move || {
                let mut m = m.clone();
                Box::pin(async move {
                    let mut s = m.snapshot(SnapshotRequest {}).await?.into_inner();
                    let mut bytes = 0;
                    while let Some(chunk) = s.message().await? {
                        bytes += chunk.blob.len();
                    }
                    anyhow::ensure!(bytes > 0, "an empty snapshot");
                    Ok(())
                })
            })
        }),
    ];
    for (name, read) in reads {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let before = rss_kib(args.pid)?;
        let done = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(before));
        let sampler = {
            let (done, peak, pid) = (done.clone(), peak.clone(), args.pid);
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    if let Ok(now) = rss_kib(pid) {
                        peak.fetch_max(now, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let writer = {
            let (done, mut kv) = (done.clone(), writer_kv.clone());
            tokio::spawn(async move {
                let (mut latencies, mut failed) = (Vec::new(), 0);
                while !done.load(Ordering::Relaxed) {
                    let put = PutRequest {
                        key: b"full-reads-writer".to_vec().into(),
                        value: b"x".to_vec().into(),
                        ..Default::default()
                    };
                    let at = Instant::now();
                    // A put that failed (e.g. timed out waiting for the apply) counts with the
                    // time it took too.
                    failed += kv.put(put).await.is_err() as usize;
                    latencies.push(at.elapsed().as_secs_f64() * 1e3);
                }
                (latencies, failed)
            })
        };
        // The read runs on a thread of its own, so decoding its answer never delays the writer.
        let reading = read();
        let seconds = tokio::task::spawn_blocking(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let started = Instant::now();
            rt.block_on(reading)?;
            anyhow::Ok(started.elapsed().as_secs_f64())
        })
        .await?
        .with_context(|| name.to_string())?;
        done.store(true, Ordering::Relaxed);
        let (mut latencies, failed) = writer.await?;
        sampler.await?;
        latencies.sort_by(f64::total_cmp);
        let at = |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0.0);
        rows.push(ReadCost {
            read: name.to_string(),
            seconds,
            puts: latencies.len(),
            failed,
            put_p50_ms: at(0.5),
            put_max_ms: at(1.0),
            rss_rise_mib: peak.load(Ordering::Relaxed).saturating_sub(before) as f64 / 1024.0,
        });
    }
    println!("| read | seconds | puts during it | failed | put p50 ms | put max ms | RSS rise MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.2} | {} | {} | {:.1} | {:.1} | {:.0} |",
            r.read, r.seconds, r.puts, r.failed, r.put_p50_ms, r.put_max_ms, r.rss_rise_mib
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(rows)
}

/// Puts `keys` keys (`full/00000000`...) in txns of 100, over the given connections.
async fn load(channels: &[tonic::transport::Channel], keys: u64, val_size: usize) -> Result<()> {
    const PER_TXN: u64 = 100;
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..channels.len() * 4 {
        let (mut kv, next) = (KvClient::new(channels[i % channels.len()].clone()), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let from = next.fetch_add(PER_TXN, Ordering::Relaxed);
                if from >= keys {
                    return anyhow::Ok(());
                }
                let success = (from..(from + PER_TXN).min(keys))
                    .map(|k| RequestOp {
                        request: Some(Request::RequestPut(PutRequest {
                            key: format!("full/{k:08}").into_bytes().into(),
                            value: vec![b'a' + (k % 26) as u8; val_size].into(),
                            ..Default::default()
                        })),
                    })
                    .collect();
                kv.txn(TxnRequest { success, ..Default::default() }).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
