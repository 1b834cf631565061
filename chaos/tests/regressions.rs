//! Regression scenarios after bugs etcd's own robustness suite found, each a focused nemesis
//! over a few seeds, checked by the same linearizability, convergence and watch checkers.
//! (Compaction-related ones — etcd-io/etcd#17780, #18089, #19179 — wait for a compaction
//! workload.)

use std::time::Duration;

use keel_chaos::sim::{run, Fault, Options};

fn options(name: &str, members: usize, faults: &[Fault], seed: u64, plant: Option<&str>) -> Options {
    Options {
        members,
        duration: Duration::from_secs(10),
        nemesis: faults.to_vec(),
        plant: plant.map(String::from),
        ..Options::new(seed.wrapping_mul(7919).wrapping_add(name.len() as u64))
    }
}

/// Runs `seeds` histories of `members` members whose nemesis draws only from `faults`; none may
/// show a violation. Then, to show the scenario can fail, the same histories with `plant` (the
/// kind of bug the scenario is about) must show one.
fn scenario(name: &str, members: usize, faults: &[Fault], seeds: u64, plant: &str) {
    let mut failures = Vec::new();
    for seed in 0..seeds {
        let opts = options(name, members, faults, seed, None);
        let report = run(&opts).unwrap_or_else(|e| panic!("{name} seed {}: {e}", opts.seed));
        if !report.violations.is_empty() {
            failures.push(format!(
                "{name} seed {}: {}\n{}",
                opts.seed,
                report.faults.join("; "),
                report.violations.join("\n")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let caught = (0..seeds).any(|seed| {
        let opts = options(name, members, faults, seed, Some(plant));
        !run(&opts).unwrap_or_else(|e| panic!("{name} seed {}: {e}", opts.seed)).violations.is_empty()
    });
    assert!(caught, "scenario {name} does not catch the planted {plant} in {seeds} histories");
}

/// etcd-io/etcd#14370: an acknowledged write lost when a single member crashes.
#[test]
fn etcd_14370_write_lost_on_single_member_crash() {
    scenario("14370", 1, &[Fault::CrashAll, Fault::Heal], 8, "lost-on-crash");
}

/// etcd-io/etcd#15271: a watch going back in time after a partition.
#[test]
fn etcd_15271_watch_back_in_time_after_partition() {
    scenario("15271", 3, &[Fault::Isolate, Fault::Cut, Fault::CutOneWay, Fault::Heal], 8, "drop-watch-event");
}

/// etcd-io/etcd#17247: a watch event delivered twice (here around crashes and resumes).
#[test]
fn etcd_17247_duplicated_watch_event() {
    scenario("17247", 3, &[Fault::Crash, Fault::Isolate, Fault::Heal], 8, "drop-watch-event");
}

/// etcd-io/etcd#20221: a watch on a future revision returning older events (the watcher starts
/// some streams ahead of what it has seen; no other fault).
#[test]
fn etcd_20221_watch_on_future_revision_returns_old_events() {
    scenario("20221", 3, &[Fault::Heal], 8, "drop-watch-event");
}

/// etcd-io/etcd#20418: a stale read served by a member that was paused and resumes.
#[test]
fn etcd_20418_stale_read_after_paused_member_resumes() {
    scenario("20418", 3, &[Fault::Pause, Fault::Heal], 8, "stale-read");
}
