//! The in-memory key index: for every key, the revisions at which it changed, grouped into
//! generations. A generation starts with the put that creates the key and ends with the tombstone
//! that deletes it; the last generation is open (and empty while the key does not exist).
//!
//! ```text
//! key "foo":  [ {created 2: revs 2.0, 4.0, 6.0(tombstone)} , {created 9: revs 9.0, 11.1} , {} ]
//!               closed generation                              open generation (may be empty)
//! ```
//! The index is rebuilt from the history at start-up, so it never needs its own persistence.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::keys::Rev;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Generation {
    /// The main revision that created the key in this generation.
    created: i64,
    /// The number of puts in this generation (the next put's version is `ver + 1`).
    ver: i64,
    /// Revisions of the changes, oldest first; in a closed generation the last one is the tombstone.
    revs: Vec<Rev>,
}

/// The history of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIndex {
    gens: Vec<Generation>,
}

/// What a revision lookup finds for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The revision of the newest change at or before the asked revision (a put, never a tombstone).
    pub modified: Rev,
    /// The main revision that created the key's current generation.
    pub created: i64,
    pub version: i64,
}

impl KeyIndex {
    fn new() -> Self {
        Self { gens: vec![Generation::default()] }
    }

    fn open(&mut self) -> &mut Generation {
        self.gens.last_mut().expect("a key index always has a generation")
    }

    /// Records a put at `rev`; returns (create revision, version) of the new value.
    fn put(&mut self, rev: Rev) -> (i64, i64) {
        let g = self.open();
        if g.revs.is_empty() {
            g.created = rev.main;
        }
        g.ver += 1;
        g.revs.push(rev);
        (g.created, g.ver)
    }

    /// Records a delete at `rev`. The key must currently exist.
    fn tombstone(&mut self, rev: Rev) {
        let g = self.open();
        debug_assert!(!g.revs.is_empty(), "tombstone on a missing key");
        g.revs.push(rev);
        self.gens.push(Generation::default());
    }

    /// The live value's revision at main revision `at`, if the key existed then.
    pub fn get(&self, at: i64) -> Option<Found> {
        let last = self.gens.len() - 1;
        for (gi, g) in self.gens.iter().enumerate().rev() {
            let Some(first) = g.revs.first() else { continue };
            if gi != last && g.revs.last().unwrap().main <= at {
                // Deleted at or before `at`, and no newer generation started by then.
                return None;
            }
            if first.main <= at {
                let idx = g.revs.iter().rposition(|r| r.main <= at).unwrap();
                let n = g.revs.len() as i64;
                return Some(Found {
                    modified: g.revs[idx],
                    created: g.created,
                    version: g.ver - (n - 1 - idx as i64) + if gi != last { 1 } else { 0 },
                });
            }
        }
        None
    }

    /// Compacts history at main revision `at` as etcd does (since etcd-io/etcd#18274): keeps, per
    /// key, the newest revision at or before `at`, unless it is a tombstone below `at`, and
    /// everything after `at`. A tombstone exactly at `at` stays, so a watch from `at` still sees
    /// that delete. Pushes every revision dropped (with its tombstone flag) to `dropped`.
    /// Returns true if nothing is left. Generations whose tombstone is below `tombstones_below`
    /// go whole: `at`, except under a planted compaction bug.
    fn compact(&mut self, at: i64, tombstones_below: i64, dropped: &mut Vec<(Rev, bool)>) -> bool {
        let last = self.gens.len() - 1;
        let mut gi = 0;
        while gi < last && self.gens[gi].revs.last().unwrap().main < tombstones_below {
            gi += 1;
        }
        for g in &self.gens[..gi] {
            let n = g.revs.len();
            dropped.extend(g.revs.iter().enumerate().map(|(j, r)| (*r, j == n - 1)));
        }
        let g = &mut self.gens[gi];
        if let Some(idx) = g.revs.iter().rposition(|r| r.main <= at) {
            dropped.extend(g.revs.drain(..idx).map(|r| (r, false)));
        }
        self.gens.drain(..gi);
        self.gens.len() == 1 && self.gens[0].revs.is_empty()
    }
}

/// The index over all keys, ordered by key.
#[derive(Debug, Default)]
pub struct Index {
    keys: BTreeMap<Vec<u8>, KeyIndex>,
}

/// A key range as etcd defines it: `end == None` is the single key; an empty `end` means every
/// key at or after `key`; otherwise `[key, end)`.
pub fn in_range<'a>(key: &'a [u8], end: Option<&'a [u8]>) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    match end {
        None => (Bound::Included(key), Bound::Included(key)),
        Some([]) => (Bound::Included(key), Bound::Unbounded),
        Some(e) => (Bound::Included(key), Bound::Excluded(e)),
    }
}

impl Index {
    /// Records a put of `key` at `rev`; returns (create revision, version).
    pub fn put(&mut self, key: &[u8], rev: Rev) -> (i64, i64) {
        self.entry(key).put(rev)
    }

    fn entry(&mut self, key: &[u8]) -> &mut KeyIndex {
        if !self.keys.contains_key(key) {
            self.keys.insert(key.to_vec(), KeyIndex::new());
        }
        self.keys.get_mut(key).unwrap()
    }

