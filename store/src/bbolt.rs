//! bbolt (BoltDB) files, the format of etcd's data file and of what `etcdctl snapshot save`
//! writes: a reader that takes whatever bytes it is given, hostile ones included, and a writer
//! whose files Go's bbolt 1.3 (etcd 3.4 and 3.5) opens and passes with `tx.Check()`. The module
//! knows nothing of etcd: a file is a set of top-level buckets, each a map of byte keys to byte
//! values in key order. It is keel's own: the Rust ports of bbolt (bbolt-rs and others) are whole
//! database engines over a memory-mapped file that cast pages in place and trust what they map,
//! where keel needs a reader that trusts nothing and a writer of one whole file at a time.
//!
//! The file is a sequence of pages of `page_size` bytes (a power of two from 512 to 65536; 4096
//! on amd64); page `id` starts at byte `id * page_size`. Every integer is little-endian.
//!
//! ```text
//! page header (16)    id:8 flags:2 count:2 overflow:4
//!                     flags 0x01 branch, 0x02 leaf, 0x04 meta, 0x10 freelist; the page and the
//!                     `overflow` pages after it are one image, into which its elements may run
//! meta (16 into       magic:4 (0xED0CDAED) version:4 (2) page_size:4 flags:4
//!   pages 0 and 1)    root:8 sequence:8 (the root bucket) freelist:8 pgid:8 txid:8 checksum:8
//!                     checksum: 64-bit FNV-1a of the 56 bytes magic..txid; pgid: the pages in
//!                     use, every page id is below it
//! leaf element (16)   flags:4 pos:4 ksize:4 vsize:4, `count` of them after the header; the key
//!                     is at (this element) + pos, the value right after it; flag 0x01: the
//!                     value is a bucket header
//! branch element (16) pos:4 ksize:4 pgid:8; the key (the child's first) at (this element) + pos;
//!                     the children are pages of the same tree
//! bucket header (16)  root:8 sequence:8; root 0 is an inline bucket: the rest of the value is
//!                     one leaf page image (header and elements, its id ignored)
//! freelist            count:8 page ids after the header; count 0xFFFF: the first u64 is the count;
//!                     a meta's freelist of 2^64 - 1 means none (bbolt's NoFreelistSync)
//! ```
//!
//! Opening: meta 0 (at byte 0) is valid if its magic, version and checksum match; its page size
//! is then the file's, else meta 1 is looked for at byte 4096. Meta 1 lies at byte `page_size`
//! and must state that page size. Of the valid metas, the one with the larger txid is in force.
//! Its root bucket's tree holds the top-level buckets: every pair of it has the bucket flag, its
//! key is a bucket's name and its value the bucket's header. Nested buckets (bucket pairs inside
//! a bucket) are refused: etcd never writes them.
//!
//! The reader trusts nothing in the file. All arithmetic on what it reads is checked and every
//! byte is reached through `get`, so an out-of-range id, offset or length is an [`Error`], never a
//! panic. A page a walk reaches must be below the meta's pgid (itself at most the number of whole
//! pages in the file), lie inside the file with its overflow, name its own id in its header (as
//! bbolt checks) and be a branch or leaf page; its element array and every key and value must lie
//! inside it (an inline page's, inside its image). Within a walk a page is reached at most once,
//! and a page belongs to one tree only (the metas and the freelist to none): both are errors
//! ("page N is referenced twice"), which stops cycles and shared subtrees, so a walk takes time
//! linear in the file's size (a tree may be walked again, as often as asked); trees are at most
//! 64 levels deep. Keys must increase strictly across a whole tree. What it allocates is bounded
//! by the file's size: 8 bytes per page for the owners of pages, and per walk a set of the pages
//! it reached.
//!
//! The writer's layout: pages 0 and 1 are the metas (txid 0 and 1, otherwise the same: version
//! 2, flags 0, root sequence 0), page 2 the empty freelist, and the data pages follow from 3 in
//! the order they are written, with no gaps, so that every page below pgid is reachable (bbolt's
//! `tx.Check` reports any page neither reachable nor free). A bucket's pairs fill a leaf page
//! while `16 + Σ(16 + ksize + vsize) ≤ page_size` (and fewer than 0xFFFF of them); a pair larger
//! than a page gets a page of its own with overflow pages. Branch pages over the first keys of
//! the pages below are packed the same way, level by level up to a single root, except that a
//! branch page always takes at least two children, so that every level is smaller than the one
//! below even when keys are too large to share a page. A bucket without pairs is inline (a leaf
//! page image of no elements). The root tree, of the bucket pairs, is written last, then the
//! freelist and the metas. Memory holds one leaf page of pairs, the first key of every page of
//! the tree being written, and the buckets' pairs of the root tree.

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;
use std::io::{self, Seek, SeekFrom, Write};

/// The magic number of a meta.
const MAGIC: u32 = 0xED0C_DAED;
/// The format version bbolt 1.3 writes.
const VERSION: u32 = 2;
/// Bytes in a page header.
const HEADER: usize = 16;
/// Bytes in a leaf or branch element.
const ELEM: usize = 16;
/// Bytes in a meta, checksum included.
const META_LEN: usize = 64;
/// Bytes of a meta its checksum covers (all before the checksum).
const SUMMED: usize = 56;
/// Page flags.
const BRANCH: u16 = 0x01;
const LEAF: u16 = 0x02;
const META: u16 = 0x04;
const FREELIST: u16 = 0x10;
/// A leaf element's flag: its value is a bucket header.
const BUCKET_LEAF: u32 = 0x01;
/// Bytes in a bucket header (root page id, sequence).
const BUCKET_HEADER: usize = 16;
/// The page sizes accepted.
const MIN_PAGE: usize = 512;
const MAX_PAGE: usize = 65536;
/// Where meta 1 is looked for when meta 0 is not valid.
const FALLBACK_PAGE: usize = 4096;
/// The freelist page id of a file that keeps no freelist (bbolt's `NoFreelistSync`).
const NO_FREELIST: u64 = u64::MAX;
/// The owner of the meta and freelist pages, which no tree may reach.
const SYSTEM: u64 = u64::MAX;
/// The owner of a page no walk has reached. No tree has its root at page 0 (a meta page).
const NOBODY: u64 = 0;
/// The deepest a tree may be.
const MAX_DEPTH: usize = 64;
/// bbolt's largest key.
const MAX_KEY: usize = 32768;
/// bbolt's largest value.
const MAX_VALUE: usize = (1 << 31) - 2;
/// The most elements a page may hold (bbolt refuses 0xFFFF).
const MAX_COUNT: usize = 0xFFFE;
/// The writer's freelist page and first data page.
const FREELIST_PAGE: u64 = 2;
const FIRST_DATA: u64 = 3;
/// Zeros to pad pages with.
static ZEROS: [u8; 4096] = [0; 4096];

