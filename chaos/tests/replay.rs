//! A seed replays exactly: the same faults, calls, answers and times. In a test binary of its
//! own, so that no other simulation runs in the process meanwhile.

use std::process::Command;
use std::time::Duration;

use keel_chaos::sim::{run, Options};

#[test]
fn a_seed_replays_exactly() {
    let a = run(&Options { duration: Duration::from_secs(10), ..Options::new(7) }).expect("first run");
    let b = run(&Options { duration: Duration::from_secs(10), ..Options::new(7) }).expect("second run");
    assert_eq!((a.ops, &a.faults, a.digest), (b.ops, &b.faults, b.digest), "seed 7 gave two different histories");
}

/// The lines `keel-chaos sim` prints for each history (ops, digest and faults), with `args`.
fn histories(args: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_keel-chaos"))
        .args(["sim", "--seconds", "10", "--verbose"])
        .args(args)
        .env_remove("KEEL_CHAOS_ALONE")
        .output()
        .expect("keel-chaos runs");
    assert!(out.status.success(), "keel-chaos {args:?}: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("seed ")).map(String::from).collect()
}

/// A history in a run of many is the one its replay command shows alone. Run one after another
/// in one process, seeds 9 and 11 came out differently (tokio numbers tasks process-wide, and a
/// crashed member's tasks are dropped in the order of their numbers).
#[test]
fn a_seed_among_many_replays_alone() {
    let many = histories(&["--seeds", "12"]);
    assert_eq!(many.len(), 12, "{many:?}");
    for seed in [9, 11] {
        let alone = histories(&["--seeds", "1", "--start", &seed.to_string()]);
        assert_eq!(alone, [many[seed].clone()], "seed {seed} alone is not the history it was among others");
    }
}
