//! The watch workload and its checker.
//!
//! A watcher watches the workload's keys from revision 1 on a random member; when its stream
//! breaks (a crash, a partition, a timeout) it resumes from the revision after the last event it
//! got, on another member, as etcd clients do. Each stream is one *segment*: the revision it
//! started from and the events it delivered.
//!
//! After the faults, the truth is read from every member by a watch from revision 1 up to the
//! member's current revision; the members must agree (convergence). Then every segment must be
//! exactly the truth's events from its start revision on, for as far as it got: ordered, unique,
//! with no gaps (reliable), nothing the truth does not have, and resumable at its start revision.

use std::time::Duration;

use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::watch_client::WatchClient;
use keel_proto::etcdserverpb::watch_request::RequestUnion;
use keel_proto::etcdserverpb::{RangeRequest, WatchCreateRequest, WatchRequest};
use keel_proto::mvccpb::event::EventType;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use crate::net;

/// One event as the checker compares it: revision, key, value (`None` for a delete).
pub type Event = (i64, Vec<u8>, Option<Vec<u8>>);

/// What one watch stream delivered.
#[derive(Debug, Clone, Default)]
pub struct Segment {
    pub member: usize,
    pub start: i64,
    pub events: Vec<Event>,
}

/// The workload's keys, `k0`, `k1`, … : the watched range is `[k, l)`.
const KEY_FROM: &[u8] = b"k";
const KEY_END: &[u8] = b"l";

fn create(start_revision: i64) -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: KEY_FROM.to_vec().into(),
            range_end: KEY_END.to_vec().into(),
            start_revision,
            ..Default::default()
        })),
    }
}

/// Watches on `member` from `start` until the stream ends, `until` passes, or (with `upto`) the
/// events reach revision `upto`. Returns the events it delivered.
async fn stream(channel: Channel, start: i64, until: Duration, upto: Option<i64>) -> Vec<Event> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let _ = tx.send(create(start)).await;
    let mut events = Vec::new();
    let Ok(resp) = WatchClient::new(channel).watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await else {
        return events;
    };
    let mut responses = resp.into_inner();
    loop {
        let left = until.saturating_sub(turmoil::elapsed());
        if left.is_zero() || upto.is_some_and(|u| events.last().is_some_and(|e: &Event| e.0 >= u)) {
            return events;
        }
        match tokio::time::timeout(left, responses.next()).await {
            Ok(Some(Ok(r))) if !r.canceled => {
                for e in r.events {
                    let Some(kv) = e.kv else { continue };
                    let value = (e.r#type != EventType::Delete as i32).then(|| kv.value.to_vec());
                    events.push((kv.mod_revision, kv.key.to_vec(), value));
                }
            }
            _ => return events,
        }
    }
}

/// A watcher that keeps watching, resuming on another member whenever a stream breaks, until
/// `until`. Now and then it starts a stream at a revision ahead of what it has seen (it must then
/// get nothing older: etcd-io/etcd#20221), skipping what lies between.
pub async fn watch_until(urls: &[String], until: Duration, rng: &mut impl rand::Rng) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut next = 1;
    while turmoil::elapsed() < until {
        let member = rng.random_range(0..urls.len());
        let start = if rng.random_ratio(1, 4) { next + rng.random_range(1..20) } else { next };
        let channel = net::channel(&urls[member], Duration::from_secs(3600));
        let events = stream(channel, start, until, None).await;
        next = events.last().map_or(start, |last| last.0 + 1);
        segments.push(Segment { member, start, events });
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    segments
}

/// Every event on `url` from revision 1 to its current revision (the member's history of the
/// workload's keys), or `None` if the member does not answer within `until`. The workload writes
/// only those keys, one per revision, so the history is complete when it reaches the revision.
pub async fn history(url: &str, until: Duration) -> Option<Vec<Event>> {
    let channel = net::channel(url, Duration::from_secs(3));
    let range = RangeRequest { key: KEY_FROM.to_vec().into(), serializable: true, ..Default::default() };
    let rev = KvClient::new(channel).range(range).await.ok()?.into_inner().header?.revision;
    let mut events: Vec<Event> = Vec::new();
    while events.last().map_or(rev > 1, |e| e.0 < rev) && turmoil::elapsed() < until {
        let from = events.last().map_or(1, |e| e.0 + 1);
        events.extend(stream(net::channel(url, Duration::from_secs(3600)), from, until, Some(rev)).await);
    }
    events.retain(|e| e.0 <= rev);
    events.last().map_or(rev <= 1, |e| e.0 == rev).then_some(events)
}

/// Checks every segment against `truth`; returns the violations found.
pub fn check(segments: &[Segment], truth: &[Event]) -> Vec<String> {
    let mut violations = Vec::new();
    for (i, s) in segments.iter().enumerate() {
        let expected: Vec<&Event> = truth.iter().filter(|e| e.0 >= s.start).take(s.events.len()).collect();
        let got: Vec<&Event> = s.events.iter().collect();
        if got != expected {
            let at = got.iter().zip(&expected).position(|(g, e)| g != e).unwrap_or(got.len().min(expected.len()));
            violations.push(format!(
                "watch segment {i} (member m{}, from revision {}): event {at} is {:?}, the history has {:?}",
                s.member + 1,
                s.start,
                got.get(at).map(|e| (e.0, String::from_utf8_lossy(&e.1).into_owned())),
                expected.get(at).map(|e| (e.0, String::from_utf8_lossy(&e.1).into_owned())),
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(rev: i64) -> Event {
        (rev, b"k0".to_vec(), Some(rev.to_string().into_bytes()))
    }

    #[test]
    fn gaps_duplicates_and_inventions_are_violations() {
        let truth: Vec<Event> = (2..=8).map(ev).collect();
        let good = [
            Segment { member: 0, start: 1, events: (2..=5).map(ev).collect() },
            Segment { member: 1, start: 6, events: (6..=8).map(ev).collect() },
        ];
        assert!(check(&good, &truth).is_empty());
        let gap = [Segment { member: 0, start: 1, events: vec![ev(2), ev(4)] }];
        assert_eq!(check(&gap, &truth).len(), 1);
        let duplicate = [Segment { member: 0, start: 1, events: vec![ev(2), ev(2)] }];
        assert_eq!(check(&duplicate, &truth).len(), 1);
        let invented = [Segment { member: 0, start: 1, events: vec![ev(2), ev(9)] }];
        assert_eq!(check(&invented, &truth).len(), 1);
    }
}
