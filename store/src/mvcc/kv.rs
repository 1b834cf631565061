//! etcd's KV semantics on top of MVCC views: what Range, Put, DeleteRange, Txn and Compact
//! answer, and when they refuse. These functions are the state machine's applier (writes) and the
//! read path (Range, read-only Txn); the gRPC layer only validates shapes and fills headers.
//!
//! Every refusal happens before the first change, so a refused request changes nothing.

use bytes::Bytes;
use keel_proto::etcdserverpb::{
    compare, request_op, response_op, CompactionRequest, CompactionResponse, Compare, DeleteRangeRequest,
    DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse, ResponseHeader, ResponseOp, TxnRequest,
    TxnResponse,
};
use keel_proto::etcdserverpb::{
    compare::CompareResult, compare::CompareTarget, range_request::SortOrder, range_request::SortTarget,
};
use keel_proto::mvccpb::KeyValue;

use super::keys::Rev;
use super::{ApplyBatch, TxnWrite, View};
use crate::error::{Error, Result};

/// etcd's range end convention on the wire: empty = single key; `"\0"` = every key >= key.
pub fn range_end(end: &[u8]) -> Option<&[u8]> {
    match end {
        [] => None,
        [0] => Some(&[]),
        e => Some(e),
    }
}

pub(crate) fn header(rev: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader { revision: rev, ..Default::default() })
}

/// What a Range found in the index, before any value is loaded: the revisions to load (up to
/// the limit it fetches), the count of all matches, and the revision it read at. The index can
/// be walked a piece at a time ([`Planned::visit`]), each piece under its own view.
pub struct Planned {
    revs: Vec<Rev>,
    /// Most revisions kept (the rest are only counted).
    take: usize,
    count: i64,
    /// The revision the range reads at, and the one its header reports.
    at: i64,
    header_rev: i64,
    /// The key to go on from, until the range is walked.
    resume: Option<Vec<u8>>,
}

/// Checks a Range against the view's revisions as etcd's applier does; nothing found yet.
pub fn plan(v: &impl View, r: &RangeRequest) -> Result<Planned> {
    let order = SortOrder::try_from(r.sort_order).map_err(|_| Error::InvalidSortOption)?;
    SortTarget::try_from(r.sort_target).map_err(|_| Error::InvalidSortOption)?;
    let cur = v.rev();
    if r.revision > cur {
        return Err(Error::FutureRev);
    }
    let at = if r.revision <= 0 { cur } else { r.revision };
    if at < v.compact_rev() {
        return Err(Error::Compacted);
    }
    let mut limit = r.limit;
    if order != SortOrder::None || filtered(r) {
        limit = 0; // fetch everything; sort and truncate afterwards
    }
    if limit > 0 {
        limit = limit.saturating_add(1); // one extra tells `more` (etcd wraps, then takes all)
    }
    let take = if r.count_only {
        0
    } else if limit <= 0 {
        usize::MAX
    } else {
        usize::try_from(limit).unwrap_or(usize::MAX)
    };
    Ok(Planned { revs: Vec::new(), take, count: 0, at, header_rev: cur, resume: Some(r.key.to_vec()) })
}

impl Planned {
    /// Walks up to `keys` more live keys of the range in `v`: the view it was planned in or a
    /// later one (keys written since are not live at its revision; a compaction past its
    /// revision is `Compacted`). Returns whether keys are left.
    pub fn visit(&mut self, v: &impl View, r: &RangeRequest, keys: usize) -> Result<bool> {
        if self.at < v.compact_rev() {
            return Err(Error::Compacted);
        }
        let Some(from) = self.resume.take() else { return Ok(false) };
        let mut n = 0;
        v.index().visit(&from, range_end(&r.range_end), self.at, |k, f| {
            if n == keys {
                self.resume = Some(k.to_vec());
                return false;
            }
            n += 1;
            self.count += 1;
            if self.revs.len() < self.take {
                self.revs.push(f.modified);
            }
            true
        });
        Ok(self.resume.is_some())
    }
}

/// The index half of Range, in one walk (see [`range`]).
pub fn find(v: &impl View, r: &RangeRequest) -> Result<Planned> {
    let mut planned = plan(v, r)?;
    planned.visit(v, r, usize::MAX)?;
    Ok(planned)
}

