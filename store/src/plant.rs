//! Planted bugs, for proving that keel-chaos's checkers and the store's own race tests catch real
//! mistakes. Compiled only with the `plant` feature (the chaos crate and the store's tests turn it
//! on); without it, [`on`] is a constant `false` and the planted branches vanish. Nothing a client
//! sends can turn one on: only code that links the store (the simulation, a test) calls [`set`],
//! for its own thread.
//!
//! - `ack-before-commit`: a write is answered as soon as it is proposed, before it commits.
//! - `stale-read`: a linearizable read skips the read barrier (a serializable read in disguise).
//! - `lost-on-crash`: the Raft log and the state machine are written without sync.
//! - `drop-watch-event`: the watch hub drops every tenth event it publishes.
//! - `future-watch-old-events`: a watcher whose start revision is in the future joins the synced
//!   watchers at the next revision to publish, as if no synced watcher could be ahead, so it gets
//!   events older than its start (etcd #20221: the resync set such a watcher's `minRev` to the
//!   current revision + 1, fixed by #20281).
//! - `compact-drops-tombstone`: compaction also drops a tombstone exactly at the compaction
//!   revision (etcd before #18274: a watch from that revision misses the delete, etcd #18089).
//! - `compact-forgets-revision`: the same, and a reopened store takes its revision from the
//!   history alone, so it can go back (etcd #17780).
//! - `restore-skips-tombstone`: a reopened store does not index a tombstone whose puts were
//!   compacted away, so later compactions never drop it (etcd #19179, fixed by #19188).
//! - `lease-expires-early`: a keep-alive renews a lease for half its TTL.
//! - `restore-resumes-stale`: after a snapshot install, a synced watcher continues from the
//!   revision it needed when it became synced, not from the first one it has not seen, so it is
//!   sent events it already had, going back in time (etcd #15271: the restore moved synced
//!   watchers to unsynced with a `minRev` that staying synced had never advanced, fixed by #15492).
//! - `restore-repeats-last`: after a snapshot install, a synced watcher continues from the last
//!   revision it was sent instead of the one after it, so that revision's events come twice (the
//!   duplicated event of etcd #17247, seen around snapshot downloads).

/// The bugs keel-chaos's simulation plants (and must catch).
pub const NAMES: [&str; 9] = [
    "ack-before-commit",
    "stale-read",
    "lost-on-crash",
    "drop-watch-event",
    "future-watch-old-events",
    "compact-drops-tombstone",
    "compact-forgets-revision",
    "restore-skips-tombstone",
    "lease-expires-early",
];

/// The bugs only the in-process harness (store/tests/inproc) reaches: the simulation installs
/// snapshots only on members that are not serving yet (a live member cut off catches up by log,
/// because openraft does not purge a range a replication stream has in flight), so no watcher is
/// ever there to be reset.
pub const IN_PROCESS: [&str; 2] = ["restore-resumes-stale", "restore-repeats-last"];

#[cfg(feature = "plant")]
mod active {
    use std::cell::RefCell;

    thread_local! {
        static PLANTED: RefCell<Option<&'static str>> = const { RefCell::new(None) };
    }

    /// Plants `name` (one of [`super::NAMES`] or [`super::IN_PROCESS`]) on this thread, or none;
    /// false for an unknown name.
    pub fn set(name: Option<&str>) -> bool {
        let found = match name {
            None => None,
            Some(n) => match super::NAMES.iter().chain(&super::IN_PROCESS).find(|k| **k == n) {
                Some(k) => Some(*k),
                None => return false,
            },
        };
        PLANTED.with(|p| *p.borrow_mut() = found);
        true
    }

    /// Whether bug `name` is planted on this thread.
    pub fn on(name: &str) -> bool {
        PLANTED.with(|p| *p.borrow() == Some(name))
    }
}

#[cfg(feature = "plant")]
pub use active::{on, set};

/// Whether bug `name` is planted: never, in a build without the `plant` feature.
#[cfg(not(feature = "plant"))]
#[inline(always)]
pub fn on(_name: &str) -> bool {
    false
}
