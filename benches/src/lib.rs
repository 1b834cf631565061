//! keel-bench: a load generator for any etcd v3 endpoint (keel or etcd), and `compare`, which runs
//! the same workloads against etcd 3.4 and keel started with the same flags and reports ratios.
//!
//! ```text
//!  main.rs ── subcommands ──► workload::{put, range, txn_put, lease_keepalive}   closed loop
//!     │                       watch::run (streams × watchers, paced puts)         open loop
//!     │                       memory::watch_memory (server RSS per watcher)
//!     └── compare ──► server::Cluster (etcd | keel, fresh data dirs, one kind at a time)
//!                     ├─ the workloads above, per round and server kind
//!                     └─ report: markdown ratios, JSON, SVG plots (plot.rs)
//! ```
//!
//! Every workload returns one [`report::Report`]: operation count, throughput, an HDR latency
//! summary (p50/p90/p99/p99.9/max plus CDF points) and workload-specific figures. A load runs
//! with `clients` tokio tasks sharing `connections` HTTP/2 channels, round-robin over the
//! endpoints, each client waiting for its answer before the next request (a closed loop, like
//! etcd's `benchmark` tool). Latencies are kept in microseconds.

pub mod compare;
pub mod conn;
pub mod full_reads;
pub mod hist;
pub mod memory;
pub mod plot;
pub mod progress;
pub mod report;
pub mod server;
pub mod watch;
pub mod workload;