/// Every live key in the range at the view's revision, with its value.
fn live(v: &impl View, key: &[u8], end: Option<&[u8]>) -> Result<Vec<KeyValue>> {
    let mut kvs = Vec::new();
    let mut failed = None;
    v.index().visit(key, end, v.rev(), |_, f| match v.load(f.modified) {
        Ok(kv) => {
            kvs.push(kv);
            true
        }
        Err(e) => {
            failed = Some(e);
            false
        }
    });
    failed.map_or(Ok(kvs), Err)
}

fn filtered(r: &RangeRequest) -> bool {
    r.min_mod_revision != 0 || r.max_mod_revision != 0 || r.min_create_revision != 0 || r.max_create_revision != 0
}

/// The value half of Range: loads what [`find`] found through `load`, then filters, sorts,
/// limits (with `more`) as etcd's applier does.
pub fn load(found: Planned, r: &RangeRequest, load: impl Fn(Rev) -> Result<KeyValue>) -> Result<RangeResponse> {
    let Planned { revs, count, header_rev, .. } = found;
    let mut kvs = revs.into_iter().map(load).collect::<Result<Vec<_>>>()?;
    let order = SortOrder::try_from(r.sort_order).map_err(|_| Error::InvalidSortOption)?;
    let target = SortTarget::try_from(r.sort_target).map_err(|_| Error::InvalidSortOption)?;
    if r.max_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision <= r.max_mod_revision);
    }
    if r.min_mod_revision != 0 {
        kvs.retain(|kv| kv.mod_revision >= r.min_mod_revision);
    }
    if r.max_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision <= r.max_create_revision);
    }
    if r.min_create_revision != 0 {
        kvs.retain(|kv| kv.create_revision >= r.min_create_revision);
    }
    let order = if target != SortTarget::Key && order == SortOrder::None { SortOrder::Ascend } else { order };
    if order != SortOrder::None {
        // Stable sorts: for up to 12 results this is exactly etcd's (Go's insertion sort) order.
        let cmp = |a: &KeyValue, b: &KeyValue| match target {
            SortTarget::Key => a.key.cmp(&b.key),
            SortTarget::Version => a.version.cmp(&b.version),
            SortTarget::Create => a.create_revision.cmp(&b.create_revision),
            SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
            SortTarget::Value => a.value.cmp(&b.value),
        };
        match order {
            SortOrder::Ascend => kvs.sort_by(cmp),
            SortOrder::Descend => kvs.sort_by(|a, b| cmp(b, a)),
            SortOrder::None => {}
        }
    }
    let mut more = false;
    if r.limit > 0 && kvs.len() > r.limit as usize {
        kvs.truncate(r.limit as usize);
        more = true;
    }
    if r.keys_only {
        for kv in &mut kvs {
            kv.value = Bytes::new();
        }
    }
    Ok(RangeResponse { header: header(header_rev), kvs, more, count })
}

/// Range as etcd's applier answers it: filters, sort, limit with `more`, `count` of all matches;
/// values loaded from the view itself (see `Mvcc::range` for the read path's, outside the lock).
pub fn range(v: &impl View, r: &RangeRequest) -> Result<RangeResponse> {
    load(find(v, r)?, r, |rev| v.load(rev))
}

/// Checks a Put against the state before the write: the previous value must exist for
/// `ignore_value`/`ignore_lease`, and the lease must exist.
fn check_put(v: &impl View, p: &PutRequest) -> Result<()> {
    check_prev(v, p)?;
    check_lease(v, p)
}

/// `ignore_value`/`ignore_lease` need a previous value to take it from.
fn check_prev(v: &impl View, p: &PutRequest) -> Result<()> {
    if (p.ignore_value || p.ignore_lease) && v.index().get(&p.key, v.rev()).is_none() {
        return Err(Error::KeyNotFound);
    }
    Ok(())
}

fn check_lease(v: &impl View, p: &PutRequest) -> Result<()> {
    if p.lease != 0 && !v.leases().exists(p.lease) {
        return Err(Error::LeaseNotFound);
    }
    Ok(())
}

