//! The chaos budget CI runs: seeded histories under faults with no violation, every planted bug
//! caught, and a seed that replays exactly. `KEEL_CHAOS_SEEDS` sets the budget (default 200).

use std::time::Duration;

use keel_chaos::sim::{run, Options};

/// Simulated seconds of client load per history in CI.
const SECONDS: u64 = 10;

fn options(seed: u64, plant: Option<&str>) -> Options {
    Options { duration: Duration::from_secs(SECONDS), plant: plant.map(String::from), ..Options::new(seed) }
}

#[test]
fn seeded_histories_under_faults_are_linearizable() {
    let seeds: u64 = std::env::var("KEEL_CHAOS_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let (mut ops, mut failures) = (0, Vec::new());
    for seed in 0..seeds {
        let report = run(&options(seed, None)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        ops += report.ops;
        if !report.violations.is_empty() {
            failures.push(format!(
                "seed {seed} (replay: keel-chaos sim --seeds 1 --start {seed} --seconds {SECONDS}): faults {}\n{}",
                report.faults.join("; "),
                report.violations.join("\n")
            ));
        }
    }
    eprintln!("histories={seeds} ops={ops} violations={}", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_planted_bug_is_caught() {
    for plant in keel_store::plant::NAMES {
        let caught = (0..10).find(|&seed| {
            let report = run(&options(seed, Some(plant))).unwrap_or_else(|e| panic!("{plant} seed {seed}: {e}"));
            !report.violations.is_empty()
        });
        assert!(caught.is_some(), "the checkers missed the planted bug {plant} in 10 histories");
        eprintln!("{plant}: caught by seed {}", caught.unwrap());
    }
}

#[test]
fn a_seed_replays_exactly() {
    let a = run(&options(7, None)).expect("first run");
    let b = run(&options(7, None)).expect("second run");
    assert_eq!((a.ops, &a.faults, a.digest), (b.ops, &b.faults, b.digest), "seed 7 gave two different histories");
}
