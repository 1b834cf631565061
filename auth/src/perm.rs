//! Key-range permissions and the coverage test behind every KV permission check.
//!
//! A permission names keys the way a request does:
//!
//! ```text
//!   range_end        keys covered                    interval
//!   ""               the single key `key`            [key, key+"\0")
//!   "\0"             every key >= key                [key, +inf)
//!   anything else    key <= k < range_end            [key, range_end)
//! ```
//!
//! Bounds compare in etcd's "bytes-affine" order (`pkg/adt`): plain byte order, except that the
//! empty byte string sorts after every key and stands for the end of the keyspace. So a
//! permission whose `key` is empty is an empty interval and grants nothing (etcdctl sends `"\0"`
//! for "all keys", never `""`), and so is one whose `range_end` is at or below its `key`.
//!
//! A single-key request is permitted if one interval of the wanted type contains the key. A
//! range request is permitted if the intervals that overlap it, taken in order of their start,
//! leave no gap (touching intervals join: `[a,c)` and `[c,f)` cover `[a,f)`) and together
//! reach from at or before its start to at or past its end — etcd's `IntervalTree.Contains`
//! over the user's merged permissions (`auth/range_perm_cache.go`). READWRITE counts as both
//! READ and WRITE. Permissions of every role the user holds are merged; roles that no longer
//! exist contribute nothing.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

/// What a permission allows, numbered as etcd's `authpb.Permission_Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PermType {
    Read = 0,
    Write = 1,
    ReadWrite = 2,
}

impl PermType {
    /// The type for an `authpb.Permission.permType` wire value; `None` for values etcd does not
    /// define (etcd 3.4 would store such a permission and let it grant nothing).
    pub fn from_i32(v: i32) -> Option<PermType> {
        match v {
            0 => Some(PermType::Read),
            1 => Some(PermType::Write),
            2 => Some(PermType::ReadWrite),
            _ => None,
        }
    }

    /// Whether a permission of this type allows an operation that needs `need` (Read or Write).
    fn allows(self, need: PermType) -> bool {
        self == PermType::ReadWrite || self == need
    }
}

/// One permission of a role: `perm_type` on the keys `[key, range_end)` as the table above reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Permission {
    pub perm_type: PermType,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
}

impl Permission {
    pub fn new(perm_type: PermType, key: impl Into<Vec<u8>>, range_end: impl Into<Vec<u8>>) -> Permission {
        Permission { perm_type, key: key.into(), range_end: range_end.into() }
    }

    /// The half-open interval of keys this permission covers.
    fn interval(&self) -> Interval {
        let end = match self.range_end.as_slice() {
            [] => successor(&self.key),
            [0] => Vec::new(),
            end => end.to_vec(),
        };
        Interval { begin: self.key.clone(), end }
    }
}

/// `[begin, end)` in bytes-affine order (an empty bound is +inf).
#[derive(Debug, Clone)]
struct Interval {
    begin: Vec<u8>,
    end: Vec<u8>,
}

impl Interval {
    fn is_empty(&self) -> bool {
        affine_cmp(&self.begin, &self.end) != Ordering::Less
    }

    /// etcd's `Interval.Compare(...) == 0`: neither wholly left of `other` nor wholly right.
    fn overlaps(&self, other: &Interval) -> bool {
        let left = affine_cmp(&self.begin, &other.begin) == Ordering::Less
            && affine_cmp(&self.end, &other.begin) != Ordering::Greater;
        let right = affine_cmp(&self.begin, &other.end) != Ordering::Less;
        !left && !right
    }
}

/// Byte order, except that the empty string sorts after everything (etcd's
/// `BytesAffineComparable`).
fn affine_cmp(a: &[u8], b: &[u8]) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.cmp(b),
    }
}