fn put_op(tw: &mut TxnWrite, p: &PutRequest) -> Result<PutResponse> {
    let prev = match tw.index().get(&p.key, tw.rev()) {
        Some(f) if p.ignore_value || p.ignore_lease || p.prev_kv => Some(tw.load(f.modified)?),
        _ => None,
    };
    let value =
        if p.ignore_value { prev.as_ref().map(|kv| kv.value.clone()).unwrap_or_default() } else { p.value.clone() };
    let lease = if p.ignore_lease { prev.as_ref().map(|kv| kv.lease).unwrap_or_default() } else { p.lease };
    let rev = tw.put(&p.key, &value, lease)?;
    Ok(PutResponse { header: header(rev), prev_kv: if p.prev_kv { prev } else { None } })
}

fn delete_op(tw: &mut TxnWrite, d: &DeleteRangeRequest) -> Result<DeleteRangeResponse> {
    let end = range_end(&d.range_end);
    let prev_kvs = if d.prev_kv { live(tw, &d.key, end)? } else { Vec::new() };
    let deleted = tw.delete_range(&d.key, end)?;
    // The new revision if this txn changed anything so far, else the current one (as etcd).
    Ok(DeleteRangeResponse { header: header(tw.rev()), deleted, prev_kvs })
}

/// Applies a Put as its own write.
pub fn put(batch: &mut ApplyBatch, p: &PutRequest) -> Result<PutResponse> {
    let mut tw = batch.txn();
    // A Put on its own checks the lease before the previous value (a Put inside a txn checks
    // in the other order, see `check_put`), as etcd's applier does.
    check_lease(&tw, p)?;
    check_prev(&tw, p)?;
    let resp = put_op(&mut tw, p)?;
    tw.end();
    Ok(resp)
}

/// Applies a DeleteRange as its own write.
pub fn delete_range(batch: &mut ApplyBatch, d: &DeleteRangeRequest) -> Result<DeleteRangeResponse> {
    let mut tw = batch.txn();
    let resp = delete_op(&mut tw, d)?;
    tw.end();
    Ok(resp)
}

fn compare_kv(c: &Compare, kv: &KeyValue) -> bool {
    use compare::TargetUnion as T;
    let ord = match CompareTarget::try_from(c.target) {
        Ok(CompareTarget::Value) => {
            let want: &[u8] = match &c.target_union {
                Some(T::Value(v)) => v,
                _ => &[],
            };
            kv.value.as_ref().cmp(want)
        }
        Ok(CompareTarget::Create) => kv.create_revision.cmp(&match c.target_union {
            Some(T::CreateRevision(r)) => r,
            _ => 0,
        }),
        Ok(CompareTarget::Mod) => kv.mod_revision.cmp(&match c.target_union {
            Some(T::ModRevision(r)) => r,
            _ => 0,
        }),
        Ok(CompareTarget::Version) => kv.version.cmp(&match c.target_union {
            Some(T::Version(r)) => r,
            _ => 0,
        }),
        Ok(CompareTarget::Lease) => kv.lease.cmp(&match c.target_union {
            Some(T::Lease(r)) => r,
            _ => 0,
        }),
        Err(_) => std::cmp::Ordering::Equal,
    };
    match CompareResult::try_from(c.result) {
        Ok(CompareResult::Equal) => ord.is_eq(),
        Ok(CompareResult::NotEqual) => ord.is_ne(),
        Ok(CompareResult::Greater) => ord.is_gt(),
        Ok(CompareResult::Less) => ord.is_lt(),
        Err(_) => true,
    }
}

fn apply_compare(v: &impl View, c: &Compare) -> bool {
    let Ok(kvs) = live(v, &c.key, range_end(&c.range_end)) else {
        return false;
    };
    if kvs.is_empty() {
        // A value compare on missing keys always fails: there is no value to compare.
        return c.target != CompareTarget::Value as i32 && compare_kv(c, &KeyValue::default());
    }
    kvs.iter().all(|kv| compare_kv(c, kv))
}

/// Evaluates every compare of the txn and its nested txns on the branch taken, all against the
/// state before the txn (as etcd does), depth first.
fn compare_path(v: &impl View, t: &TxnRequest, path: &mut Vec<bool>) {
    let ok = t.compare.iter().all(|c| apply_compare(v, c));
    path.push(ok);
    for op in if ok { &t.success } else { &t.failure } {
        if let Some(request_op::Request::RequestTxn(inner)) = &op.request {
            compare_path(v, inner, path);
        }
    }
}

