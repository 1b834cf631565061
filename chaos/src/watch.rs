//! The watch workload and its checker.
//!
//! A watcher watches the workload's keys from revision 1 on a random member; when its stream
//! breaks (a crash, a partition, a timeout) it resumes from the revision after the last event it
//! got, on another member, as etcd clients do. Each stream is one *segment*: the revision it
//! started from, its options (`prev_kv`, a filter) and the events it delivered, with the response
//! each came in.
//!
//! After the faults, the truth is read from every member: the state at its compacted revision
//! (a range at that revision) and a watch from there up to its current revision; the members must
//! agree (convergence). Every segment must be ordered and unique from its start revision on, and
//! where it overlaps the truth it must be exactly the truth's events from its start on, less what
//! its filter drops: no gaps (reliable), nothing invented, resumable. The events of one revision
//! come in one response (atomic), and each event's `prev_kv` is the key's value just before it
//! in the truth. A stream whose start revision was compacted must be canceled with the compacted
//! revision; the watcher resumes there.

use std::collections::BTreeMap;
use std::time::Duration;

use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::watch_client::WatchClient;
use keel_proto::etcdserverpb::watch_create_request::FilterType;
use keel_proto::etcdserverpb::watch_request::RequestUnion;
use keel_proto::etcdserverpb::{RangeRequest, WatchCreateRequest, WatchRequest};
use keel_proto::mvccpb::event::EventType;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

use crate::net;

/// One event as the checker compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub rev: i64,
    pub key: Vec<u8>,
    /// The new value; `None` for a delete.
    pub value: Option<Vec<u8>>,
    /// The `prev_kv` value the stream delivered (only asked for by some streams).
    pub prev: Option<Vec<u8>>,
    /// Which response of its stream the event came in.
    pub response: usize,
}

impl Event {
    /// What the event changed, without how it was delivered.
    fn change(&self) -> Change<'_> {
        (self.rev, &self.key, self.value.as_deref())
    }
}

/// An event's revision, key and new value.
type Change<'a> = (i64, &'a [u8], Option<&'a [u8]>);

/// The truth after the faults: the compacted revision (1 if none), the values of the workload's
/// keys at that revision, and every event from it up to the current revision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct History {
    pub compacted: i64,
    pub base: BTreeMap<Vec<u8>, Vec<u8>>,
    pub events: Vec<Event>,
}

impl History {
    /// The revision the history reaches.
    pub fn last_rev(&self) -> i64 {
        self.events.last().map_or(self.compacted, |e| e.rev)
    }

    /// The value `key` had just before revision `rev`, if the history reaches back that far:
    /// `Some(None)` if the key did not exist.
    fn value_before(&self, key: &[u8], rev: i64) -> Option<Option<&[u8]>> {
        if rev <= self.compacted {
            return None;
        }
        let last =
            self.events.iter().take_while(|e| e.rev < rev).filter(|e| e.rev > self.compacted && e.key == key).last();
        Some(match last {
            Some(e) => e.value.as_deref(),
            None => self.base.get(key).map(Vec::as_slice),
        })
    }
}

/// What a watch stream asks for besides its start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub prev_kv: bool,
    /// `FilterType::Noput` or `FilterType::Nodelete`.
    pub filter: Option<FilterType>,
}

impl StreamOptions {
    fn keeps(&self, e: &Event) -> bool {
        match self.filter {
            Some(FilterType::Noput) => e.value.is_none(),
            Some(FilterType::Nodelete) => e.value.is_some(),
            None => true,
        }
    }
}

/// What one watch stream delivered.
#[derive(Debug, Clone, Default)]
pub struct Segment {
    pub member: usize,
    pub start: i64,
    pub options: StreamOptions,
    pub events: Vec<Event>,
    /// The compacted revision, if the stream was canceled because its start was compacted.
    pub compacted: Option<i64>,
    /// Progress notifications (bookmarks): how many events had come before each, and its revision.
    pub bookmarks: Vec<(usize, i64)>,
}

/// What one stream delivered before it ended.
#[derive(Default)]
struct Delivered {
    events: Vec<Event>,
    compacted: Option<i64>,
    bookmarks: Vec<(usize, i64)>,
}

/// How often a watcher asks for a progress notification.
const PROGRESS_EVERY: Duration = Duration::from_millis(300);

