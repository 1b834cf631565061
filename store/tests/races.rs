//! Races between the store's concurrent parts, on a real multi-threaded runtime with members in
//! this process (`inproc`): snapshots built while entries apply, snapshots installed under
//! readers, clients that go away mid-write or mid-transfer. Each test checks what must hold
//! whatever the interleaving: every member ends at the same revision with the same HashKV, every
//! acknowledged write is on every member, and no client is answered for another's going away.

mod inproc;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inproc::{is_put, put, value, Cluster, DEADLINE};
use keel_proto::etcdserverpb::RangeRequest;
use keel_store::mvcc::kv;
use rand::{Rng, SeedableRng};

/// Writers, some of them impatient (their writes are dropped after a random few hundred
/// microseconds), against a 3-member cluster that snapshots every 20 entries, while one follower
/// is stopped, falls behind the purged log and starts again, catching up through a snapshot
/// installed under readers that range and hash all the while. A patient writer's write is always
/// answered with success; every acknowledged write ends up on every member; the members agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshots_installs_and_cancelled_writes_under_load() {
    let mut c = Cluster::start(
        3,
        &["--snapshot-count", "20", "--experimental-snapshot-catchup-entries", "100", "--max-request-bytes", "4096"],
    )
    .await;
    let leader = c.leader().await;
    let term = c.nodes[leader].member().term();
    let follower = (leader + 1) % 3;
    let stop = Arc::new(AtomicBool::new(false));
    let patient_failures = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let acked = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let cancelled = Arc::new(AtomicU64::new(0));

    let mut writers = Vec::new();
    for w in 0..8u64 {
        let impatient = w < 3;
        // Patient writers write through the leader and the member that keeps running.
        let targets: Vec<_> = [leader, 3 - leader - follower].iter().map(|i| c.nodes[*i].member().clone()).collect();
        let (stop, failures, acked, cancelled) =
            (stop.clone(), patient_failures.clone(), acked.clone(), cancelled.clone());
        writers.push(tokio::spawn(async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(w);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{w}-{i}");
                let member = &targets[rng.random_range(0..targets.len())];
                let write = member.write(put(&key, &i.to_string()));
                if impatient {
                    let patience = Duration::from_micros(rng.random_range(0..800));
                    match tokio::time::timeout(patience, write).await {
                        Ok(Ok(r)) if is_put(&r) => acked.lock().push((key, i)),
                        Ok(_) => {}
                        Err(_) => {
                            cancelled.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                } else {
                    match write.await {
                        Ok(r) if is_put(&r) => acked.lock().push((key, i)),
                        Ok(r) => failures.lock().push(format!("{key}: answered {r:?}")),
                        Err(e) => failures.lock().push(format!("{key}: {e}")),
                    }
                }
                i += 1;
            }
        }));
    }

    // Let the log grow, stop a follower, let the log it needs be purged, start it again.
    let wait_writes = |n: usize| {
        let acked = acked.clone();
        async move {
            let deadline = tokio::time::Instant::now() + DEADLINE;
            while acked.lock().len() < n {
                assert!(tokio::time::Instant::now() < deadline, "writes stalled");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    wait_writes(300).await;
    let gone = c.nodes[follower].member().raft_status().last_log_index;
    c.stop_node(follower).await;
    {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let purged = || c.nodes[leader].member().raft_status().purged_index;
        while purged() <= gone {
            assert!(tokio::time::Instant::now() < deadline, "the leader did not purge past {gone}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let restarted = c.start_node(follower).await;
    let target = c.nodes[leader].member().current_rev();

    // Readers on the restarted member while it catches up (through a snapshot: its log is gone).
    // They stop when the test ends, however it ends.
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Relaxed);
        }
    }
    let reading = Arc::new(AtomicBool::new(true));
    let stop_reading = Stop(reading.clone());
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (m, reading) = (restarted.clone(), reading.clone());
            tokio::task::spawn_blocking(move || {
                let first =
                    RangeRequest { key: vec![0].into(), range_end: vec![0].into(), limit: 100, ..Default::default() };
                let mut reads = 0u64;
                while reading.load(Ordering::Relaxed) {
                    let view = m.read();
                    let r = kv::range(&view, &first).expect("a range on the member catching up");
                    assert_eq!(r.kvs.len() as i64, r.count.min(100));
                    if reads.is_multiple_of(50) {
                        view.hash_kv(0).expect("a hash on the member catching up");
                    }
                    drop(view);
                    reads += 1;
                    // Paced, so that the members' own threads keep running on two cores.
                    std::thread::sleep(Duration::from_millis(1));
                }
                reads
            })
        })
        .collect();
    {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while restarted.current_rev() < target {
            let at = restarted.current_rev();
            assert!(tokio::time::Instant::now() < deadline, "the restarted member is at revision {at} of {target}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let so_far = acked.lock().len();
    wait_writes(so_far + 200).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("a writer panicked");
    }
    drop(stop_reading);
    for r in readers {
        assert!(r.await.expect("a reader failed") > 0);
    }

    // A write is answered for itself: never "stopped" because another client went away. Other
    // failures (a leader lost mid-write) are legitimate only if the leadership changed.
    let failures = patient_failures.lock().clone();
    let stopped: Vec<_> = failures.iter().filter(|f| f.contains("server stopped")).collect();
    assert!(stopped.is_empty(), "patient writers were answered for another's cancellation: {stopped:?}");
    if c.nodes[leader].member().term() == term {
        assert!(failures.is_empty(), "patient writers were not answered with success: {failures:?}");
    }
    assert!(cancelled.load(Ordering::Relaxed) > 0, "no write was cancelled");

    let rev = c.converged().await;
    let members = c.members();
    let hashes: Vec<u32> = members.iter().map(|m| m.read().hash_kv(rev).expect("hash")).collect();
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "HashKV at {rev} differs: {hashes:?}");
    let acked = acked.lock().clone();
    for m in &members {
        for (key, i) in &acked {
            assert_eq!(value(m, key), Some(i.to_string().into_bytes()), "{key} on member {:x}", m.id());
        }
    }
    c.stop().await;
}

/// A leadership transfer whose client goes away while the leader holds (sending nothing, no
/// heartbeats, no campaign) leaves the leader working: the hold ends with the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_move_leader_releases_the_hold() {
    let c = Cluster::start(3, &[]).await;
    let leader = c.nodes[c.leader().await].member().clone();
    let target = c.members().iter().find(|m| m.id() != leader.id()).expect("a follower").id();
    {
        let transfer = leader.move_leader(target);
        tokio::pin!(transfer);
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            tokio::select! {
                r = &mut transfer => panic!("the transfer ended before it could be cancelled: {r:?}"),
                _ = tokio::time::sleep(Duration::from_millis(2)) => {}
            }
            if leader.transferring() {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "the transfer never held");
        }
        // The client goes away: the transfer's future is dropped here.
    }
    assert!(!leader.transferring(), "the leader still holds after its transfer was dropped");
    // And the cluster writes, through the former transfer's leader.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match leader.write(put("after", "1")).await {
            Ok(r) if is_put(&r) => break,
            other => assert!(tokio::time::Instant::now() < deadline, "no write after the transfer: {other:?}"),
        }
    }
    c.converged().await;
    c.stop().await;
}
