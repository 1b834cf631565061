//! A smoke run of every keel-bench workload against a debug keel, and of a tiny `compare` against
//! etcd and keel, to keep the tool working. Seconds, not a measurement: nothing here asserts a
//! speed.
//!
//! The keel binary is `$KEEL_BIN`, else the `keel` that `cargo test --workspace` built next to
//! this test's own directory (`<target>/debug/keel`), and etcd is the `etcd` on PATH
//! (`scripts/deps.sh` installs it). Without either the test fails: a smoke test that passes
//! without running anything shows nothing.

use std::path::PathBuf;
use std::process::Command;

use keel_bench::compare::{self, CompareArgs};
use keel_bench::server::{Cluster, Kind};
use keel_bench::watch::{self, WatchSpec};
use keel_bench::workload::{self, Consistency, Keys, LeaseSpec, Load, PutSpec, RangeSpec, TxnSpec};

fn keel_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("KEEL_BIN") {
        return PathBuf::from(p);
    }
    // <target>/debug/deps/smoke-<hash> -> <target>/debug/keel
    let exe = std::env::current_exe().expect("this test's path");
    let bin = exe.parent().and_then(|d| d.parent()).expect("<target>/debug").join("keel");
    assert!(bin.exists(), "no keel binary at {} (set KEEL_BIN or build the workspace first)", bin.display());
    bin
}

fn tiny_keys() -> Keys {
    Keys { key_space_size: 200, ..Keys::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_workload_runs_against_keel() {
    let bin = keel_bin();
    let cluster = Cluster::start(Kind::Keel, &bin, 1, &[]).await.expect("keel starts");
    let eps = cluster.endpoints();
    let load = Load::new(4, 2).for_total(100);

    let r = workload::put(&eps, &PutSpec { load: load.clone(), keys: tiny_keys() }).await.unwrap();
    assert_eq!((r.ops, r.errors), (100, 0), "{}", r.text());
    assert!(r.latency.p99_us > 0 && r.latency.p50_us <= r.latency.p99_us);

    for (consistency, page) in [(Consistency::L, 0), (Consistency::S, 0), (Consistency::L, 50)] {
        let spec = RangeSpec { load: load.clone(), keys: tiny_keys(), consistency, page, preload: page == 0 };
        let r = workload::range(&eps, &spec).await.unwrap();
        assert_eq!((r.ops, r.errors), (100, 0), "{}", r.text());
    }

    let r = workload::txn_put(&eps, &TxnSpec { load: load.clone(), keys: tiny_keys() }).await.unwrap();
    assert_eq!((r.ops, r.errors), (100, 0), "{}", r.text());
    assert!(r.extra["cas_conflicts"] < 100.0);

    let r = workload::lease_keepalive(&eps, &LeaseSpec { load: load.clone(), ttl: 30 }).await.unwrap();
    assert_eq!((r.ops, r.errors), (100, 0), "{}", r.text());

    // 3 streams x 20 watchers on 6 keys: every put reaches 10 watchers.
    let spec = WatchSpec {
        streams: 3,
        watchers_per_stream: 20,
        watched_keys: Some(6),
        conns: 2,
        put_rate: 200,
        put_total: 60,
        key_size: 8,
        val_size: 64,
        drain_secs: 10.0,
    };
    let r = watch::run(&eps, &spec, &cluster.pids()).await.unwrap();
    assert_eq!(r.ops, 600, "{}", r.text());
    assert_eq!(r.extra["complete"], 1.0, "{}", r.text());
    assert!(r.extra["server_rss_mib"] > 0.0);

    // The command line, with its JSON report.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("put.json");
    let out = Command::new(env!("CARGO_BIN_EXE_keel-bench"))
        .args(["put", "--endpoints", &eps[0], "--total", "50", "--clients", "2", "--key-space-size", "10"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["ops"], 50);
    let out = Command::new(env!("CARGO_BIN_EXE_keel-bench"))
        .args(["watch-latency", "--endpoints", &eps[0], "--streams", "2", "--watchers-per-stream", "2"])
        .args(["--put-rate", "100", "--put-total", "20"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("watch-latency: 80 ops"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_compare_writes_its_report() {
    let bin = keel_bin();
    assert!(Command::new("etcd").arg("--version").output().is_ok(), "no etcd on PATH (scripts/deps.sh installs it)");
    let out = tempfile::tempdir().unwrap();
    let args = CompareArgs {
        keel_bin: Some(bin),
        etcd_bin: "etcd".into(),
        rounds: 1,
        duration: 0.3,
        members: vec![1],
        key_space: 200,
        many: 20,
        sweep: vec![5],
        watchers: vec![100],
        watch_fanout: 10,
        watch_put_rate: 200,
        memory_keys: 200,
        memory_watchers: 100,
        only: Vec::new(),
        server_args: Vec::new(),
        out: out.path().to_path_buf(),
    };
    compare::compare(&args).await.unwrap();
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(md.contains("| put | 1 | 20 / 2 |"), "{md}");
    assert!(!md.contains("failed"), "{md}");
    assert!(md.contains("RSS growth per 1M keys"), "{md}");
    assert!(out.path().join("cdf-put-c1-m1.svg").exists());
    assert!(out.path().join("put-throughput-m1.svg").exists());
    compare::render(out.path()).unwrap();
}