/// The workload's keys, `k0`, `k1`, … and the leases' `lease/…`: the watched range is `[k, m)`.
pub const KEY_FROM: &[u8] = b"k";
pub const KEY_END: &[u8] = b"m";

fn create(start_revision: i64, options: StreamOptions) -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: KEY_FROM.to_vec().into(),
            range_end: KEY_END.to_vec().into(),
            start_revision,
            prev_kv: options.prev_kv,
            filters: options.filter.map(|f| f as i32).into_iter().collect(),
            ..Default::default()
        })),
    }
}

/// Watches on `channel` from `start` until the stream ends, `until` passes, or (with `upto`) the
/// events reach revision `upto`.
async fn stream(channel: Channel, start: i64, options: StreamOptions, until: Duration, upto: Option<i64>) -> Delivered {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let _ = tx.send(create(start, options)).await;
    let mut got = Delivered::default();
    let Ok(resp) = WatchClient::new(channel).watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await else {
        return got;
    };
    let mut responses = resp.into_inner();
    let mut ask_progress = turmoil::elapsed() + PROGRESS_EVERY;
    let mut response = 0;
    loop {
        let left = until.saturating_sub(turmoil::elapsed());
        if left.is_zero() || upto.is_some_and(|u| got.events.last().is_some_and(|e| e.rev >= u)) {
            return got;
        }
        let wait = left.min(ask_progress.saturating_sub(turmoil::elapsed()));
        let next = match tokio::time::timeout(wait, responses.next()).await {
            Err(_) if turmoil::elapsed() < until => {
                // Ask where the stream is (etcd's progress request); the answer is a bookmark.
                let progress = WatchRequest { request_union: Some(RequestUnion::ProgressRequest(Default::default())) };
                let _ = tx.try_send(progress);
                ask_progress = turmoil::elapsed() + PROGRESS_EVERY;
                continue;
            }
            next => next,
        };
        response += 1;
        match next {
            Ok(Some(Ok(r))) if r.canceled => {
                got.compacted = (r.compact_revision > 0).then_some(r.compact_revision);
                return got;
            }
            Ok(Some(Ok(r))) if r.watch_id == -1 && r.events.is_empty() => {
                if let Some(h) = r.header {
                    got.bookmarks.push((got.events.len(), h.revision));
                }
            }
            Ok(Some(Ok(r))) => {
                for e in r.events {
                    let Some(kv) = e.kv else { continue };
                    got.events.push(Event {
                        rev: kv.mod_revision,
                        key: kv.key.to_vec(),
                        value: (e.r#type != EventType::Delete as i32).then(|| kv.value.to_vec()),
                        prev: e.prev_kv.map(|p| p.value.to_vec()),
                        response,
                    });
                }
            }
            _ => return got,
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
        let filter = match rng.random_range(0..8) {
            0 => Some(FilterType::Noput),
            1 => Some(FilterType::Nodelete),
            _ => None,
        };
        let options = StreamOptions { prev_kv: rng.random_bool(0.5), filter };
        let channel = net::channel(&urls[member], Duration::from_secs(3600));
        let Delivered { events, compacted, bookmarks } = stream(channel, start, options, until, None).await;
        next = compacted.or(events.last().map(|last| last.rev + 1)).unwrap_or(start);
        segments.push(Segment { member, start, options, events, compacted, bookmarks });
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    segments
}

/// A member's history of the workload's keys (see [`History`]); `None` if the member does not
/// answer within `until`. The history is complete when its events reach the member's revision
/// (the workloads write only those keys, and every revision changes one).
pub async fn history(url: &str, until: Duration) -> Option<History> {
    let mut kv = KvClient::new(net::channel(url, Duration::from_secs(3)));
    let range = |revision| RangeRequest {
        key: KEY_FROM.to_vec().into(),
        range_end: KEY_END.to_vec().into(),
        serializable: true,
        revision,
        ..Default::default()
    };
    let rev = kv.range(range(0)).await.ok()?.into_inner().header?.revision;
    let (mut from, mut events) = (1, Vec::<Event>::new());
    while events.last().map_or(rev > 1, |e| e.rev < rev) && turmoil::elapsed() < until {
        let next = events.last().map_or(from, |e| e.rev + 1);
        let options = StreamOptions::default();
        let got = stream(net::channel(url, Duration::from_secs(3600)), next, options, until, Some(rev)).await;
        if let Some(compacted) = got.compacted {
            (from, events) = (compacted, Vec::new());
        }
        events.extend(got.events);
    }
    events.retain(|e| e.rev <= rev);
    if !events.last().map_or(rev <= 1, |e| e.rev == rev) {
        return None;
    }
    // The state at the compacted revision.
    let base = if from > 1 { kv.range(range(from)).await.ok()?.into_inner().kvs } else { Vec::new() };
    for e in &mut events {
        e.response = 0;
    }
    let base = base.into_iter().map(|kv| (kv.key.to_vec(), kv.value.to_vec())).collect();
    Some(History { compacted: from, base, events })
}

/// Checks every segment against the `truth`; returns the violations found.
pub fn check(segments: &[Segment], truth: &History) -> Vec<String> {
    let compacted = truth.compacted;
    let mut violations = Vec::new();
    for (i, s) in segments.iter().enumerate() {
        let name = format!("watch segment {i} (member m{}, from revision {}, {:?})", s.member + 1, s.start, s.options);
        if let Some(c) = s.compacted {
            if c <= s.start || c > compacted {
                violations
                    .push(format!("{name}: canceled as compacted at {c}, the history is compacted at {compacted}"));
            }
        }
        // Ordered and unique: revisions never go back, no key twice in one revision; a revision's
        // events in one response.
        if let Some(w) = s.events.windows(2).find(|w| w[1].rev < w[0].rev) {
            violations.push(format!("{name}: revision {} after {}", w[1].rev, w[0].rev));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(e) = s.events.iter().find(|e| !seen.insert((e.rev, &e.key))) {
            violations.push(format!("{name}: {} twice at revision {}", String::from_utf8_lossy(&e.key), e.rev));
        }
        if let Some(w) = s.events.windows(2).find(|w| w[1].rev == w[0].rev && w[1].response != w[0].response) {
            violations.push(format!("{name}: the events of revision {} came in two responses", w[0].rev));
        }
        if s.events.first().is_some_and(|e| e.rev < s.start) {
            violations.push(format!("{name}: event at revision {} before its start", s.events[0].rev));
        }
        // Where it overlaps the history: exactly the history from its start on, filtered.
        let got: Vec<_> = s.events.iter().filter(|e| e.rev >= compacted).map(Event::change).collect();
        let from = s.start.max(compacted);
        let expected: Vec<_> = truth
            .events
            .iter()
            .filter(|e| e.rev >= from && s.options.keeps(e))
            .take(got.len())
            .map(Event::change)
            .collect();
        if got != expected {
            let at = got.iter().zip(&expected).position(|(g, e)| g != e).unwrap_or(got.len().min(expected.len()));
            let show = |e: Option<&Change>| e.map(|e| (e.0, String::from_utf8_lossy(e.1).into_owned()));
            violations.push(format!(
                "{name}: event {at} is {:?}, the history has {:?}",
                show(got.get(at)),
                show(expected.get(at))
            ));
        }
        // Bookmarks: a progress notification at revision R comes after every event up to R (from
        // the start on, less the filtered ones) and before any event after R; R is never behind
        // an event already delivered.
        for (i, &(n, at)) in s.bookmarks.iter().enumerate() {
            let before = s.events[..n].iter().filter(|e| e.rev >= compacted).count();
            let due = truth.events.iter().filter(|e| e.rev >= from && e.rev <= at && s.options.keeps(e)).count();
            let behind = s.events[..n].last().is_some_and(|e| e.rev > at);
            if at > truth.last_rev() || due > before || behind || s.events[n..].iter().any(|e| e.rev <= at) {
                violations.push(format!(
                    "{name}: bookmark {i} at revision {at} after {before} events; the history has {due} up to it (and reaches {})",
                    truth.last_rev()
                ));
            }
        }
        // prev_kv: the key's value just before the event, where the history reaches back.
        for e in s.events.iter().filter(|_| s.options.prev_kv) {
            if let Some(before) = truth.value_before(&e.key, e.rev) {
                if e.prev.as_deref() != before {
                    violations.push(format!(
                        "{name}: prev_kv of {} at revision {} is {:?}, the history has {:?}",
                        String::from_utf8_lossy(&e.key),
                        e.rev,
                        e.prev.as_deref().map(String::from_utf8_lossy),
                        before.map(String::from_utf8_lossy)
                    ));
                }
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(rev: i64) -> Event {
        Event {
            rev,
            key: b"k0".to_vec(),
            value: Some(rev.to_string().into_bytes()),
            prev: None,
            response: rev as usize,
        }
    }

    fn seg(start: i64, events: Vec<Event>) -> Segment {
        Segment { start, events, ..Default::default() }
    }

    fn truth(compacted: i64, events: Vec<Event>) -> History {
        History { compacted, base: BTreeMap::new(), events }
    }

    #[test]
    fn gaps_duplicates_and_inventions_are_violations() {
        let t = truth(1, (2..=8).map(ev).collect());
        let good = [seg(1, (2..=5).map(ev).collect()), seg(6, (6..=8).map(ev).collect()), seg(20, vec![])];
        assert!(check(&good, &t).is_empty());
        assert_eq!(check(&[seg(1, vec![ev(2), ev(4)])], &t).len(), 1, "gap");
        assert!(!check(&[seg(1, vec![ev(2), ev(2)])], &t).is_empty(), "duplicate");
        assert_eq!(check(&[seg(1, vec![ev(2), ev(9)])], &t).len(), 1, "invented");
        assert!(!check(&[seg(6, vec![ev(3)])], &t).is_empty(), "older than the start");
        // Below the history's compaction only order is checked; a compacted start is canceled.
        let c = truth(5, (5..=8).map(ev).collect());
        let canceled = Segment { member: 1, start: 2, compacted: Some(5), ..Default::default() };
        assert!(check(&[seg(1, vec![ev(2), ev(3), ev(5), ev(6)]), canceled], &c).is_empty());
        assert_eq!(check(&[seg(1, vec![ev(2), ev(6)])], &c).len(), 1, "gap at the compaction");
    }

    #[test]
    fn bookmarks_must_follow_every_event_up_to_them() {
        let t = truth(1, (2..=6).map(ev).collect());
        let marked = |bookmarks: Vec<(usize, i64)>| Segment {
            start: 1,
            events: (2..=6).map(ev).collect(),
            bookmarks,
            ..Default::default()
        };
        assert!(check(&[marked(vec![(0, 1), (2, 3), (5, 6)])], &t).is_empty());
        assert_eq!(check(&[marked(vec![(1, 3)])], &t).len(), 1, "a bookmark ahead of an event");
        assert_eq!(check(&[marked(vec![(3, 3)])], &t).len(), 1, "a bookmark behind a delivered event");
        assert_eq!(check(&[marked(vec![(5, 9)])], &t).len(), 1, "a bookmark beyond the history");
    }

    #[test]
    fn filters_prev_kv_and_atomicity_are_checked() {
        let del = |rev| Event { value: None, ..ev(rev) };
        let t = truth(1, vec![ev(2), ev(3), del(4), ev(5)]);
        let noput = StreamOptions { filter: Some(FilterType::Noput), ..Default::default() };
        let only_deletes = Segment { start: 1, options: noput, events: vec![del(4)], ..Default::default() };
        assert!(check(std::slice::from_ref(&only_deletes), &t).is_empty());
        let with_put = Segment { events: vec![ev(2)], ..only_deletes };
        assert_eq!(check(&[with_put], &t).len(), 1, "a filtered put delivered");

        let prev = StreamOptions { prev_kv: true, ..Default::default() };
        let with_prev = |p: [Option<&str>; 4]| {
            let events =
                t.events.iter().zip(p).map(|(e, p)| Event { prev: p.map(|p| p.into()), ..e.clone() }).collect();
            Segment { start: 1, options: prev, events, ..Default::default() }
        };
        assert!(check(&[with_prev([None, Some("2"), Some("3"), None])], &t).is_empty());
        assert_eq!(check(&[with_prev([None, Some("2"), Some("2"), None])], &t).len(), 1, "a wrong prev_kv");

        let two = |response| Event { key: b"k1".to_vec(), response, ..ev(3) };
        let atomic = seg(3, vec![ev(3), two(3)]);
        let t2 = truth(1, vec![ev(3), two(0)]);
        assert!(check(&[atomic], &t2).is_empty());
        assert_eq!(check(&[seg(3, vec![ev(3), two(4)])], &t2).len(), 1, "a revision split");
    }
}
