//! Leases end to end over gRPC: keep-alives hold a lease past its TTL, expiry revokes it and
//! deletes its keys at one revision (watchers see the deletes together), leases and their keys
//! survive a crash, and — keel only — remaining TTLs survive a graceful restart (etcd 3.4 resets
//! them unless `--experimental-enable-lease-checkpoint` is set).
//!
//! Tests that hold for etcd too run against [`Kind::under_test`] (`KEEL_DIFF_AGAINST=etcd` runs
//! them against etcd). Run: `cargo test --workspace --test lease -- --nocapture`.

mod common;

use std::time::{Duration, Instant};

use common::{Kind, Server};
use keel_proto::etcdserverpb::lease_client::LeaseClient;
use keel_proto::etcdserverpb::watch_client::WatchClient;
use keel_proto::etcdserverpb::watch_request::RequestUnion;
use keel_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseTimeToLiveRequest, PutRequest, RangeRequest, WatchCreateRequest,
    WatchRequest, WatchResponse,
};
use keel_proto::mvccpb::event::EventType;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

const DEADLINE: Duration = Duration::from_secs(30);

async fn grant(c: &mut LeaseClient<Channel>, ttl: i64) -> i64 {
    c.lease_grant(LeaseGrantRequest { ttl, id: 0 }).await.expect("grant").into_inner().id
}

async fn put(s: &Server, key: &str, lease: i64) {
    let p = PutRequest { key: key.as_bytes().to_vec().into(), value: "v".into(), lease, ..Default::default() };
    s.kv().await.put(p).await.expect("put");
}

async fn count(s: &Server, prefix: &str) -> i64 {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().unwrap() += 1;
    let r = RangeRequest { key: prefix.as_bytes().to_vec().into(), range_end: end.into(), ..Default::default() };
    s.kv().await.range(r).await.expect("range").into_inner().count
}

async fn ttl(c: &mut LeaseClient<Channel>, id: i64) -> (i64, i64, usize) {
    let r = c.lease_time_to_live(LeaseTimeToLiveRequest { id, keys: true }).await.expect("ttl").into_inner();
    (r.ttl, r.granted_ttl, r.keys.len())
}

/// A watch on `prefix` from the next revision; returns the response stream after `created`.
async fn watch(s: &Server, prefix: &str) -> (mpsc::Sender<WatchRequest>, tonic::Streaming<WatchResponse>) {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().unwrap() += 1;
    let (tx, rx) = mpsc::channel(4);
    let create =
        WatchCreateRequest { key: prefix.as_bytes().to_vec().into(), range_end: end.into(), ..Default::default() };
    tx.send(WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) }).await.unwrap();
    let mut stream = WatchClient::new(s.channel().await).watch(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let created = stream.next().await.expect("created").expect("created");
    assert!(created.created);
    (tx, stream)
}

#[tokio::test]
async fn keepalive_holds_and_expiry_deletes_keys_at_one_revision() {
    let server = Server::start(Kind::under_test()).await;
    let mut leases = LeaseClient::new(server.channel().await);
    let id = grant(&mut leases, 3).await;
    put(&server, "exp/a", id).await;
    put(&server, "exp/b", id).await;
    let (_watch_tx, mut events) = watch(&server, "exp/").await;

    // Keep it alive for well over its TTL.
    let (ka_tx, ka_rx) = mpsc::channel(4);
    let mut answers = leases.lease_keep_alive(ReceiverStream::new(ka_rx)).await.unwrap().into_inner();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        ka_tx.send(LeaseKeepAliveRequest { id }).await.unwrap();
        let a = answers.next().await.expect("keep-alive answer").expect("keep-alive");
        assert_eq!((a.id, a.ttl), (id, 3), "keep-alive answer");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert_eq!(count(&server, "exp/").await, 2, "a kept-alive lease must not expire");
    drop(ka_tx);

    // Then let it expire: both keys go at one revision, seen by the watcher in one response.
    let deadline = Instant::now() + DEADLINE;
    while count(&server, "exp/").await != 0 {
        assert!(Instant::now() < deadline, "lease did not expire");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = tokio::time::timeout(DEADLINE, events.next()).await.expect("delete events").unwrap().unwrap();
    let kinds: Vec<(i32, &[u8], i64)> = r
        .events
        .iter()
        .map(|e| (e.r#type, e.kv.as_ref().unwrap().key.as_ref(), e.kv.as_ref().unwrap().mod_revision))
        .collect();
    let rev = r.events[0].kv.as_ref().unwrap().mod_revision;
    let del = EventType::Delete as i32;
    assert_eq!(kinds, vec![(del, &b"exp/a"[..], rev), (del, &b"exp/b"[..], rev)]);
    assert_eq!(ttl(&mut leases, id).await.0, -1, "an expired lease is gone");
}

#[tokio::test]
async fn leases_and_their_keys_survive_a_crash() {
    let mut server = Server::start(Kind::under_test()).await;
    let mut leases = LeaseClient::new(server.channel().await);
    let id = grant(&mut leases, 600).await;
    put(&server, "crash/a", id).await;
    server.restart().await;
    let mut leases = LeaseClient::new(server.channel().await);
    let (left, granted, keys) = ttl(&mut leases, id).await;
    assert_eq!((granted, keys), (600, 1));
    assert!((0..=600).contains(&left), "remaining {left}");
    let other = grant(&mut leases, 600).await;
    assert_ne!(other, id, "a fresh lease id after restart");
}

#[tokio::test]
async fn remaining_ttl_survives_a_graceful_restart() {
    // keel checkpoints remaining TTLs when it shuts down; etcd 3.4 by default does not.
    let mut server = Server::start(Kind::Keel).await;
    let mut leases = LeaseClient::new(server.channel().await);
    let id = grant(&mut leases, 600).await;
    put(&server, "ckpt/a", id).await;
    let deadline = Instant::now() + DEADLINE;
    while ttl(&mut leases, id).await.0 > 597 {
        assert!(Instant::now() < deadline, "remaining TTL does not go down");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Open streams must not keep the member from stopping.
    let (_watch_tx, _events) = watch(&server, "ckpt/").await;
    let (_ka_tx, ka_rx) = mpsc::channel::<LeaseKeepAliveRequest>(1);
    let _answers = leases.lease_keep_alive(ReceiverStream::new(ka_rx)).await.unwrap();
    server.stop().await;
    server.respawn().await;
    let mut leases = LeaseClient::new(server.channel().await);
    let (left, granted, keys) = ttl(&mut leases, id).await;
    assert_eq!((granted, keys), (600, 1));
    assert!(left <= 597, "remaining TTL was reset by the restart: {left}");
}
