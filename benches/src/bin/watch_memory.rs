//! Measures what watchers cost a server in memory: the resident set of its process (Linux
//! `VmRSS`) before and after opening watch streams and watchers, per watcher and per stream.
//!
//! ```text
//! watch-memory --endpoint http://127.0.0.1:2379 --pid <server pid> --streams 100 --watchers 100000
//! ```
//! Opens `--streams` gRPC watch streams over `--connections` HTTP/2 connections, spreads `--watchers` watchers (each on its own key) across the streams,
//! waits for every `created` answer, lets the server settle, then reads the resident set again.
//! Run it twice with different stream counts to separate the per-stream from the per-watcher
//! cost. Works against etcd and keel alike.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use keel_proto::etcdserverpb::watch_client::WatchClient;
use keel_proto::etcdserverpb::{watch_request::RequestUnion, WatchCreateRequest, WatchRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::Endpoint;

#[derive(Parser)]
struct Args {
    /// The server's client URL.
    #[arg(long)]
    endpoint: String,
    /// The server's process id (its VmRSS is read from /proc).
    #[arg(long)]
    pid: u32,
    #[arg(long, default_value_t = 100)]
    streams: usize,
    #[arg(long, default_value_t = 100_000)]
    watchers: usize,
    /// HTTP/2 connections to spread the streams over.
    #[arg(long, default_value_t = 10)]
    connections: usize,
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading the server's status")?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS")?;
    Ok(line.split_whitespace().nth(1).context("bad VmRSS")?.parse()?)
}

/// The resident set once it stops moving (allocator and runtime settle after a burst).
async fn settled_rss(pid: u32) -> Result<u64> {
    let mut last = rss_kib(pid)?;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = rss_kib(pid)?;
        if now.abs_diff(last) < 64 {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = Args::parse();
    if a.streams == 0 || a.connections == 0 {
        bail!("--streams and --connections must be positive");
    }
    let mut channels = Vec::new();
    for _ in 0..a.connections {
        channels.push(Endpoint::from_shared(a.endpoint.clone())?.connect().await?);
    }
    let before = settled_rss(a.pid).await?;
    let per_stream = a.watchers / a.streams;
    let mut keep = Vec::new();
    for s in 0..a.streams {
        let (tx, rx) = mpsc::channel(1024);
        let create = |w: usize| {
            let key = format!("/watch-memory/{s:06}/{w:08}").into_bytes();
            let req = WatchCreateRequest { key: key.into(), ..Default::default() };
            WatchRequest { request_union: Some(RequestUnion::CreateRequest(req)) }
        };
        // The first request goes out before the call: a server may send its response headers
        // only with its first message.
        tx.send(create(0)).await?;
        let mut client = WatchClient::new(channels[s % channels.len()].clone());
        let mut responses = client.watch(ReceiverStream::new(rx)).await?.into_inner();
        let mut created = 0;
        for w in 0..per_stream {
            if w > 0 {
                tx.send(create(w)).await?;
            }
            // Keep a bounded number of creates in flight.
            while w + 1 - created > 512 {
                let r = responses.next().await.context("stream ended")??;
                created += r.created as usize;
            }
        }
        while created < per_stream {
            let r = responses.next().await.context("stream ended")??;
            created += r.created as usize;
        }
        keep.push((tx, responses));
    }
    let after = settled_rss(a.pid).await?;
    let total = per_stream * a.streams;
    let grown = after.saturating_sub(before) * 1024;
    println!(
        "streams={} watchers={} rss_before={} KiB rss_after={} KiB grown={} B per_watcher={:.0} B (streams included)",
        a.streams,
        total,
        before,
        after,
        grown,
        grown as f64 / total as f64
    );
    drop(keep);
    Ok(())
}