    /// Replays one stored put while rebuilding the index at start-up; `created` and `version`
    /// come from the stored value, since compaction may have dropped the generation's first puts.
    pub fn restore_put(&mut self, key: &[u8], rev: Rev, created: i64, version: i64) {
        let g = self.entry(key).open();
        g.created = created;
        g.ver = version;
        g.revs.push(rev);
    }

    /// Replays one stored tombstone while rebuilding the index at start-up. The key may have no
    /// stored put left (compaction keeps a tombstone at the compaction revision), and must still
    /// be indexed, so that the next compaction drops it (as etcd-io/etcd#19188).
    pub fn restore_tombstone(&mut self, key: &[u8], rev: Rev) {
        let ki = self.entry(key);
        ki.open().revs.push(rev);
        ki.gens.push(Generation::default());
    }

    /// Records the delete of an existing key at `rev`.
    pub fn tombstone(&mut self, key: &[u8], rev: Rev) {
        if let Some(ki) = self.keys.get_mut(key) {
            ki.tombstone(rev);
        }
    }

    /// Calls `f(key, found)` for each key in the range that is live at `at`, in key order, until
    /// `f` returns false.
    pub fn visit(&self, key: &[u8], end: Option<&[u8]>, at: i64, mut f: impl FnMut(&[u8], Found) -> bool) {
        let bounds = in_range(key, end);
        if let (Bound::Included(s), Bound::Excluded(e)) = bounds {
            if s >= e {
                return;
            }
        }
        for (k, ki) in self.keys.range::<[u8], _>(bounds) {
            if let Some(found) = ki.get(at) {
                if !f(k, found) {
                    return;
                }
            }
        }
    }

    /// The live value of one key at `at`.
    pub fn get(&self, key: &[u8], at: i64) -> Option<Found> {
        self.keys.get(key).and_then(|ki| ki.get(at))
    }

    /// Compacts every key at `at` (see [`KeyIndex::compact`]); returns the revisions dropped.
    pub fn compact(&mut self, at: i64) -> Vec<(Rev, bool)> {
        let mut dropped = Vec::new();
        // The planted bug (etcd before #18274) also drops a tombstone exactly at `at`.
        let planted = crate::plant::on("compact-drops-tombstone") || crate::plant::on("compact-forgets-revision");
        let tombstones_below = if planted { at + 1 } else { at };
        self.keys.retain(|_, ki| !ki.compact(at, tombstones_below, &mut dropped));
        dropped
    }

    /// Number of keys the index holds (live or with history).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(main: i64) -> Rev {
        Rev::new(main, 0)
    }

    #[test]
    fn versions_across_delete_and_recreate() {
        let mut ix = Index::default();
        assert_eq!(ix.put(b"k", r(2)), (2, 1));
        assert_eq!(ix.put(b"k", r(3)), (2, 2));
        ix.tombstone(b"k", r(4));
        assert_eq!(ix.put(b"k", r(5)), (5, 1));
        assert_eq!(ix.get(b"k", 1), None);
        assert_eq!(ix.get(b"k", 2).unwrap(), Found { modified: r(2), created: 2, version: 1 });
        assert_eq!(ix.get(b"k", 3).unwrap(), Found { modified: r(3), created: 2, version: 2 });
        assert_eq!(ix.get(b"k", 4), None);
        assert_eq!(ix.get(b"k", 5).unwrap(), Found { modified: r(5), created: 5, version: 1 });
    }

    #[test]
    fn compaction_keeps_newest_at_or_before_and_drops_tombstones_below() {
        let mut ix = Index::default();
        ix.put(b"a", r(2));
        ix.put(b"a", r(3));
        ix.tombstone(b"a", r(4));
        ix.put(b"b", r(5));
        ix.put(b"b", r(6));
        // At 3: a keeps 3 (and its tombstone 4, which is after), b untouched.
        let d = ix.compact(3);
        assert_eq!(d, vec![(r(2), false)]);
        assert_eq!(ix.get(b"a", 3).unwrap().modified, r(3));
        assert_eq!(ix.get(b"a", 3).unwrap().version, 2);
        // At 4: a's newest is its tombstone, exactly at the compaction revision: it stays (a
        // watch from 4 must see the delete), the put before it goes.
        let d = ix.compact(4);
        assert_eq!(d, vec![(r(3), false)]);
        assert_eq!(ix.len(), 2);
        assert_eq!(ix.get(b"a", 4), None);
        // At 6: the tombstone is below it now, so the whole key goes.
        let d = ix.compact(6);
        assert_eq!(d, vec![(r(4), true), (r(5), false)]);
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.get(b"b", 6).unwrap(), Found { modified: r(6), created: 5, version: 2 });
    }

    #[test]
    fn a_restored_lone_tombstone_is_dropped_by_the_next_compaction() {
        let mut ix = Index::default();
        ix.restore_tombstone(b"a", r(4));
        ix.restore_put(b"b", r(5), 5, 1);
        assert_eq!(ix.get(b"a", 4), None);
        assert_eq!(ix.get(b"a", 3), None);
        assert_eq!(ix.put(b"a", r(6)), (6, 1));
        let d = ix.compact(6);
        assert_eq!(d, vec![(r(4), true)]);
        assert_eq!(ix.get(b"a", 6).unwrap(), Found { modified: r(6), created: 6, version: 1 });
    }
}
