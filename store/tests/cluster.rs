//! A real 3-member cluster of processes on loopback, started with etcd's bootstrap flags: writes
//! through every member (followers forward to the leader), the leader SIGKILLed mid-load, writes
//! resuming on the majority, the killed member restarting and catching up, and at the end every
//! acknowledged write on every member, with identical contents and HashKV at the same revision.
//!
//! Runs against [`Kind::under_test`] (`KEEL_DIFF_AGAINST=etcd` runs it against etcd).
//! Run: `cargo test --workspace --test cluster -- --nocapture`.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{start_cluster, Kind, Server};
use keel_proto::etcdserverpb::kv_client::KvClient;
use keel_proto::etcdserverpb::{HashKvRequest, PutRequest, RangeRequest, StatusRequest};
use tonic::transport::Channel;

const DEADLINE: Duration = Duration::from_secs(60);

/// Puts `key`, retrying while the cluster has no leader (etcd's `Unavailable`), until the
/// deadline. Returns whether the write was acknowledged.
async fn put_retrying(kv: &mut KvClient<Channel>, key: String) -> bool {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let p = PutRequest { key: key.clone().into_bytes().into(), value: "v".into(), ..Default::default() };
        match kv.put(p).await {
            Ok(_) => return true,
            Err(s) if s.code() == tonic::Code::Unavailable && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // An ambiguous failure (e.g. the member died mid-request): not acknowledged.
            Err(_) => return false,
        }
    }
}

/// Every key and its mod revision, read locally (serializable) from one member.
async fn contents(m: &Server) -> (i64, BTreeMap<Vec<u8>, i64>) {
    let r = RangeRequest { key: vec![0].into(), range_end: vec![0].into(), serializable: true, ..Default::default() };
    let resp = m.kv().await.range(r).await.expect("range").into_inner();
    let rev = resp.header.map(|h| h.revision).unwrap_or_default();
    (rev, resp.kvs.into_iter().map(|kv| (kv.key.to_vec(), kv.mod_revision)).collect())
}

async fn leader_index(members: &[Server]) -> usize {
    let deadline = Instant::now() + DEADLINE;
    loop {
        for (i, m) in members.iter().enumerate().filter(|(_, m)| m.is_running()) {
            if let Ok(s) = m.maintenance().await.status(StatusRequest {}).await {
                let s = s.into_inner();
                if s.leader != 0 && s.header.map(|h| h.member_id) == Some(s.leader) {
                    return i;
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn three_members_replicate_and_survive_leader_loss() {
    let mut members = start_cluster(Kind::under_test(), 3).await;
    let mut acked = Vec::new();

    // Writes through every member.
    for (i, m) in members.iter().enumerate() {
        let mut kv = m.kv().await;
        for j in 0..20 {
            let key = format!("before/m{i}/{j:03}");
            assert!(put_retrying(&mut kv, key.clone()).await, "write {key} through {}", m.name());
            acked.push(key);
        }
    }

    // Kill the leader while the followers keep writing.
    let leader = leader_index(&members).await;
    let survivors: Vec<usize> = (0..members.len()).filter(|i| *i != leader).collect();
    let mut writers = Vec::new();
    for &i in &survivors {
        let mut kv = members[i].kv().await;
        writers.push(tokio::spawn(async move {
            let mut ok = Vec::new();
            for j in 0..60 {
                let key = format!("during/m{i}/{j:03}");
                if put_retrying(&mut kv, key.clone()).await {
                    ok.push(key);
                }
            }
            ok
        }));
    }
    members[leader].kill9();
    for w in writers {
        acked.extend(w.await.expect("writer"));
    }
    // The majority elected a new leader and took writes.
    assert!(acked.iter().filter(|k| k.starts_with("during/")).count() >= 100, "writes did not resume");

    // The killed member comes back and catches up.
    members[leader].respawn().await;
    let mut kv = members[leader].kv().await;
    assert!(put_retrying(&mut kv, "after/restart".into()).await, "write through the restarted member");
    acked.push("after/restart".into());

    let deadline = Instant::now() + DEADLINE;
    let reference = loop {
        let mut all = Vec::new();
        for m in &members {
            all.push(contents(m).await);
        }
        if all.windows(2).all(|w| w[0] == w[1]) {
            break all.pop().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "members did not converge: revisions {:?}",
            all.iter().map(|a| a.0).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for key in &acked {
        assert!(reference.1.contains_key(key.as_bytes()), "acknowledged write {key} is missing");
    }
    // HashKV, the divergence detector, agrees at the same revision on every member.
    let mut hashes = Vec::new();
    for m in &members {
        let h = m.maintenance().await.hash_kv(HashKvRequest { revision: reference.0 }).await.expect("hashkv");
        hashes.push(h.into_inner().hash);
    }
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "HashKV differs between members: {hashes:?}");
}

#[tokio::test]
async fn leases_work_through_followers_and_survive_leader_loss() {
    use keel_proto::etcdserverpb::lease_client::LeaseClient;
    use keel_proto::etcdserverpb::{LeaseGrantRequest, LeaseKeepAliveRequest, LeaseTimeToLiveRequest};
    use tokio_stream::StreamExt;

    let mut members = start_cluster(Kind::under_test(), 3).await;
    let leader = leader_index(&members).await;
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let (f1, f2) = (followers[0], followers[1]);

    let mut lease = LeaseClient::new(members[f1].channel().await);
    let id =
        lease.lease_grant(LeaseGrantRequest { ttl: 20, id: 0 }).await.expect("grant on a follower").into_inner().id;
    let p = PutRequest { key: "leased".into(), value: "v".into(), lease: id, ..Default::default() };
    members[f2].kv().await.put(p).await.expect("put with the lease on another follower");

    // Keep-alive and time-to-live answered through a follower.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(LeaseKeepAliveRequest { id }).await.unwrap();
    let mut answers =
        lease.lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("keep-alive").into_inner();
    let a = answers.next().await.expect("a keep-alive answer").expect("keep-alive");
    assert_eq!((a.id, a.ttl), (id, 20));
    let t = lease.lease_time_to_live(LeaseTimeToLiveRequest { id, keys: true }).await.expect("ttl").into_inner();
    assert_eq!((t.granted_ttl, t.keys.len()), (20, 1));
    assert!((1..=20).contains(&t.ttl), "remaining {}", t.ttl);
    drop((tx, answers));

    // The leader dies; the new leader keeps the lease (nothing expires because of an election).
    members[leader].kill9();
    let mut lease = LeaseClient::new(members[f2].channel().await);
    let deadline = Instant::now() + DEADLINE;
    let t = loop {
        match lease.lease_time_to_live(LeaseTimeToLiveRequest { id, keys: true }).await {
            Ok(t) => break t.into_inner(),
            Err(s) if s.code() == tonic::Code::Unavailable && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(s) => panic!("time-to-live after the leader died: {s}"),
        }
    };
    assert_eq!((t.granted_ttl, t.keys.len()), (20, 1), "the lease survived the election");
    assert!(t.ttl > 0, "remaining {}", t.ttl);
}
