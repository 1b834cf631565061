//! Request checks made at the gRPC edge before anything is proposed, as etcd's v3rpc makes them:
//! a request that fails here changes nothing and never reaches Raft.

use std::collections::HashSet;

use keel_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use keel_proto::etcdserverpb::{request_op, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest};

use crate::error::{Error, Result};

pub fn range(r: &RangeRequest) -> Result<()> {
    if r.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if SortOrder::try_from(r.sort_order).is_err() || SortTarget::try_from(r.sort_target).is_err() {
        return Err(Error::InvalidSortOption);
    }
    Ok(())
}

pub fn put(p: &PutRequest) -> Result<()> {
    if p.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if p.ignore_value && !p.value.is_empty() {
        return Err(Error::ValueProvided);
    }
    if p.ignore_lease && p.lease != 0 {
        return Err(Error::LeaseProvided);
    }
    Ok(())
}

pub fn delete_range(d: &DeleteRangeRequest) -> Result<()> {
    if d.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    Ok(())
}

fn request_op(op: &RequestOp, max_txn_ops: usize) -> Result<()> {
    match &op.request {
        Some(request_op::Request::RequestRange(r)) => range(r),
        Some(request_op::Request::RequestPut(p)) => put(p),
        Some(request_op::Request::RequestDeleteRange(d)) => delete_range(d),
        Some(request_op::Request::RequestTxn(t)) => txn_shape(t, max_txn_ops),
        None => Err(Error::KeyNotFound),
    }
}

fn txn_shape(t: &TxnRequest, max_txn_ops: usize) -> Result<()> {
    let opc = t.compare.len().max(t.success.len()).max(t.failure.len());
    if opc > max_txn_ops {
        return Err(Error::TooManyOps);
    }
    if t.compare.iter().any(|c| c.key.is_empty()) {
        return Err(Error::EmptyKey);
    }
    for op in t.success.iter().chain(&t.failure) {
        request_op(op, max_txn_ops - opc)?;
    }
    Ok(())
}

/// A delete's key interval as etcd's duplicate check sees it: `[key, end)` compared bytewise
/// (so an end of `"\0"` covers nothing), or the single key when `end` is empty.
struct Interval {
    key: Vec<u8>,
    end: Vec<u8>,
}

impl Interval {
    fn covers(&self, k: &[u8]) -> bool {
        if self.end.is_empty() {
            self.key == k
        } else {
            self.key.as_slice() <= k && k < self.end.as_slice()
        }
    }
}

fn any_covers(dels: &[Interval], k: &[u8]) -> bool {
    dels.iter().any(|d| d.covers(k))
}

/// etcd's `checkIntervals`: within one branch (and the branches nested in it) no key may be put
/// twice, nor put and deleted. Returns the branch's puts and deletes for the level above.
fn intervals(ops: &[RequestOp]) -> Result<(HashSet<Vec<u8>>, Vec<Interval>)> {
    let mut dels: Vec<Interval> = ops
        .iter()
        .filter_map(|op| match &op.request {
            Some(request_op::Request::RequestDeleteRange(d)) => {
                Some(Interval { key: d.key.to_vec(), end: d.range_end.to_vec() })
            }
            _ => None,
        })
        .collect();
    let mut puts: HashSet<Vec<u8>> = HashSet::new();
    for op in ops {
        let Some(request_op::Request::RequestTxn(t)) = &op.request else { continue };
        let (puts_then, dels_then) = intervals(&t.success)?;
        let (puts_else, dels_else) = intervals(&t.failure)?;
        for k in &puts_then {
            if puts.contains(k) || any_covers(&dels, k) {
                return Err(Error::DuplicateKey);
            }
            puts.insert(k.clone());
        }
        for k in &puts_else {
            // then and else exclude each other, so the same key in both is fine
            if (puts.contains(k) && !puts_then.contains(k)) || any_covers(&dels, k) {
                return Err(Error::DuplicateKey);
            }
            puts.insert(k.clone());
        }
        dels.extend(dels_then);
        dels.extend(dels_else);
    }
    for op in ops {
        let Some(request_op::Request::RequestPut(p)) = &op.request else { continue };
        let k = p.key.to_vec();
        if puts.contains(&k) || any_covers(&dels, &k) {
            return Err(Error::DuplicateKey);
        }
        puts.insert(k);
    }
    Ok((puts, dels))
}

/// All of etcd's checks on a txn: shape and op count, then duplicate keys per branch.
pub fn txn(t: &TxnRequest, max_txn_ops: usize) -> Result<()> {
    txn_shape(t, max_txn_ops)?;
    intervals(&t.success)?;
    intervals(&t.failure)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::etcdserverpb::Compare;

    fn put_op(k: &str) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: k.as_bytes().to_vec().into(),
                ..Default::default()
            })),
        }
    }
    fn del_op(k: &str, end: &str) -> RequestOp {
        RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: k.as_bytes().to_vec().into(),
                range_end: end.as_bytes().to_vec().into(),
                ..Default::default()
            })),
        }
    }
    fn txn_op(success: Vec<RequestOp>, failure: Vec<RequestOp>) -> RequestOp {
        RequestOp { request: Some(request_op::Request::RequestTxn(TxnRequest { compare: vec![], success, failure })) }
    }
    fn t(success: Vec<RequestOp>) -> TxnRequest {
        TxnRequest { compare: vec![], success, failure: vec![] }
    }

    #[test]
    fn duplicate_puts_and_put_over_delete_are_refused() {
        assert_eq!(txn(&t(vec![put_op("a"), put_op("a")]), 128), Err(Error::DuplicateKey));
        assert_eq!(txn(&t(vec![put_op("b"), del_op("a", "c")]), 128), Err(Error::DuplicateKey));
        assert_eq!(txn(&t(vec![put_op("c"), del_op("a", "c")]), 128), Ok(()));
        assert_eq!(txn(&t(vec![put_op("a"), del_op("a", "\0")]), 128), Ok(()), "etcd's check misses from-key deletes");
        assert_eq!(txn(&t(vec![txn_op(vec![put_op("a")], vec![put_op("a")])]), 128), Ok(()));
        assert_eq!(txn(&t(vec![put_op("a"), txn_op(vec![put_op("a")], vec![])]), 128), Err(Error::DuplicateKey));
        assert_eq!(txn(&t(vec![del_op("a", ""), txn_op(vec![], vec![put_op("a")])]), 128), Err(Error::DuplicateKey));
    }

    #[test]
    fn op_counts_and_empty_keys() {
        let many: Vec<_> = (0..5).map(|i| put_op(&format!("k{i}"))).collect();
        assert_eq!(txn(&t(many.clone()), 4), Err(Error::TooManyOps));
        assert_eq!(txn(&t(many), 5), Ok(()));
        let bad = TxnRequest { compare: vec![Compare::default()], success: vec![], failure: vec![] };
        assert_eq!(txn(&bad, 128), Err(Error::EmptyKey));
        assert_eq!(txn(&t(vec![RequestOp { request: None }]), 128), Err(Error::KeyNotFound));
    }
}
