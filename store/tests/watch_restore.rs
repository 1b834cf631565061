//! Regressions after etcd-io/etcd#15271 and #17247, on members in this process (`inproc`): a
//! member is cut off while a client watches on it, falls behind its peers' purged logs, and on
//! healing catches up by installing a snapshot under that live watcher. The watcher must go on
//! from the first revision it has not seen: it receives exactly the events a watcher on a member
//! that never installed a snapshot receives, each revision once and in order.
//!
//! keel-chaos cannot show these: its simulated members install snapshots only before they serve
//! (see `keel_store::plant::IN_PROCESS`). Each regression also runs with its own bug planted, on
//! every thread of the test's runtime, and must then fail.

mod inproc;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use inproc::{is_put, put, Cluster, DEADLINE};
use keel_proto::etcdserverpb::{WatchCreateRequest, WatchResponse};
use keel_store::node::Member;
use parking_lot::Mutex;
use prost::Message;

/// The revisions of the events a watcher on `member` receives for keys `k...`, from `start` on.
/// The watch ends when the returned handle is dropped with the runtime.
fn watch(member: &Arc<Member>, start: i64) -> Arc<Mutex<Vec<i64>>> {
    let hub = member.watches().clone();
    let (stream, _, mut responses) = hub.open_stream();
    hub.create(
        stream,
        &WatchCreateRequest {
            key: b"k".to_vec().into(),
            range_end: b"l".to_vec().into(),
            start_revision: start,
            ..Default::default()
        },
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = seen.clone();
    tokio::spawn(async move {
        while let Some(wire) = responses.next().await {
            let r = WatchResponse::decode(wire.to_vec().as_slice()).expect("a watch response");
            into.lock().extend(r.events.iter().filter_map(|e| e.kv.as_ref().map(|kv| kv.mod_revision)));
        }
    });
    seen
}

/// Puts `k<i>` through `member` until one is acknowledged (a write may meet an election).
async fn write(member: &Member, i: u64) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match member.write(put(&format!("k{i}"), "v")).await {
            Ok(r) if is_put(&r) => return,
            other => assert!(tokio::time::Instant::now() < deadline, "write k{i} never acknowledged: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `seen` reaches revision `rev`.
async fn reaches(seen: &Mutex<Vec<i64>>, rev: i64, who: &str) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while seen.lock().last().is_none_or(|last| *last < rev) {
        let last = seen.lock().last().copied();
        assert!(tokio::time::Instant::now() < deadline, "the watcher on {who} stopped at {last:?}, short of {rev}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The scenario: `Err` with what the cut-off member's watcher received wrongly.
async fn snapshot_installed_under_a_watcher() -> Result<(), String> {
    let c = Cluster::start(3, &["--snapshot-count", "20", "--experimental-snapshot-catchup-entries", "20"]).await;
    let leader = c.leader().await;
    let (steady, cut) = (c.nodes[leader].member().clone(), (leader + 1) % 3);
    let behind = c.nodes[cut].member().clone();
    let start = steady.current_rev() + 1;
    let (reference, watched) = (watch(&steady, start), watch(&behind, start));

    // The watcher on the member to be cut off gets everything so far: it is synced when the cut
    // comes.
    let mut i = 0;
    for _ in 0..30 {
        write(&steady, i).await;
        i += 1;
    }
    reaches(&watched, steady.current_rev(), "the member before its cut").await;

    // Cut it off, and write until every other member has purged the log it would need.
    let gone = behind.raft_status().last_log_index;
    c.cut(cut);
    let others: Vec<_> = c.members().into_iter().filter(|m| m.id() != behind.id()).collect();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while others.iter().any(|m| m.raft_status().purged_index <= gone) {
        assert!(tokio::time::Instant::now() < deadline, "the members kept their logs past {gone}");
        write(&steady, i).await;
        i += 1;
    }

    // Heal: it installs a snapshot, under its watcher. Then a few writes more.
    c.heal(cut);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while behind.raft_status().purged_index <= gone {
        assert!(tokio::time::Instant::now() < deadline, "the cut-off member never installed a snapshot");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for _ in 0..10 {
        write(&steady, i).await;
        i += 1;
    }
    let end = c.converged().await;
    reaches(&reference, end, "the steady member").await;
    // The watcher on the member that installed may fail to reach `end` only by a bug; a duplicate
    // or an old event shows in the comparison, a stall in `reaches`.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while watched.lock().last().is_none_or(|last| *last < end) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (want, got) = (reference.lock().clone(), watched.lock().clone());
    c.stop().await;
    if want != got {
        let first = want.iter().zip(&got).position(|(a, b)| a != b).unwrap_or(want.len().min(got.len()));
        let at = first.saturating_sub(2);
        return Err(format!(
            "the watcher on the member that installed a snapshot received {} revisions, not the {} of \
             the steady member's; from index {at}: {:?} instead of {:?}",
            got.len(),
            want.len(),
            &got[at..(at + 6).min(got.len())],
            &want[at..(at + 6).min(want.len())],
        ));
    }
    Ok(())
}

/// Runs the scenario on a 4-thread runtime with `plant` planted on each of its threads.
fn run(plant: Option<&'static str>) -> Result<(), String> {
    assert!(keel_store::plant::set(plant));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .on_thread_start(move || {
            keel_store::plant::set(plant);
        })
        .build()
        .expect("a runtime");
    let r = rt.block_on(snapshot_installed_under_a_watcher());
    rt.shutdown_timeout(DEADLINE);
    keel_store::plant::set(None);
    r
}

/// etcd-io/etcd#15271: a watch going back in time when a member that was cut off downloads a
/// snapshot from the leader (etcd moved synced watchers to unsynced with a start revision that
/// staying synced had never advanced). Planted: `restore-resumes-stale`.
#[test]
fn etcd_15271_watch_back_in_time_after_snapshot_install() {
    run(None).unwrap_or_else(|e| panic!("{e}"));
    let caught = run(Some("restore-resumes-stale")).expect_err("the scenario missed the planted restore-resumes-stale");
    eprintln!("restore-resumes-stale caught: {caught}");
}

/// etcd-io/etcd#17247: a watch event delivered twice around a snapshot download. Planted:
/// `restore-repeats-last` (the resume point is the last revision sent, not the one after it).
#[test]
fn etcd_17247_duplicated_watch_event_after_snapshot_install() {
    run(None).unwrap_or_else(|e| panic!("{e}"));
    let caught = run(Some("restore-repeats-last")).expect_err("the scenario missed the planted restore-repeats-last");
    eprintln!("restore-repeats-last caught: {caught}");
}