/// A format error: what was wrong, naming the page where there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Whether `data` starts like a bbolt file (meta 0's magic at offset 16), before any checks.
pub fn looks_like(data: &[u8]) -> bool {
    u32_at(data, HEADER) == Some(MAGIC)
}

/// The meta in force: the fields the reader uses.
#[derive(Debug, Clone, Copy)]
struct Meta {
    page_size: usize,
    /// The root page of the tree of buckets.
    root: u64,
    freelist: u64,
    /// Pages in use: every page id is below it.
    pgid: u64,
    txid: u64,
}

/// An open bbolt file: its bytes and the meta page in force.
pub struct File<'a> {
    data: &'a [u8],
    meta: Meta,
    /// For every page below pgid, the tree that reached it (its root page id), `SYSTEM` or
    /// `NOBODY`: a page belongs to one tree only.
    owners: Vec<Cell<u64>>,
}

/// A top-level bucket of a [`File`]: where its tree is.
#[derive(Debug, Clone, Copy)]
pub struct Bucket<'a>(Root<'a>);

/// Where a bucket's pairs are.
#[derive(Debug, Clone, Copy)]
enum Root<'a> {
    /// A tree of pages with its root at this page.
    Page(u64),
    /// An inline bucket: this leaf page image.
    Inline(&'a [u8]),
}

impl<'a> Bucket<'a> {
    /// The bucket a bucket header (and what follows it) describes; `at` is where it was found.
    fn parse(at: At, value: &'a [u8]) -> Result<Self, Error> {
        let short = || Error(format!("{at}: a bucket value of {} bytes, shorter than a header", value.len()));
        let (head, image) = value.split_at_checked(BUCKET_HEADER).ok_or_else(short)?;
        match u64_at(head, 0).ok_or_else(short)? {
            0 => Ok(Bucket(Root::Inline(image))),
            root => Ok(Bucket(Root::Page(root))),
        }
    }
}

