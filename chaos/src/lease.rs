//! The lease workload and its checker.
//!
//! A leaser grants a lease (2 to 5 s) on a random member, attaches a key to it, and keeps it
//! alive on a random member at random intervals (sometimes longer than half its TTL), then lets
//! it expire or revokes it. Every keep-alive answer is recorded with the time its request was
//! sent; the first answer saying the lease is gone is recorded with the time it came.
//!
//! - **Never early**: the leader renews a lease when the keep-alive reaches it, after the client
//!   sent it, so a lease acknowledged for `ttl` seconds by a request sent at `t` cannot be gone
//!   before `t + ttl`, whatever leader changes and partitions happened in between (a new leader
//!   gives every lease its full time again).
//! - **Eventually gone**: after the faults, a lease nobody kept alive and its key are gone on
//!   every member once its TTL has passed (plus time for an election and the revoke to commit).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::lease_client::LeaseClient;
use keel_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, PutRequest, RangeRequest,
};
use rand::Rng;
use tokio_stream::StreamExt;

use crate::net;

/// Keys attached to leases live under this prefix, outside the register workload's keys.
const PREFIX: &str = "lease/";
/// How long a lease may outlive its TTL after the faults: an election, and the revoke through
/// Raft.
const EXPIRY_GRACE: Duration = Duration::from_secs(5);

/// What happened to one lease.
#[derive(Debug, Clone, Default)]
pub struct LeaseLog {
    pub id: i64,
    /// Every acknowledged grant or keep-alive: when its request was sent, and the TTL granted.
    pub acks: Vec<(Duration, i64)>,
    /// When an answer first said the lease was gone.
    pub gone: Option<Duration>,
}

impl LeaseLog {
    fn key(&self) -> String {
        format!("{PREFIX}{:x}", self.id)
    }
}

/// Grants, keeps alive and drops leases until `until`; the logs go to `logs` as they finish.
pub async fn leaser(urls: &[String], until: Duration, rng: &mut impl Rng, logs: Rc<RefCell<Vec<LeaseLog>>>) {
    let timeout = Duration::from_secs(2);
    while turmoil::elapsed() < until {
        let url = &urls[rng.random_range(0..urls.len())];
        let sent = turmoil::elapsed();
        let req = LeaseGrantRequest { ttl: rng.random_range(2..=5), id: 0 };
        let Ok(granted) = LeaseClient::new(net::channel(url, timeout)).lease_grant(req).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let granted = granted.into_inner();
        let mut log = LeaseLog { id: granted.id, acks: vec![(sent, granted.ttl)], ..Default::default() };
        let put = PutRequest { key: log.key().into_bytes().into(), lease: log.id, ..Default::default() };
        let url = &urls[rng.random_range(0..urls.len())];
        let _ = KvClient::new(net::channel(url, timeout)).put(put).await;
        for _ in 0..rng.random_range(0..8) {
            let pause = rng.random_range(200..(granted.ttl as u64 * 900).max(300));
            tokio::time::sleep(Duration::from_millis(pause)).await;
            if turmoil::elapsed() >= until || log.gone.is_some() {
                break;
            }
            let url = &urls[rng.random_range(0..urls.len())];
            keep_alive(url, &mut log).await;
        }
        if log.gone.is_none() && rng.random_ratio(1, 3) {
            let url = &urls[rng.random_range(0..urls.len())];
            let _ = LeaseClient::new(net::channel(url, timeout)).lease_revoke(LeaseRevokeRequest { id: log.id }).await;
        }
        logs.borrow_mut().push(log);
    }
}

/// One keep-alive on a fresh stream to `url`, recorded in `log`.
async fn keep_alive(url: &str, log: &mut LeaseLog) {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let _ = tx.send(LeaseKeepAliveRequest { id: log.id }).await;
    let sent = turmoil::elapsed();
    let mut client = LeaseClient::new(net::channel(url, Duration::from_secs(3600)));
    let answer = async {
        let mut answers =
            client.lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)).await.ok()?.into_inner();
        answers.next().await?.ok()
    };
    match tokio::time::timeout(Duration::from_secs(2), answer).await {
        Ok(Some(a)) if a.ttl > 0 => log.acks.push((sent, a.ttl)),
        // etcd answers a keep-alive of a lease it does not have with TTL 0.
        Ok(Some(_)) => log.gone = Some(turmoil::elapsed()),
        _ => {}
    }
}

/// Leases found gone before their time: an acknowledged keep-alive sent at `t` for `ttl` seconds,
/// and an answer before `t + ttl` saying the lease was gone.
pub fn early(logs: &[LeaseLog]) -> Vec<String> {
    let mut violations = Vec::new();
    for log in logs {
        let Some(gone) = log.gone else { continue };
        if let Some((sent, ttl)) = log.acks.iter().find(|(sent, ttl)| *sent + Duration::from_secs(*ttl as u64) > gone) {
            violations.push(format!(
                "lease {:x} gone at {gone:?}, though a keep-alive sent at {sent:?} was granted {ttl} s",
                log.id
            ));
        }
    }
    violations
}

/// After the faults: waits (up to `deadline`) until every lease whose time is up is gone on every
/// member, with its key; returns the leases that are not.
pub async fn expired(urls: &[String], logs: &[LeaseLog], deadline: Duration) -> Vec<String> {
    let timeout = Duration::from_secs(2);
    let mut violations = Vec::new();
    for log in logs {
        let Some(due) = log.acks.iter().map(|(sent, ttl)| *sent + Duration::from_secs(*ttl as u64)).max() else {
            continue;
        };
        // The answer to the last keep-alive may have come up to the request timeout after it was
        // sent; the leader renewed it at some point in between.
        let due = due + timeout + EXPIRY_GRACE;
        if turmoil::elapsed() < due {
            tokio::time::sleep(due - turmoil::elapsed()).await;
        }
        'members: for url in urls {
            loop {
                let ttl = LeaseClient::new(net::channel(url, timeout))
                    .lease_time_to_live(LeaseTimeToLiveRequest { id: log.id, keys: false })
                    .await
                    .map(|r| r.into_inner().ttl);
                let range =
                    RangeRequest { key: log.key().into_bytes().into(), serializable: true, ..Default::default() };
                let kept = KvClient::new(net::channel(url, timeout)).range(range).await.map(|r| r.into_inner().count);
                if matches!((&ttl, &kept), (Ok(-1), Ok(0))) {
                    continue 'members;
                }
                if turmoil::elapsed() >= deadline {
                    violations.push(format!(
                        "lease {:x} not gone from {url} by {deadline:?} (due {due:?}): TTL {ttl:?}, its key {kept:?}",
                        log.id
                    ));
                    break 'members;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_before_an_acknowledged_ttl_ran_out_is_early() {
        let s = Duration::from_secs;
        let log = |acks: Vec<(u64, i64)>, gone: u64| LeaseLog {
            id: 1,
            acks: acks.into_iter().map(|(t, ttl)| (s(t), ttl)).collect(),
            gone: Some(s(gone)),
        };
        assert!(early(&[log(vec![(1, 3), (2, 3)], 5)]).is_empty());
        assert_eq!(early(&[log(vec![(1, 3), (3, 3)], 5)]).len(), 1);
        assert!(early(&[LeaseLog { gone: None, ..log(vec![(1, 3)], 0) }]).is_empty());
    }
}
