//! kube-apiserver's compactor: every `--etcd-compaction-interval` the store is compacted at the
//! revision the previous round saw, so history stays for one interval. Several apiservers on one
//! store take turns through a compare-and-swap on `compact_rev_key` (outside `--etcd-prefix`,
//! as kube writes it): its version is a logical clock, and only the apiserver whose clock matches
//! compacts in a round; the others learn the clock and skip it. The first round never compacts.

use std::time::Duration;

use keel_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use keel_proto::etcdserverpb::request_op::Request;
use keel_proto::etcdserverpb::response_op::Response;
use keel_proto::etcdserverpb::{CompactionRequest, Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};

use super::{Result, Storage};

/// The key whose version orders the compactions of every apiserver sharing a store.
pub const COMPACT_REV_KEY: &str = "compact_rev_key";

/// The compactor's state between rounds: the clock it expects and the revision to compact at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// `compact_rev_key`'s version as last seen.
    pub clock: i64,
    /// The store's revision at the last round: the next round compacts there (0: not yet).
    pub rev: i64,
}

impl Storage {
    /// One round of kube's compactor. Whoever wins the compare-and-swap records `rev` and
    /// compacts at it; a loser adopts the clock it found. Either way the next round compacts at
    /// this round's revision.
    pub async fn compact_round(&self, last: Round) -> Result<Round> {
        let key = COMPACT_REV_KEY.as_bytes().to_vec();
        let txn = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Version as i32,
                key: key.clone().into(),
                target_union: Some(TargetUnion::Version(last.clock)),
                ..Default::default()
            }],
            success: vec![RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: key.clone().into(),
                    value: last.rev.to_string().into_bytes().into(),
                    ..Default::default()
                })),
            }],
            failure: vec![RequestOp {
                request: Some(Request::RequestRange(RangeRequest { key: key.into(), ..Default::default() })),
            }],
        };
        let resp = self.kv(|mut kv| async move { kv.txn(txn).await }).await?;
        let now = resp.header.as_ref().map_or(0, |h| h.revision);
        if !resp.succeeded {
            let clock = match resp.responses.first().and_then(|r| r.response.as_ref()) {
                Some(Response::ResponseRange(r)) => r.kvs.first().map_or(0, |kv| kv.version),
                _ => 0,
            };
            return Ok(Round { clock, rev: now });
        }
        if last.rev != 0 {
            let compact = CompactionRequest { revision: last.rev, physical: false };
            match self.kv(|mut kv| async move { kv.compact(compact).await }).await {
                Ok(_) => tracing::info!(revision = last.rev, "compacted the store"),
                // Another compactor got there first.
                Err(super::StorageError::Store(s)) if super::is_compacted(&s) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Round { clock: last.clock + 1, rev: now })
    }

    /// Runs the compactor every `interval` until the task is dropped; a failed round is logged
    /// and retried at the next.
    pub async fn compact_every(self, interval: Duration) {
        let mut round = Round::default();
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            tick.tick().await;
            match self.compact_round(round).await {
                Ok(next) => round = next,
                Err(e) => tracing::warn!("compacting the store: {e}"),
            }
        }
    }
}
