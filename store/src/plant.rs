//! Planted bugs, for proving that keel-chaos's checkers catch real mistakes. Compiled only with
//! the `plant` feature (the chaos crate turns it on); without it, [`on`] is a constant `false`
//! and the planted branches vanish. Nothing a client sends can turn one on: only code that links
//! the store (the simulation) calls [`set`].
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

/// The bugs that can be planted.
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

#[cfg(feature = "plant")]
mod active {
    use std::cell::RefCell;

    thread_local! {
        static PLANTED: RefCell<Option<&'static str>> = const { RefCell::new(None) };
    }

    /// Plants `name` (one of [`super::NAMES`]) on this thread, or none; false for an unknown name.
    pub fn set(name: Option<&str>) -> bool {
        let found = match name {
            None => None,
            Some(n) => match super::NAMES.iter().find(|k| **k == n) {
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
