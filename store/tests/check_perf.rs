//! `etcdctl check perf --load=s` against a 3-member cluster: a minute of writes from 50 clients,
//! then etcdctl's verdict on throughput, slowest request and spread. In its own test binary so
//! that no other test's cluster shares the machine meanwhile. The verdict is a timing judgement
//! about this machine, which tests do not make: the test insists that the run completes and
//! reports every check, and prints the verdict (README, Performance, has measured ones).
//!
//! Runs against [`Kind::under_test`] (`KEEL_DIFF_AGAINST=etcd` runs it against etcd).

mod common;

use std::time::Duration;

use common::etcdctl::run as etcdctl;
use common::{start_cluster, Kind};

#[tokio::test]
async fn check_perf_runs_and_reports() {
    let members = start_cluster(Kind::under_test(), 3).await;
    let (code, out, err) = etcdctl(&members[0], &["check", "perf", "--load=s"], Duration::from_secs(180)).await;
    assert!(code.is_some(), "check perf did not finish: {out}{err}");
    let report: Vec<&str> = out.split(['\r', '\n']).filter(|l| !l.contains("/ 60") && !l.trim().is_empty()).collect();
    for check in ["Throughput", "Slowest request", "Stddev"] {
        assert!(report.iter().any(|l| l.contains(check)), "check perf reports {check}: {report:?} {err}");
    }
    eprintln!("{} check perf --load=s: {}", Kind::under_test().name(), report.join(" | "));
}