/// Which of etcd's two pre-apply passes over a txn's chosen path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Puts: the previous value for `ignore_value`/`ignore_lease`, then the lease.
    Puts,
    /// Ranges: sort options and the requested revision.
    Ranges,
}

/// Pre-checks the ops on the chosen path against the state before the txn, so a refused txn
/// changes nothing. etcd runs the put pass over the whole path first (write txns only), then the
/// range pass, so which refusal wins depends on that order.
fn check_path(v: &impl View, t: &TxnRequest, path: &[bool], at: &mut usize, pass: Pass) -> Result<()> {
    let ok = path[*at];
    *at += 1;
    for op in if ok { &t.success } else { &t.failure } {
        match &op.request {
            Some(request_op::Request::RequestPut(p)) if pass == Pass::Puts => check_put(v, p)?,
            Some(request_op::Request::RequestRange(r)) if pass == Pass::Ranges => {
                SortOrder::try_from(r.sort_order).map_err(|_| Error::InvalidSortOption)?;
                SortTarget::try_from(r.sort_target).map_err(|_| Error::InvalidSortOption)?;
                if r.revision > v.rev() {
                    return Err(Error::FutureRev);
                }
                // As etcd: any non-zero revision below the compacted one, negative ones too.
                if r.revision != 0 && r.revision < v.compact_rev() {
                    return Err(Error::Compacted);
                }
            }
            Some(request_op::Request::RequestTxn(inner)) => check_path(v, inner, path, at, pass)?,
            Some(_) => {}
            None => return Err(Error::KeyNotFound),
        }
    }
    Ok(())
}

/// Runs etcd's pre-apply checks: the put pass for write txns, then the range pass.
fn check_txn(v: &impl View, t: &TxnRequest, path: &[bool]) -> Result<()> {
    if !is_read_only(t) {
        check_path(v, t, path, &mut 0, Pass::Puts)?;
    }
    check_path(v, t, path, &mut 0, Pass::Ranges)
}

/// Executes a txn's ops: a write transaction runs all of them; a read-only txn's planner (see
/// [`txn_plan`]) finds its ranges in the index and refuses anything else.
trait Exec {
    fn range(&mut self, r: &RangeRequest) -> Result<RangeResponse>;
    fn write(&mut self, op: &request_op::Request) -> Result<response_op::Response>;
}

impl Exec for TxnWrite<'_, '_> {
    fn range(&mut self, r: &RangeRequest) -> Result<RangeResponse> {
        range(self, r)
    }

    fn write(&mut self, op: &request_op::Request) -> Result<response_op::Response> {
        match op {
            request_op::Request::RequestPut(p) => Ok(response_op::Response::ResponsePut(put_op(self, p)?)),
            request_op::Request::RequestDeleteRange(d) => {
                Ok(response_op::Response::ResponseDeleteRange(delete_op(self, d)?))
            }
            // Reads and nested txns never get here: `run_ops` executes them itself.
            _ => Err(Error::Corrupt("unexpected op in a write".into())),
        }
    }
}

/// Plans a read-only txn's ranges under a view: each answers an empty placeholder, filled in
/// when the values are loaded ([`PlannedTxn::load`]).
struct Planner<'a, V> {
    view: &'a V,
    ranges: Vec<(Planned, RangeRequest)>,
}

impl<V: View> Exec for Planner<'_, V> {
    fn range(&mut self, r: &RangeRequest) -> Result<RangeResponse> {
        self.ranges.push((find(self.view, r)?, r.clone()));
        Ok(RangeResponse::default())
    }

    fn write(&mut self, _op: &request_op::Request) -> Result<response_op::Response> {
        Err(Error::Corrupt("a write reached the read-only txn path".into()))
    }
}

/// A read-only Txn answered from the index, its values not loaded yet: they are loaded from an
/// engine snapshot taken with the same view, after the view (and its lock) is gone.
pub struct PlannedTxn {
    resp: TxnResponse,
    ranges: Vec<(Planned, RangeRequest)>,
}

