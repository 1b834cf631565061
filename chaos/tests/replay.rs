//! A seed replays exactly: the same faults, calls, answers and times. In a test binary of its
//! own, so that no other simulation runs in the process meanwhile.

use std::time::Duration;

use keel_chaos::sim::{run, Options};

#[test]
fn a_seed_replays_exactly() {
    let a = run(&Options { duration: Duration::from_secs(10), ..Options::new(7) }).expect("first run");
    let b = run(&Options { duration: Duration::from_secs(10), ..Options::new(7) }).expect("second run");
    assert_eq!((a.ops, &a.faults, a.digest), (b.ops, &b.faults, b.digest), "seed 7 gave two different histories");
}