/// The smallest key after `key`: `key + "\0"`.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// Whether `perms`, for an operation that needs `need` (Read or Write), permit the request
/// `key`/`range_end` (empty `range_end`: the single key; `"\0"`: from `key` to the end).
pub(crate) fn covers<'a>(
    perms: impl IntoIterator<Item = &'a Permission>,
    need: PermType,
    key: &[u8],
    range_end: &[u8],
) -> bool {
    let held =
        perms.into_iter().filter(|p| p.perm_type.allows(need)).map(Permission::interval).filter(|i| !i.is_empty());
    if range_end.is_empty() {
        // A point: some interval holds it. An empty key is +inf and lies in no interval.
        return !key.is_empty()
            && held
                .into_iter()
                .any(|i| affine_cmp(&i.begin, key) != Ordering::Greater && affine_cmp(key, &i.end) == Ordering::Less);
    }
    let end = if range_end == [0] { Vec::new() } else { range_end.to_vec() };
    let want = Interval { begin: key.to_vec(), end };
    let mut overlapping: Vec<Interval> = held.filter(|i| want.overlaps(i)).collect();
    overlapping.sort_by(|a, b| affine_cmp(&a.begin, &b.begin));
    let mut iter = overlapping.into_iter();
    let Some(first) = iter.next() else { return false };
    let min_begin = first.begin;
    let mut max_end = first.end;
    for i in iter {
        if affine_cmp(&max_end, &i.begin) == Ordering::Less {
            return false; // a gap
        }
        if affine_cmp(&i.end, &max_end) == Ordering::Greater {
            max_end = i.end;
        }
    }
    affine_cmp(&min_begin, &want.begin) != Ordering::Greater && affine_cmp(&max_end, &want.end) != Ordering::Less
}

#[cfg(test)]
mod tests {
    use super::PermType::*;
    use super::*;

    fn read(key: &str, end: &str) -> Permission {
        Permission::new(Read, key, end)
    }

    fn can_read(perms: &[Permission], key: &str, end: &str) -> bool {
        covers(perms, Read, key.as_bytes(), end.as_bytes())
    }

    #[test]
    fn single_key_permission_covers_that_key_only() {
        let perms = [read("foo", "")];
        assert!(can_read(&perms, "foo", ""));
        assert!(!can_read(&perms, "foo\0", ""));
        assert!(!can_read(&perms, "fo", ""));
        assert!(can_read(&perms, "foo", "foo\0"), "the range [foo, foo\\0) is the key foo");
        assert!(!can_read(&perms, "foo", "fop"), "a prefix range is more than the key");
    }

    #[test]
    fn range_permission_is_half_open() {
        let perms = [read("b", "d")];
        assert!(can_read(&perms, "b", ""));
        assert!(can_read(&perms, "c", ""));
        assert!(can_read(&perms, "czzz", ""));
        assert!(!can_read(&perms, "d", ""), "range_end is excluded");
        assert!(!can_read(&perms, "a", ""));
        assert!(can_read(&perms, "b", "d"));
        assert!(can_read(&perms, "bb", "c"));
        assert!(!can_read(&perms, "b", "e"));
        assert!(!can_read(&perms, "a", "c"));
    }

    #[test]
    fn prefix_permission() {
        // etcdctl role grant-permission --prefix r read /app/ sends range_end "/app0".
        let perms = [read("/app/", "/app0")];
        assert!(can_read(&perms, "/app/x", ""));
        assert!(can_read(&perms, "/app/", "/app0"), "the whole prefix");
        assert!(can_read(&perms, "/app/x/", "/app/x0"), "a sub-prefix");
        assert!(!can_read(&perms, "/apps", ""));
        assert!(!can_read(&perms, "/", "0"));
    }

    #[test]
    fn nul_range_end_opens_to_the_end_of_the_keyspace() {
        let perms = [read("m", "\0")];
        assert!(can_read(&perms, "m", ""));
        assert!(can_read(&perms, "\u{7f}\u{7f}\u{7f}", ""));
        assert!(can_read(&perms, "m", "\0"), "from m to the end");
        assert!(can_read(&perms, "x", "\0"));
        assert!(!can_read(&perms, "l", "\0"));
        assert!(!can_read(&perms, "a", ""));

        // A bounded permission never covers an open-ended request.
        let bounded = [read("m", "\u{7f}\u{7f}\u{7f}\u{7f}")];
        assert!(!can_read(&bounded, "m", "\0"));

        // All keys, as etcdctl grants them: key "\0", range_end "\0".
        let all = [read("\0", "\0")];
        assert!(can_read(&all, "\0", "\0"));
        assert!(can_read(&all, "any", ""));
    }

