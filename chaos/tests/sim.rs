//! The chaos budget CI runs: seeded histories under faults with no violation, every planted bug
//! caught, and histories on RocksDB. `KEEL_CHAOS_SEEDS` sets the budget (default 200). The replay
//! check is in `replay.rs`.

use std::time::Duration;

use keel_chaos::sim::{run, Fault, Options};

/// Simulated seconds of client load per history in CI.
const SECONDS: u64 = 10;

fn options(seed: u64, plant: Option<&str>) -> Options {
    Options { duration: Duration::from_secs(SECONDS), plant: plant.map(String::from), ..Options::new(seed) }
}

/// Through the `keel-chaos` binary, which runs each history in a process of its own, so that a
/// failing seed's replay command shows exactly the history that failed.
#[test]
fn seeded_histories_under_faults_are_linearizable() {
    let seeds: u64 = std::env::var("KEEL_CHAOS_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_keel-chaos"))
        .args(["sim", "--seeds", &seeds.to_string(), "--seconds", &SECONDS.to_string()])
        .env_remove("KEEL_CHAOS_ALONE")
        .output()
        .expect("keel-chaos runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    eprintln!("{last}");
    assert!(last.starts_with(&format!("histories={seeds} ops=")), "no summary line:\n{stdout}");
    assert!(out.status.success() && last.ends_with(" violations=0"), "{stdout}");
}

/// Every planted bug is caught within the first 10 histories; the compaction bugs within 40
/// histories that all compact (once in 8 operations) under crashes and isolations.
#[test]
fn every_planted_bug_is_caught() {
    for plant in keel_store::plant::NAMES {
        let compaction_bug = plant.starts_with("compact-") || plant == "restore-skips-tombstone";
        // A compaction bug needs a compaction to meet a delete and then a crash or a resumed
        // watch: rarer than the others (compact-forgets-revision showed in 1 history of 20).
        let budget = if compaction_bug { 40 } else { 10 };
        let caught = (0..budget).find(|&seed| {
            let mut opts = options(seed, Some(plant));
            if compaction_bug {
                // Compaction every few operations, often right at a delete; restarts of single
                // members from their own storage, not from a snapshot (a member that restarted
                // is where an unindexed tombstone stays behind or a revision goes back); and
                // isolations, whose broken watch streams resume at the compacted revision.
                opts.compact_one_in = 8;
                opts.nemesis = vec![Fault::Crash, Fault::Isolate, Fault::Heal];
                opts.snapshot_every = None;
            }
            let report = run(&opts).unwrap_or_else(|e| panic!("{plant} seed {seed}: {e}"));
            !report.violations.is_empty()
        });
        assert!(caught.is_some(), "the checkers missed the planted bug {plant} in {budget} histories");
        eprintln!("{plant}: caught by seed {}", caught.unwrap());
    }
}

/// Members on RocksDB, reopened after every crash (process crashes: the OS keeps what RocksDB
/// wrote), with a crash-heavy nemesis and compaction in every history.
#[test]
fn histories_on_rocksdb() {
    for seed in 0..6 {
        let opts = Options {
            rocksdb: true,
            compact_one_in: 20,
            nemesis: vec![Fault::Crash, Fault::CrashAll, Fault::Isolate, Fault::Heal],
            ..options(seed, None)
        };
        let report = run(&opts).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(report.faults.iter().any(|f| f.contains("crash")), "seed {seed} never crashed: {:?}", report.faults);
        assert!(report.violations.is_empty(), "{}", report.explain(&opts));
    }
}