impl<'a> File<'a> {
    /// Checks the meta pages and picks the one in force.
    pub fn open(data: &'a [u8]) -> Result<File<'a>, Error> {
        let first = meta_at(data, 0).filter(|m| page_size_ok(m.page_size));
        let size = first.map_or(FALLBACK_PAGE, |m| m.page_size);
        let second = meta_at(data, size).filter(|m| m.page_size == size);
        let meta = match (first, second) {
            (Some(a), Some(b)) if b.txid > a.txid => b,
            (Some(m), _) | (None, Some(m)) => m,
            (None, None) => {
                return Err(Error("no valid meta page: not a bbolt file, or both metas are damaged".into()))
            }
        };
        let pages = data.len() / meta.page_size;
        let pgid = usize::try_from(meta.pgid).ok().filter(|&n| n <= pages).ok_or_else(|| {
            Error(format!(
                "file is truncated: its meta counts {} pages of {} bytes, the file holds {} bytes",
                meta.pgid,
                meta.page_size,
                data.len()
            ))
        })?;
        let file = File { data, meta, owners: vec![Cell::new(NOBODY); pgid] };
        let mut seen = HashSet::new();
        for id in 0..meta.pgid.min(2) {
            file.claim(&mut seen, SYSTEM, id, id)?;
        }
        if meta.freelist != NO_FREELIST {
            let (bytes, last) = file.page(meta.freelist)?;
            check_freelist(meta.freelist, bytes)?;
            file.claim(&mut seen, SYSTEM, meta.freelist, last)?;
        }
        Ok(file)
    }

    /// The page size, in bytes.
    pub fn page_size(&self) -> usize {
        self.meta.page_size
    }

    /// The transaction id of the meta in force.
    pub fn txid(&self) -> u64 {
        self.meta.txid
    }

    /// The top-level buckets in name order.
    pub fn buckets(&self) -> Result<Vec<(&'a [u8], Bucket<'a>)>, Error> {
        let mut out = Vec::new();
        self.run(Root::Page(self.meta.root), |at, flags, name, value| {
            if flags & BUCKET_LEAF == 0 {
                return Err(Error(format!("{at}: a key outside any bucket")));
            }
            out.push((name, Bucket::parse(at, value)?));
            Ok(true)
        })?;
        // Two trees with one root would pass as one tree in the walks.
        let mut roots = HashSet::from([self.meta.root]);
        for (_, bucket) in &out {
            if let Root::Page(id) = bucket.0 {
                if !roots.insert(id) {
                    return Err(Error(format!("page {id} is referenced twice (the root of two trees)")));
                }
            }
        }
        Ok(out)
    }

    /// Calls `f` on every pair of `bucket` in key order until it returns false.
    pub fn for_each(&self, bucket: Bucket<'a>, f: &mut dyn FnMut(&'a [u8], &'a [u8]) -> bool) -> Result<(), Error> {
        self.run(bucket.0, |at, flags, key, value| {
            if flags & BUCKET_LEAF != 0 {
                return Err(Error(format!("{at}: nested buckets are not supported")));
            }
            Ok(f(key, value))
        })
    }

    /// Walks the tree at `root`, calling `visit(where, flags, key, value)` on every leaf element
    /// in order until it returns false.
    fn run<F>(&self, root: Root<'a>, visit: F) -> Result<(), Error>
    where
        F: FnMut(At, u32, &'a [u8], &'a [u8]) -> Result<bool, Error>,
    {
        match root {
            Root::Page(id) => {
                let mut walk = Walk { tree: id, seen: HashSet::new(), last: None, visit };
                self.walk(&mut walk, id, 0)?;
            }
            Root::Inline(image) => {
                let node = Node::new(At::Inline, image)?;
                if node.flags != LEAF {
                    return Err(Error(format!("an inline bucket has flags {:#x}, not a leaf page", node.flags)));
                }
                let mut walk = Walk { tree: NOBODY, seen: HashSet::new(), last: None, visit };
                walk.leaf(&node)?;
            }
        }
        Ok(())
    }

    /// Walks the subtree at page `id`, `depth` levels below the root; false if the visitor
    /// stopped the walk.
    fn walk<F>(&self, walk: &mut Walk<'a, F>, id: u64, depth: usize) -> Result<bool, Error>
    where
        F: FnMut(At, u32, &'a [u8], &'a [u8]) -> Result<bool, Error>,
    {
        if depth >= MAX_DEPTH {
            return Err(Error(format!("page {id} is more than {MAX_DEPTH} levels deep")));
        }
        let (bytes, last) = self.page(id)?;
        self.claim(&mut walk.seen, walk.tree, id, last)?;
        let node = Node::new(At::Page(id), bytes)?;
        match node.flags {
            BRANCH => {
                for i in 0..node.count {
                    let (_, child) = node.branch(i)?;
                    if !self.walk(walk, child, depth + 1)? {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            LEAF => walk.leaf(&node),
            flags => Err(Error(format!("page {id} has flags {flags:#x}, not a branch or leaf page"))),
        }
    }

    /// The bytes of page `id` with its overflow, and the id of its last overflow page.
    fn page(&self, id: u64) -> Result<(&'a [u8], u64), Error> {
        let pgid = self.meta.pgid;
        if id >= pgid {
            return Err(Error(format!("page {id} is past the high-water mark {pgid}")));
        }
        let size = self.meta.page_size as u64;
        let outside = || Error(format!("page {id} lies outside the file"));
        let start = id.checked_mul(size).and_then(|s| usize::try_from(s).ok()).ok_or_else(outside)?;
        let overflow = start.checked_add(12).and_then(|at| u32_at(self.data, at)).ok_or_else(outside)?;
        let last = id
            .checked_add(u64::from(overflow))
            .filter(|&last| last < pgid)
            .ok_or_else(|| Error(format!("page {id} overflows past the high-water mark {pgid}")))?;
        let end = (last + 1).checked_mul(size).and_then(|e| usize::try_from(e).ok()).ok_or_else(outside)?;
        let bytes = self.data.get(start..end).ok_or_else(outside)?;
        let label = u64_at(bytes, 0).ok_or_else(outside)?;
        if label != id {
            return Err(Error(format!("page {id} is labelled page {label}")));
        }
        Ok((bytes, last))
    }

    /// Records that a walk of `tree` reached pages `first..=last`: each only once per walk
    /// (`seen`), and none that another tree (or the metas and freelist) reached.
    fn claim(&self, seen: &mut HashSet<u64>, tree: u64, first: u64, last: u64) -> Result<(), Error> {
        for id in first..=last {
            let owner = usize::try_from(id)
                .ok()
                .and_then(|i| self.owners.get(i))
                .ok_or_else(|| Error(format!("page {id} is past the high-water mark {}", self.meta.pgid)))?;
            let prior = owner.get();
            if !seen.insert(id) || (prior != NOBODY && prior != tree) {
                return Err(Error(format!("page {id} is referenced twice")));
            }
            owner.set(tree);
        }
        Ok(())
    }
}

/// Checks that the freelist page `id` (its `bytes`) is one and that its ids fit in it.
fn check_freelist(id: u64, bytes: &[u8]) -> Result<(), Error> {
    let flags = u16_at(bytes, 8).unwrap_or_default();
    if flags != FREELIST {
        return Err(Error(format!("page {id} is the freelist, but has flags {flags:#x}")));
    }
    let (skip, count) = match u16_at(bytes, 10) {
        Some(0xFFFF) => (1, u64_at(bytes, HEADER)),
        count => (0, count.map(u64::from)),
    };
    let ids = count.and_then(|n| n.checked_add(skip)).and_then(|n| n.checked_mul(8));
    let need = ids.and_then(|n| n.checked_add(HEADER as u64));
    match need {
        Some(need) if need <= bytes.len() as u64 => Ok(()),
        _ => Err(Error(format!("page {id}: the freelist's ids run outside the page"))),
    }
}

/// Where an element was found, for errors.
#[derive(Debug, Clone, Copy)]
enum At {
    Page(u64),
    Inline,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Page(id) => write!(f, "page {id}"),
            At::Inline => f.write_str("an inline bucket"),
        }
    }
}

/// A branch or leaf page image whose element array is known to lie inside it.
struct Node<'a> {
    at: At,
    bytes: &'a [u8],
    flags: u16,
    count: usize,
}

impl<'a> Node<'a> {
    /// Reads a page image's header and checks that its elements fit in it.
    fn new(at: At, bytes: &'a [u8]) -> Result<Self, Error> {
        let (Some(flags), Some(count)) = (u16_at(bytes, 8), u16_at(bytes, 10)) else {
            return Err(Error(format!("{at} is shorter than a page header")));
        };
        let count = usize::from(count);
        if HEADER + count * ELEM > bytes.len() {
            return Err(Error(format!("{at}: {count} elements do not fit in its {} bytes", bytes.len())));
        }
        Ok(Node { at, bytes, flags, count })
    }

    /// Where element `i` starts, and its four u32 fields.
    fn elem(&self, i: usize) -> Result<(usize, [u32; 4]), Error> {
        let at = HEADER + i * ELEM;
        let word = |k: usize| u32_at(self.bytes, at + 4 * k);
        match (word(0), word(1), word(2), word(3)) {
            (Some(a), Some(b), Some(c), Some(d)) => Ok((at, [a, b, c, d])),
            _ => Err(Error(format!("{}: element {i} lies outside the page", self.at))),
        }
    }

    /// Leaf element `i`: its flags, key and value.
    fn leaf(&self, i: usize) -> Result<(u32, &'a [u8], &'a [u8]), Error> {
        let (at, [flags, pos, ksize, vsize]) = self.elem(i)?;
        let (key, value) = self.span(at, pos, ksize, vsize)?;
        Ok((flags, key, value))
    }

    /// Branch element `i`: its key and child page.
    fn branch(&self, i: usize) -> Result<(&'a [u8], u64), Error> {
        let (at, [pos, ksize, low, high]) = self.elem(i)?;
        let (key, _) = self.span(at, pos, ksize, 0)?;
        Ok((key, u64::from(low) | (u64::from(high) << 32)))
    }

    /// The key and value of the element at `from`.
    fn span(&self, from: usize, pos: u32, ksize: u32, vsize: u32) -> Result<(&'a [u8], &'a [u8]), Error> {
        span(self.bytes, from, pos, ksize, vsize)
            .ok_or_else(|| Error(format!("{}: an element's key or value runs outside the page", self.at)))
    }
}

/// `ksize` bytes at `pos` past `from` in `bytes`, and the `vsize` after them.
fn span(bytes: &[u8], from: usize, pos: u32, ksize: u32, vsize: u32) -> Option<(&[u8], &[u8])> {
    let start = from.checked_add(pos as usize)?;
    let mid = start.checked_add(ksize as usize)?;
    let end = mid.checked_add(vsize as usize)?;
    Some((bytes.get(start..mid)?, bytes.get(mid..end)?))
}

/// One walk of one tree.
struct Walk<'a, F> {
    /// The tree's root page: the owner of every page it reaches.
    tree: u64,
    /// The pages this walk reached.
    seen: HashSet<u64>,
    /// The last key passed, which the next must follow.
    last: Option<&'a [u8]>,
    visit: F,
}

impl<'a, F> Walk<'a, F>
where
    F: FnMut(At, u32, &'a [u8], &'a [u8]) -> Result<bool, Error>,
{
    /// Visits the elements of a leaf page in order; false if the visitor stopped.
    fn leaf(&mut self, node: &Node<'a>) -> Result<bool, Error> {
        for i in 0..node.count {
            let (flags, key, value) = node.leaf(i)?;
            if key.is_empty() {
                return Err(Error(format!("an empty key in {}", node.at)));
            }
            if self.last.is_some_and(|last| key <= last) {
                return Err(Error(format!("keys out of order in {}", node.at)));
            }
            self.last = Some(key);
            if !(self.visit)(node.at, flags, key, value)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The meta at byte `at` (past its page header) if it is valid.
fn meta_at(data: &[u8], at: usize) -> Option<Meta> {
    let m = data.get(at.checked_add(HEADER)?..at.checked_add(HEADER + META_LEN)?)?;
    if u32_at(m, 0)? != MAGIC || u32_at(m, 4)? != VERSION || fnv1a(m.get(..SUMMED)?) != u64_at(m, SUMMED)? {
        return None;
    }
    Some(Meta {
        page_size: usize::try_from(u32_at(m, 8)?).ok()?,
        root: u64_at(m, 16)?,
        freelist: u64_at(m, 32)?,
        pgid: u64_at(m, 40)?,
        txid: u64_at(m, 48)?,
    })
}

/// Whether `size` is a page size this module reads and writes.
fn page_size_ok(size: usize) -> bool {
    size.is_power_of_two() && (MIN_PAGE..=MAX_PAGE).contains(&size)
}

/// 64-bit FNV-1a, the meta checksum.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The little-endian integer at `at`, if `b` holds it.
fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

/// The little-endian integer at `at`, if `b` holds it.
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// The little-endian integer at `at`, if `b` holds it.
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Writes a little-endian integer at `at` (the writer's own buffers, always large enough).
fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes a little-endian integer at `at` (the writer's own buffers, always large enough).
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes a little-endian integer at `at` (the writer's own buffers, always large enough).
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A page header.
fn header(id: u64, flags: u16, count: u16, overflow: u32) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    put_u64(&mut h, 0, id);
    put_u16(&mut h, 8, flags);
    put_u16(&mut h, 10, count);
    put_u32(&mut h, 12, overflow);
    h
}

/// The start of meta page `txid` (0 or 1, its id too) of a written file.
fn meta_page(txid: u64, page_size: usize, root: u64, pgid: u64) -> Vec<u8> {
    let mut page = header(txid, META, 0, 0).to_vec();
    let mut meta = [0u8; META_LEN];
    put_u32(&mut meta, 0, MAGIC);
    put_u32(&mut meta, 4, VERSION);
    put_u32(&mut meta, 8, page_size as u32);
    // The flags (12) and the root bucket's sequence (24) stay 0.
    put_u64(&mut meta, 16, root);
    put_u64(&mut meta, 32, FREELIST_PAGE);
    put_u64(&mut meta, 40, pgid);
    put_u64(&mut meta, 48, txid);
    let sum = fnv1a(&meta[..SUMMED]);
    put_u64(&mut meta, SUMMED, sum);
    page.extend_from_slice(&meta);
    page
}

/// An `InvalidInput` error: what the writer was asked for is not a bbolt file.
fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// Writes a bbolt file: top-level buckets in increasing name order, each with its pairs in
/// increasing key order, into `out` (which must be empty at the start). After an error the file
/// is incomplete and the writer should be dropped.
pub struct Writer<W: Write + Seek> {
    out: W,
    page_size: usize,
    /// The id of the next page to write; `out` is at its start.
    next: u64,
    /// The bucket being written.
    bucket: Option<Vec<u8>>,
    /// The last key put in it (empty before the first: keys are not).
    last_key: Vec<u8>,
    /// The leaf page being filled: its elements (flags, key size, value size) and their keys and
    /// values back to back.
    pending: Vec<(u32, usize, usize)>,
    data: Vec<u8>,
    /// The bytes the pending page takes, header included.
    size: usize,
    /// The first key and id of every leaf page written for the tree being written.
    firsts: Vec<(Vec<u8>, u64)>,
    /// The finished buckets' names and values (bucket headers), for the root tree.
    buckets: Vec<(Vec<u8>, Vec<u8>)>,
}

impl<W: Write + Seek> Writer<W> {
    /// A writer with pages of `page_size` bytes (4096 is what etcd uses on amd64).
    pub fn new(out: W, page_size: usize) -> io::Result<Self> {
        if !page_size_ok(page_size) {
            return Err(invalid(format!("page size {page_size}: not a power of two from {MIN_PAGE} to {MAX_PAGE}")));
        }
        let mut w = Writer {
            out,
            page_size,
            next: FIRST_DATA,
            bucket: None,
            last_key: Vec::new(),
            pending: Vec::new(),
            data: Vec::new(),
            size: HEADER,
            firsts: Vec::new(),
            buckets: Vec::new(),
        };
        // The metas and the freelist, filled in by `finish`.
        w.out.seek(SeekFrom::Start(0))?;
        w.zeros(FIRST_DATA as usize * page_size)?;
        Ok(w)
    }

    /// Starts the next top-level bucket; names strictly increasing, non-empty.
    pub fn bucket(&mut self, name: &[u8]) -> io::Result<()> {
        if name.is_empty() || name.len() > MAX_KEY {
            return Err(invalid(format!("a bucket name of {} bytes: names are 1 to {MAX_KEY} bytes", name.len())));
        }
        if self.bucket.as_deref().is_some_and(|current| name <= current) {
            return Err(invalid("bucket names out of order"));
        }
        self.end_bucket()?;
        self.bucket = Some(name.to_vec());
        Ok(())
    }

    /// Adds a pair to the current bucket; keys strictly increasing, non-empty, at most 32768
    /// bytes; values under 2^31 - 1 bytes. Anything else (or no bucket started) is an
    /// `InvalidInput` io::Error.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        if self.bucket.is_none() {
            return Err(invalid("a pair before any bucket"));
        }
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(invalid(format!("a key of {} bytes: keys are 1 to {MAX_KEY} bytes", key.len())));
        }
        if value.len() > MAX_VALUE {
            return Err(invalid(format!("a value of {} bytes: values are at most {MAX_VALUE} bytes", value.len())));
        }
        if key <= self.last_key.as_slice() {
            return Err(invalid("keys out of order"));
        }
        self.add(0, key, value)?;
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        Ok(())
    }

    /// Finishes the last bucket, the root tree, the (empty) freelist and both meta pages, and
    /// returns `out` positioned at the end; the file is exactly `pgid * page_size` bytes.
    pub fn finish(mut self) -> io::Result<W> {
        self.end_bucket()?;
        for (name, value) in std::mem::take(&mut self.buckets) {
            self.add(BUCKET_LEAF, &name, &value)?;
        }
        let root = match self.end_tree()? {
            Some(root) => root,
            None => self.write_page(LEAF, 0, &[])?,
        };
        let pgid = self.next;
        let size = self.page_size as u64;
        self.out.seek(SeekFrom::Start(FREELIST_PAGE * size))?;
        self.out.write_all(&header(FREELIST_PAGE, FREELIST, 0, 0))?;
        for txid in 0..2 {
            self.out.seek(SeekFrom::Start(txid * size))?;
            self.out.write_all(&meta_page(txid, self.page_size, root, pgid))?;
        }
        self.out.seek(SeekFrom::Start(pgid * size))?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Adds a pair to the tree being written: to the pending leaf page if it fits, else to a new
    /// one; a pair larger than a page is written at once on a page of its own.
    fn add(&mut self, flags: u32, key: &[u8], value: &[u8]) -> io::Result<()> {
        let size = ELEM + key.len() + value.len();
        if HEADER + size > self.page_size {
            self.flush_leaf()?;
            let mut elem = [0u8; ELEM];
            put_u32(&mut elem, 0, flags);
            put_u32(&mut elem, 4, ELEM as u32);
            put_u32(&mut elem, 8, key.len() as u32);
            put_u32(&mut elem, 12, value.len() as u32);
            let id = self.write_page(LEAF, 1, &[elem.as_slice(), key, value])?;
            self.firsts.push((key.to_vec(), id));
            return Ok(());
        }
        if !self.pending.is_empty() && (self.size + size > self.page_size || self.pending.len() >= MAX_COUNT) {
            self.flush_leaf()?;
        }
        self.pending.push((flags, key.len(), value.len()));
        self.data.extend_from_slice(key);
        self.data.extend_from_slice(value);
        self.size += size;
        Ok(())
    }

    /// Writes the pending leaf page, if it has pairs.
    fn flush_leaf(&mut self) -> io::Result<()> {
        let Some(&(_, first_len, _)) = self.pending.first() else { return Ok(()) };
        let count = self.pending.len();
        let mut elems = vec![0u8; count * ELEM];
        let mut off = 0;
        for (i, &(flags, ksize, vsize)) in self.pending.iter().enumerate() {
            let at = i * ELEM;
            put_u32(&mut elems, at, flags);
            put_u32(&mut elems, at + 4, ((count - i) * ELEM + off) as u32);
            put_u32(&mut elems, at + 8, ksize as u32);
            put_u32(&mut elems, at + 12, vsize as u32);
            off += ksize + vsize;
        }
        let mut data = std::mem::take(&mut self.data);
        let id = self.write_page(LEAF, count as u16, &[elems.as_slice(), data.as_slice()])?;
        self.firsts.push((data[..first_len].to_vec(), id));
        data.clear();
        self.data = data;
        self.pending.clear();
        self.size = HEADER;
        Ok(())
    }

    /// Finishes the current bucket: its tree, and its pair for the root tree.
    fn end_bucket(&mut self) -> io::Result<()> {
        let Some(name) = self.bucket.take() else { return Ok(()) };
        let mut value = vec![0u8; BUCKET_HEADER];
        match self.end_tree()? {
            Some(root) => put_u64(&mut value, 0, root),
            // Inline: root 0, then a leaf page image of no elements.
            None => value.extend_from_slice(&header(0, LEAF, 0, 0)),
        }
        self.buckets.push((name, value));
        self.last_key.clear();
        Ok(())
    }

    /// Finishes the tree being written: its branch pages, and its root page (None if it has no
    /// pairs).
    fn end_tree(&mut self) -> io::Result<Option<u64>> {
        self.flush_leaf()?;
        let mut level = std::mem::take(&mut self.firsts);
        while level.len() > 1 {
            level = self.branches(level)?;
        }
        Ok(level.first().map(|&(_, id)| id))
    }

    /// Writes the branch pages over one level of pages (first key, id), returning the level
    /// above. A page takes at least two children, so the level above is smaller.
    fn branches(&mut self, mut level: Vec<(Vec<u8>, u64)>) -> io::Result<Vec<(Vec<u8>, u64)>> {
        let mut above = Vec::new();
        let mut start = 0;
        while start < level.len() {
            let (mut end, mut size) = (start, HEADER);
            while let Some((key, _)) = level.get(end) {
                let add = ELEM + key.len();
                let taken = end - start;
                if taken >= 2 && (size + add > self.page_size || taken >= MAX_COUNT) {
                    break;
                }
                size += add;
                end += 1;
            }
            let id = self.branch_page(&level[start..end])?;
            above.push((std::mem::take(&mut level[start].0), id));
            start = end;
        }
        Ok(above)
    }

    /// Writes one branch page over `children` (first key, id).
    fn branch_page(&mut self, children: &[(Vec<u8>, u64)]) -> io::Result<u64> {
        let count = children.len();
        let mut elems = vec![0u8; count * ELEM];
        let mut keys: Vec<u8> = Vec::new();
        for (i, (key, child)) in children.iter().enumerate() {
            let at = i * ELEM;
            put_u32(&mut elems, at, ((count - i) * ELEM + keys.len()) as u32);
            put_u32(&mut elems, at + 4, key.len() as u32);
            put_u64(&mut elems, at + 8, *child);
            keys.extend_from_slice(key);
        }
        self.write_page(BRANCH, count as u16, &[elems.as_slice(), keys.as_slice()])
    }

    /// Writes the next page: a header, then `parts` back to back, zero-padded to whole pages
    /// (more than one makes overflow pages). Returns its id.
    fn write_page(&mut self, flags: u16, count: u16, parts: &[&[u8]]) -> io::Result<u64> {
        let len = parts.iter().fold(HEADER, |n, part| n + part.len());
        let pages = len.div_ceil(self.page_size);
        let overflow = u32::try_from(pages - 1).map_err(|_| invalid("a page too large for the format"))?;
        let id = self.next;
        self.out.write_all(&header(id, flags, count, overflow))?;
        for part in parts {
            self.out.write_all(part)?;
        }
        self.zeros(pages * self.page_size - len)?;
        self.next += pages as u64;
        Ok(id)
    }

    /// Writes `n` zero bytes.
    fn zeros(&mut self, mut n: usize) -> io::Result<()> {
        while n > 0 {
            let k = n.min(ZEROS.len());
            self.out.write_all(&ZEROS[..k])?;
            n -= k;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    fn cursor() -> Cursor<Vec<u8>> {
        Cursor::new(Vec::new())
    }

    /// etcd-like buckets: "alarm" empty, "key" with `keys` pairs (17-byte big-endian revision
    /// keys, values of 0 to 299 bytes), "lease" with 3 pairs, "meta" with one `big`-byte value.
    fn sample(keys: u64, big: usize) -> Vec<(Vec<u8>, Pairs)> {
        let key: Pairs = (0..keys)
            .map(|i| {
                let mut k = i.to_be_bytes().to_vec();
                k.push(b'_');
                k.extend_from_slice(&(i % 3).to_be_bytes());
                let len = (i as usize * 37) % 300;
                (k, (0..len).map(|j| (i as usize + j) as u8).collect::<Vec<u8>>())
            })
            .collect();
        let lease: Pairs = (1..=3u8).map(|i| (vec![0, i], vec![i; 10])).collect();
        vec![
            (b"alarm".to_vec(), Vec::new()),
            (b"key".to_vec(), key),
            (b"lease".to_vec(), lease),
            (b"meta".to_vec(), vec![(b"consistent_index".to_vec(), vec![0xAB; big])]),
        ]
    }

    fn write(buckets: &[(Vec<u8>, Pairs)], page_size: usize) -> Vec<u8> {
        let mut w = Writer::new(cursor(), page_size).unwrap();
        for (name, pairs) in buckets {
            w.bucket(name).unwrap();
            for (k, v) in pairs {
                w.put(k, v).unwrap();
            }
        }
        let out = w.finish().unwrap();
        assert_eq!(out.position(), out.get_ref().len() as u64, "finish leaves the stream at the end");
        out.into_inner()
    }

    /// Every bucket's pairs.
    fn read(data: &[u8]) -> Result<Vec<(Vec<u8>, Pairs)>, Error> {
        let file = File::open(data)?;
        let mut out = Vec::new();
        for (name, bucket) in file.buckets()? {
            let mut pairs = Vec::new();
            file.for_each(bucket, &mut |k, v| {
                pairs.push((k.to_vec(), v.to_vec()));
                true
            })?;
            out.push((name.to_vec(), pairs));
        }
        Ok(out)
    }

    /// Opens `data` and walks all of it, keeping nothing; whatever it returns, it must return.
    fn walk_all(data: &[u8]) -> Result<(), Error> {
        let file = File::open(data)?;
        for (_, bucket) in file.buckets()? {
            file.for_each(bucket, &mut |_, _| true)?;
        }
        Ok(())
    }

    /// Every data page of a file (id and flags), overflow pages skipped.
    fn data_pages(file: &File<'_>) -> Vec<(u64, u16)> {
        let (mut out, mut id) = (Vec::new(), FIRST_DATA);
        while id < file.meta.pgid {
            let (bytes, last) = file.page(id).unwrap();
            out.push((id, u16_at(bytes, 8).unwrap()));
            id = last + 1;
        }
        out
    }

    /// The first key of the subtree at page `id`.
    fn first_key<'a>(file: &File<'a>, id: u64) -> &'a [u8] {
        let node = Node::new(At::Page(id), file.page(id).unwrap().0).unwrap();
        if node.flags == BRANCH {
            node.branch(0).unwrap().0
        } else {
            node.leaf(0).unwrap().1
        }
    }

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// A bucket value holding an inline bucket of `pairs` (flags, key, value), as bbolt writes
    /// small buckets.
    fn inline(pairs: &[(u32, &[u8], &[u8])]) -> Vec<u8> {
        let n = pairs.len();
        let (mut elems, mut data) = (vec![0u8; n * ELEM], Vec::<u8>::new());
        for (i, (flags, k, v)) in pairs.iter().enumerate() {
            put_u32(&mut elems, i * ELEM, *flags);
            put_u32(&mut elems, i * ELEM + 4, ((n - i) * ELEM + data.len()) as u32);
            put_u32(&mut elems, i * ELEM + 8, k.len() as u32);
            put_u32(&mut elems, i * ELEM + 12, v.len() as u32);
            data.extend_from_slice(k);
            data.extend_from_slice(v);
        }
        let mut value = vec![0u8; BUCKET_HEADER];
        value.extend_from_slice(&header(0, LEAF, n as u16, 0));
        value.extend_from_slice(&elems);
        value.extend_from_slice(&data);
        value
    }

    /// A file whose root tree holds these (name, value) bucket pairs.
    fn with_root_pairs(pairs: Pairs) -> Vec<u8> {
        let mut w = Writer::new(cursor(), 4096).unwrap();
        w.buckets = pairs;
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn round_trips() {
        let buckets = sample(20_000, 20_000);
        let data = write(&buckets, 4096);
        assert_eq!(data.len() % 4096, 0);
        assert_eq!(u16_at(&data, 2 * 4096 + 8), Some(FREELIST), "page 2 is the freelist");
        let file = File::open(&data).unwrap();
        assert_eq!((file.page_size(), file.txid()), (4096, 1));
        assert_eq!(data.len() as u64, file.meta.pgid * 4096);
        let names: Vec<Vec<u8>> = file.buckets().unwrap().iter().map(|(n, _)| n.to_vec()).collect();
        assert_eq!(names, buckets.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
        let back = read(&data).unwrap();
        assert_eq!(back.len(), buckets.len());
        for ((name, pairs), (want_name, want)) in back.iter().zip(&buckets) {
            assert_eq!(name, want_name);
            assert_eq!(pairs.len(), want.len(), "pairs of {:?}", String::from_utf8_lossy(name));
            assert!(pairs == want, "pairs of {:?} differ", String::from_utf8_lossy(name));
        }
        // Walks can be repeated.
        assert!(read(&data).unwrap() == back);

        // No buckets at all: metas, freelist and an empty root leaf.
        let empty = Writer::new(cursor(), 4096).unwrap().finish().unwrap().into_inner();
        assert_eq!(empty.len(), 4 * 4096);
        assert!(read(&empty).unwrap().is_empty());
    }

    /// What bbolt's `tx.Check` demands: every page below pgid is reachable (here none is free),
    /// and only once; branch keys are the first keys of their children.
    #[test]
    fn every_page_is_reached_once() {
        let data = write(&sample(20_000, 20_000), 4096);
        let file = File::open(&data).unwrap();
        for (_, bucket) in file.buckets().unwrap() {
            file.for_each(bucket, &mut |_, _| true).unwrap();
        }
        let unreached: Vec<usize> =
            file.owners.iter().enumerate().filter(|(_, o)| o.get() == NOBODY).map(|(i, _)| i).collect();
        assert!(unreached.is_empty(), "unreachable pages {unreached:?}");
        assert!(file.owners[..3].iter().all(|o| o.get() == SYSTEM));
        let pages = data_pages(&file);
        let (mut branches, mut overflowed) = (0, 0);
        for (i, &(id, flags)) in pages.iter().enumerate() {
            assert!(flags == BRANCH || flags == LEAF, "page {id} has flags {flags:#x}");
            let next = pages.get(i + 1).map_or(file.meta.pgid, |&(next, _)| next);
            overflowed += usize::from(next > id + 1);
            if flags == BRANCH {
                branches += 1;
                let node = Node::new(At::Page(id), file.page(id).unwrap().0).unwrap();
                for e in 0..node.count {
                    let (key, child) = node.branch(e).unwrap();
                    assert_eq!(key, first_key(&file, child), "page {id} element {e}");
                }
            }
        }
        assert!(branches >= 2, "two levels of branch pages in the key bucket, not {branches} pages");
        assert!(overflowed >= 1, "the big value takes overflow pages");
    }

    #[test]
    fn for_each_stops_when_told() {
        let data = write(&sample(1000, 10), 4096);
        let file = File::open(&data).unwrap();
        let buckets = file.buckets().unwrap();
        let key = buckets.iter().find(|(n, _)| *n == b"key").unwrap().1;
        let mut calls = 0;
        file.for_each(key, &mut |_, _| {
            calls += 1;
            calls < 5
        })
        .unwrap();
        assert_eq!(calls, 5);
    }

    #[test]
    fn damage_is_refused_never_a_panic() {
        let buckets = sample(20_000, 20_000);
        let data = write(&buckets, 4096);

        // (a) One damaged meta leaves the other; two leave nothing.
        let mut d = data.clone();
        d[HEADER + 16] ^= 0xFF;
        assert_eq!(File::open(&d).unwrap().txid(), 1);
        assert!(read(&d).unwrap() == buckets);
        d[4096 + HEADER + 16] ^= 0xFF;
        assert!(File::open(&d).is_err());
        let mut d = data.clone();
        d[4096 + HEADER + 50] ^= 0x01;
        assert_eq!(File::open(&d).unwrap().txid(), 0);
        assert!(read(&d).unwrap() == buckets);

        // (b) Truncated.
        let err = read(&data[..data.len() / 2]).unwrap_err();
        assert!(err.0.contains("truncated"), "{err}");

        // (c) A branch page that is its own child.
        let branch = {
            let file = File::open(&data).unwrap();
            data_pages(&file).into_iter().find(|&(_, flags)| flags == BRANCH).unwrap().0
        };
        let mut d = data.clone();
        let at = branch as usize * 4096 + HEADER + 8;
        d[at..at + 8].copy_from_slice(&branch.to_le_bytes());
        let err = read(&d).unwrap_err();
        assert!(err.0.contains("referenced twice"), "{err}");

        // (d) 0xFF anywhere: every byte of the first 8 pages of a small file of 512-byte pages
        // (metas, freelist, leaves, branches and overflow alike), then random bytes of it and of
        // the big file. Any result but a panic will do.
        let small = write(&sample(600, 3000), 512);
        let mut d = small.clone();
        for at in 0..(8 * 512).min(d.len()) {
            let old = std::mem::replace(&mut d[at], 0xFF);
            let _ = walk_all(&d);
            d[at] = old;
        }
        let mut x = 0x2545_F491_4F6C_DD1D;
        for bytes in [small, data] {
            let mut d = bytes;
            for _ in 0..300 {
                let at = (xorshift(&mut x) % d.len() as u64) as usize;
                let old = std::mem::replace(&mut d[at], 0xFF);
                let _ = walk_all(&d);
                d[at] = old;
            }
        }
    }

    #[test]
    fn reads_inline_buckets_and_refuses_what_etcd_never_writes() {
        let small = inline(&[(0, &b"a"[..], &b"1"[..]), (0, &b"b"[..], &b""[..])]);
        let data = with_root_pairs(vec![(b"small".to_vec(), small)]);
        let want = vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), Vec::new())];
        assert_eq!(read(&data).unwrap(), vec![(b"small".to_vec(), want)]);

        let child = inline(&[]);
        let nested = inline(&[(BUCKET_LEAF, &b"child"[..], child.as_slice())]);
        let err = read(&with_root_pairs(vec![(b"outer".to_vec(), nested)])).unwrap_err();
        assert!(err.0.contains("nested buckets are not supported"), "{err}");

        let unordered = inline(&[(0, &b"b"[..], &b""[..]), (0, &b"a"[..], &b""[..])]);
        let err = read(&with_root_pairs(vec![(b"x".to_vec(), unordered)])).unwrap_err();
        assert!(err.0.contains("keys out of order"), "{err}");

        let mut w = Writer::new(cursor(), 4096).unwrap();
        w.add(0, b"loose", b"pair").unwrap();
        let err = read(&w.finish().unwrap().into_inner()).unwrap_err();
        assert!(err.0.contains("outside any bucket"), "{err}");
    }

    #[test]
    fn writer_refuses_bad_input() {
        let refused = |r: io::Result<()>| matches!(r, Err(e) if e.kind() == io::ErrorKind::InvalidInput);
        assert!(matches!(Writer::new(cursor(), 1000), Err(e) if e.kind() == io::ErrorKind::InvalidInput));
        let mut w = Writer::new(cursor(), 4096).unwrap();
        assert!(refused(w.put(b"k", b"v")), "a pair before any bucket");
        assert!(refused(w.bucket(b"")));
        w.bucket(b"b").unwrap();
        assert!(refused(w.bucket(b"a")));
        assert!(refused(w.bucket(b"b")));
        assert!(refused(w.put(b"", b"v")));
        w.put(b"k2", b"v").unwrap();
        assert!(refused(w.put(b"k1", b"v")));
        assert!(refused(w.put(b"k2", b"v")));
        assert!(refused(w.put(&[b'x'; MAX_KEY + 1], b"v")));
        w.put(b"k3", b"w").unwrap();
        let data = w.finish().unwrap().into_inner();
        let want = vec![(b"k2".to_vec(), b"v".to_vec()), (b"k3".to_vec(), b"w".to_vec())];
        assert_eq!(read(&data).unwrap(), vec![(b"b".to_vec(), want)]);
    }

    #[test]
    fn looks_like_a_bbolt_file() {
        let data = write(&sample(10, 10), 4096);
        assert!(looks_like(&data));
        assert!(!looks_like(b"KEELSNAP\0\0\0\x01\0\0\0\0\0\0\0\x02 and some more bytes"));
        assert!(!looks_like(&data[..19]));
    }
}
