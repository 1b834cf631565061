//! Regression scenarios after bugs etcd's own robustness suite found, each a focused nemesis
//! over a few seeds, checked by the same linearizability, durability, convergence (histories and
//! HashKV), revision and watch checkers.

use std::time::Duration;

use keel_chaos::sim::{run, Fault, Options};

/// What a scenario runs: its members, the faults its nemesis draws from, and how often clients
/// compact (once in this many operations).
struct Scenario {
    members: usize,
    faults: &'static [Fault],
    compact_one_in: u32,
}

/// Compaction now and then.
const COMPACT_SOMETIMES: u32 = 50;
/// Compaction every few operations, mostly right at a client's last change (often a delete).
const COMPACT_OFTEN: u32 = 8;

/// History `seed` of scenario `name`. Each scenario has seeds of its own: their base is the high
/// half of the FNV-1a hash of its name.
fn options(name: &str, sc: &Scenario, seed: u64, plant: Option<&str>) -> Options {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    Options {
        members: sc.members,
        compact_one_in: sc.compact_one_in,
        duration: Duration::from_secs(10),
        nemesis: sc.faults.to_vec(),
        plant: plant.map(String::from),
        ..Options::new((hash >> 32) + seed * 7919)
    }
}

/// Runs `seeds` histories of `members` members whose nemesis draws only from `faults`; none may
/// show a violation. Then, to show the scenario can fail, one of four times as many histories with
/// `plant` (the kind of bug the scenario is about) must show one: the compaction bugs show only
/// when a compaction meets a delete and a watch start or a crash, one history in four or five.
fn scenario(name: &str, sc: Scenario, seeds: u64, plant: &str) {
    let mut failures = Vec::new();
    for seed in 0..seeds {
        let opts = options(name, &sc, seed, None);
        let report = run(&opts).unwrap_or_else(|e| panic!("{name} seed {}: {e}", opts.seed));
        if !report.violations.is_empty() {
            failures.push(format!("{name}: {}", report.explain(&opts)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let caught = (0..4 * seeds).any(|seed| {
        let opts = options(name, &sc, seed, Some(plant));
        !run(&opts).unwrap_or_else(|e| panic!("{name} seed {}: {e}", opts.seed)).violations.is_empty()
    });
    assert!(caught, "scenario {name} does not catch the planted {plant} in {} histories", 4 * seeds);
}

/// etcd-io/etcd#14370: an acknowledged write lost when a single member crashes.
#[test]
fn etcd_14370_write_lost_on_single_member_crash() {
    scenario(
        "14370",
        Scenario { members: 1, faults: &[Fault::CrashAll, Fault::Heal], compact_one_in: COMPACT_SOMETIMES },
        8,
        "lost-on-crash",
    );
}

/// Watches through partitions (etcd-io/etcd#15271 was a watch going back in time there; its
/// mechanism, a live member installing a snapshot under its watchers, never arises in the
/// simulation, so its regression is store/tests/watch_restore.rs): every watcher's events stay
/// ordered, unique and complete. Planted: the hub drops events.
#[test]
fn watches_through_partitions() {
    scenario(
        "watch-partitions",
        Scenario {
            members: 3,
            faults: &[Fault::Isolate, Fault::Cut, Fault::CutOneWay, Fault::Heal],
            compact_one_in: COMPACT_SOMETIMES,
        },
        8,
        "drop-watch-event",
    );
}

/// Watches through crashes, isolation and resumes (etcd-io/etcd#17247's duplicated event came
/// from snapshot downloads; its regression is store/tests/watch_restore.rs). Planted: the hub
/// drops events.
#[test]
fn watches_through_crashes_and_resumes() {
    scenario(
        "watch-crashes",
        Scenario {
            members: 3,
            faults: &[Fault::Crash, Fault::Isolate, Fault::Heal],
            compact_one_in: COMPACT_SOMETIMES,
        },
        8,
        "drop-watch-event",
    );
}

/// etcd-io/etcd#20221: a watch on a future revision returning older events (the watcher starts
/// some streams ahead of what it has seen; no other fault). Its own plant: a watcher created on a
/// future revision starts at the next revision published, as etcd's resync set it.
#[test]
fn etcd_20221_watch_on_future_revision_returns_old_events() {
    scenario(
        "20221",
        Scenario { members: 3, faults: &[Fault::Heal], compact_one_in: COMPACT_SOMETIMES },
        8,
        "future-watch-old-events",
    );
}

/// etcd-io/etcd#20418: a stale read served by a member that was paused and resumes.
#[test]
fn etcd_20418_stale_read_after_paused_member_resumes() {
    scenario(
        "20418",
        Scenario { members: 3, faults: &[Fault::Pause, Fault::Heal], compact_one_in: COMPACT_SOMETIMES },
        8,
        "stale-read",
    );
}

/// etcd-io/etcd#17780: a member's revision going back after a crash around a compaction (the
/// compaction had removed the tombstone that carried the newest revision).
#[test]
fn etcd_17780_revision_decreasing_after_crash_during_compaction() {
    let sc =
        Scenario { members: 3, faults: &[Fault::Crash, Fault::CrashAll, Fault::Heal], compact_one_in: COMPACT_OFTEN };
    scenario("17780", sc, 8, "compact-forgets-revision");
}

/// etcd-io/etcd#18089: a watch dropping the delete event when the compaction is at that delete's
/// revision (clients here often compact right at their last change, a delete one time in ten).
#[test]
fn etcd_18089_event_dropped_when_compacting_on_delete() {
    let sc = Scenario { members: 3, faults: &[Fault::Isolate, Fault::Heal], compact_one_in: COMPACT_OFTEN };
    scenario("18089", sc, 8, "compact-drops-tombstone");
}

/// etcd-io/etcd#19179: the delete at the compaction revision missing after restarts (a tombstone
/// left alone by compaction and not indexed again at start-up, so a member that restarted keeps
/// it through later compactions and its HashKV differs from the others').
#[test]
fn etcd_19179_missing_delete_event_at_compaction_revision() {
    // Compactions not so often that a lone tombstone rarely lives until a restart.
    let sc = Scenario { members: 3, faults: &[Fault::Crash, Fault::Heal], compact_one_in: 20 };
    scenario("19179", sc, 8, "restore-skips-tombstone");
}