    #[test]
    fn overlapping_and_adjacent_permissions_merge() {
        // etcd's own cases (range_perm_cache_test.go) plus adjacency.
        assert!(can_read(&[read("a", "f"), read("c", "d"), read("f", "z")], "a", "z"));
        assert!(can_read(&[read("a", "d"), read("a", "b"), read("c", "f")], "a", "f"));
        assert!(can_read(&[read("a", "c"), read("c", "e")], "a", "e"), "touching ranges join");
        assert!(can_read(&[read("c", "e"), read("a", "c")], "b", "d"), "order of grant does not matter");
        assert!(can_read(&[read("a", "c"), read("b", "\0")], "a", "\0"));
        // A single-key permission joins a range that starts right after it.
        assert!(can_read(&[read("a", ""), read("a\0", "b")], "a", "b"));
    }

    #[test]
    fn a_gap_denies_the_range() {
        assert!(!can_read(&[read("a", "c"), read("x", "z")], "a", "z"));
        assert!(!can_read(&[read("a", "c"), read("d", "z")], "a", "z"), "[c, d) is missing");
        assert!(!can_read(&[read("a", "c"), read("c\0", "z")], "a", "z"), "the key c is missing");
        assert!(can_read(&[read("a", "c"), read("c", ""), read("c\0", "z")], "a", "z"), "the key c fills it");
        // Both halves exist but the request starts before them.
        assert!(!can_read(&[read("b", "c"), read("c", "d")], "a", "d"));
    }

    #[test]
    fn empty_and_inverted_permissions_grant_nothing() {
        // Empty key: +inf in bytes-affine order.
        assert!(!can_read(&[read("", "\0")], "a", ""));
        assert!(!can_read(&[read("", "\0")], "\0", "\0"));
        assert!(!can_read(&[read("", "")], "a", ""));
        // range_end at or below key.
        assert!(!can_read(&[read("d", "b")], "c", ""));
        assert!(!can_read(&[read("d", "b")], "b", "d"));
        assert!(!can_read(&[read("d", "d")], "d", ""));
    }

    #[test]
    fn types_are_separate_and_readwrite_is_both() {
        let perms = [Permission::new(Write, "w", ""), Permission::new(ReadWrite, "rw", ""), read("r", "")];
        assert!(covers(&perms, Write, b"w", b""));
        assert!(!covers(&perms, Read, b"w", b""));
        assert!(covers(&perms, Read, b"r", b""));
        assert!(!covers(&perms, Write, b"r", b""));
        assert!(covers(&perms, Read, b"rw", b""));
        assert!(covers(&perms, Write, b"rw", b""));
        // A READ and a WRITE permission do not add up to cover a range for either.
        let split = [read("a", "c"), Permission::new(Write, "c", "e")];
        assert!(!covers(&split, Read, b"a", b"e"));
        assert!(!covers(&split, Write, b"a", b"e"));
    }

    #[test]
    fn no_permissions_and_empty_request_key() {
        assert!(!can_read(&[], "a", ""));
        assert!(!can_read(&[], "a", "b"));
        assert!(!can_read(&[read("\0", "\0")], "", ""), "an empty key lies in no interval");
    }

    #[test]
    fn perm_type_wire_values() {
        assert_eq!(PermType::from_i32(0), Some(Read));
        assert_eq!(PermType::from_i32(1), Some(Write));
        assert_eq!(PermType::from_i32(2), Some(ReadWrite));
        assert_eq!(PermType::from_i32(3), None);
        assert_eq!(ReadWrite as i32, 2);
    }
}
