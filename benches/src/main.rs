//! `keel-bench`: load against any etcd v3 endpoints, and `compare` (etcd 3.4 against keel).
//!
//! ```text
//! keel-bench put --endpoints 127.0.0.1:2379 --clients 1000 --conns 100 --duration 10
//! keel-bench range --consistency s --clients 100 --conns 10 --preload
//! keel-bench watch --streams 100 --watchers-per-stream 1000 --watched-keys 10000 --put-rate 500
//! keel-bench watch --put-total 0 --pid <server pid> --streams 100 --watchers-per-stream 1000
//! keel-bench compare --rounds 2 --out bench-results
//! ```

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use keel_bench::compare::{self, CompareArgs};
use keel_bench::report::Report;
use keel_bench::watch::{self, WatchSpec};
use keel_bench::workload::{self, LeaseSpec, PutSpec, RangeSpec, TxnSpec};

#[derive(Parser)]
#[command(
    name = "keel-bench",
    version,
    about = "Load generator for etcd v3 endpoints (keel or etcd), and keel-vs-etcd comparison"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Where the load goes and where the JSON report is written.
#[derive(clap::Args)]
struct Target {
    /// Client URLs, comma-separated; connections go round-robin over them.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    endpoints: Vec<String>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
struct WatchLatencyArgs {
    #[arg(long, default_value_t = 10)]
    streams: usize,
    #[arg(long, default_value_t = 10)]
    watchers_per_stream: usize,
    #[arg(long, default_value_t = 100)]
    put_rate: u64,
    #[arg(long, default_value_t = 1000)]
    put_total: u64,
    #[arg(long, default_value_t = 256)]
    val_size: usize,
}

#[derive(Subcommand)]
enum Cmd {
    /// Puts of fixed-size keys and values.
    Put {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        spec: PutSpec,
    },
    /// Ranges: single keys or prefix pages, linearizable or serializable.
    Range {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        spec: RangeSpec,
    },
    /// Compare-and-swap transactions (put if the mod revision is the one last seen).
    TxnPut {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        spec: TxnSpec,
    },
    /// Lease keep-alives, one lease and stream per client.
    LeaseKeepalive {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        spec: LeaseSpec,
    },
    /// Streams x watchers on a set of keys, paced puts; delivery latency, events/s, completeness.
    Watch {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        spec: WatchSpec,
        /// Server process id(s): their resident set is read before and after creating watchers.
        #[arg(long = "pid")]
        pids: Vec<u32>,
    },
    /// Fan-out latency: every watcher on one key (etcd benchmark's watch-latency).
    WatchLatency {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        args: WatchLatencyArgs,
    },
    /// Whole-store reads (Range of every key, HashKV, Hash, Snapshot) beside a writer: how long
    /// each takes, the put latencies meanwhile, and the server's resident-set rise.
    FullReads(keel_bench::full_reads::FullReadsArgs),
    /// Starts etcd and keel in turn with the same flags, runs every workload on both, writes
    /// report.md (ratios and targets), results.json and SVG plots.
    Compare(CompareArgs),
    /// Re-renders report.md and the plots of a compare directory from its results.json.
    Render {
        #[arg(default_value = "bench-results")]
        dir: PathBuf,
    },
}

fn emit(target: &Target, report: Report) -> Result<()> {
    print!("{}", report.text());
    if let Some(path) = &target.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Put { target, spec } => emit(&target, workload::put(&target.endpoints, &spec).await?),
        Cmd::Range { target, spec } => emit(&target, workload::range(&target.endpoints, &spec).await?),
        Cmd::TxnPut { target, spec } => emit(&target, workload::txn_put(&target.endpoints, &spec).await?),
        Cmd::LeaseKeepalive { target, spec } => {
            emit(&target, workload::lease_keepalive(&target.endpoints, &spec).await?)
        }
        Cmd::Watch { target, spec, pids } => emit(&target, watch::run(&target.endpoints, &spec, &pids).await?),
        Cmd::WatchLatency { target, args } => {
            let spec = WatchSpec {
                streams: args.streams,
                watchers_per_stream: args.watchers_per_stream,
                watched_keys: Some(1),
                conns: args.streams.clamp(1, 100),
                put_rate: args.put_rate,
                put_total: args.put_total,
                key_size: 8,
                val_size: args.val_size,
                drain_secs: 10.0,
            };
            let mut report = watch::run(&target.endpoints, &spec, &[]).await?;
            report.workload = "watch-latency".into();
            emit(&target, report)
        }
        Cmd::FullReads(args) => keel_bench::full_reads::run(&args).await.map(|_| ()),
        Cmd::Compare(args) => compare::compare(&args).await,
        Cmd::Render { dir } => compare::render(&dir),
    }
}