impl PlannedTxn {
    /// Loads the values of every range, in op order, into the response.
    pub fn load(self, load: impl Fn(Rev) -> Result<KeyValue>) -> Result<TxnResponse> {
        fn fill(
            resp: &mut TxnResponse,
            ranges: &mut impl Iterator<Item = (Planned, RangeRequest)>,
            load: &dyn Fn(Rev) -> Result<KeyValue>,
        ) -> Result<()> {
            for op in &mut resp.responses {
                match &mut op.response {
                    Some(response_op::Response::ResponseRange(slot)) => {
                        let (planned, r) =
                            ranges.next().ok_or_else(|| Error::Corrupt("a range went unplanned".into()))?;
                        *slot = self::load(planned, &r, load)?;
                    }
                    Some(response_op::Response::ResponseTxn(inner)) => fill(inner, ranges, load)?,
                    _ => {}
                }
            }
            Ok(())
        }
        let PlannedTxn { mut resp, ranges } = self;
        fill(&mut resp, &mut ranges.into_iter(), &load)?;
        Ok(resp)
    }
}

fn run_ops(x: &mut impl Exec, t: &TxnRequest, path: &[bool], at: &mut usize) -> Result<TxnResponse> {
    let ok = path[*at];
    *at += 1;
    let mut responses = Vec::new();
    for op in if ok { &t.success } else { &t.failure } {
        let resp = match &op.request {
            Some(request_op::Request::RequestRange(r)) => response_op::Response::ResponseRange(x.range(r)?),
            Some(request_op::Request::RequestTxn(inner)) => {
                let mut r = run_ops(x, inner, path, at)?;
                r.header = Some(ResponseHeader::default());
                response_op::Response::ResponseTxn(r)
            }
            Some(write) => x.write(write)?,
            None => return Err(Error::KeyNotFound),
        };
        responses.push(ResponseOp { response: Some(resp) });
    }
    Ok(TxnResponse { header: None, succeeded: ok, responses })
}

/// Whether every op of the txn, on both branches and nested, only reads.
pub fn is_read_only(t: &TxnRequest) -> bool {
    t.success.iter().chain(&t.failure).all(|op| match &op.request {
        Some(request_op::Request::RequestRange(_)) => true,
        Some(request_op::Request::RequestTxn(inner)) => is_read_only(inner),
        _ => false,
    })
}

fn txn_in(tw: &mut TxnWrite, t: &TxnRequest) -> Result<TxnResponse> {
    let mut path = Vec::new();
    compare_path(tw, t, &mut path);
    check_txn(tw, t, &path)?;
    run_ops(tw, t, &path, &mut 0)
}

/// Applies a Txn as one write (one revision for all its changes).
pub fn txn(batch: &mut ApplyBatch, t: &TxnRequest) -> Result<TxnResponse> {
    let mut tw = batch.txn();
    let mut resp = txn_in(&mut tw, t)?;
    resp.header = header(tw.end());
    Ok(resp)
}

/// Answers a read-only Txn from the index of a view: comparisons, checks and every range's
/// matches, at the view's revision; the values are loaded afterwards ([`PlannedTxn::load`]).
pub fn txn_plan(v: &impl View, t: &TxnRequest) -> Result<PlannedTxn> {
    let mut path = Vec::new();
    compare_path(v, t, &mut path);
    check_txn(v, t, &path)?;
    let mut planner = Planner { view: v, ranges: Vec::new() };
    let mut resp = run_ops(&mut planner, t, &path, &mut 0)?;
    resp.header = header(v.rev());
    Ok(PlannedTxn { resp, ranges: planner.ranges })
}

/// Answers a read-only Txn from a view, values loaded through it.
pub fn txn_read(v: &impl View, t: &TxnRequest) -> Result<TxnResponse> {
    txn_plan(v, t)?.load(|rev| v.load(rev))
}

/// Compacts at the requested revision: it must be above the compacted one and not in the future.
pub fn compact(batch: &mut ApplyBatch, c: &CompactionRequest) -> Result<CompactionResponse> {
    if c.revision <= batch.compact_rev() {
        return Err(Error::Compacted);
    }
    if c.revision > batch.current_rev() {
        return Err(Error::FutureRev);
    }
    batch.compact(c.revision);
    Ok(CompactionResponse { header: header(batch.current_rev()) })
}
