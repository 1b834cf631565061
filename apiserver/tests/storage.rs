//! The storage layer against both stores it must run on: a keel member in this process, and a
//! real etcd (3.4 in CI). Both must give the same answers.

use std::sync::Arc;
use std::time::Duration;

mod common;

use futures::StreamExt;
use keel_apiserver::storage::compact::Round;
use keel_apiserver::storage::watch::Change;
use keel_apiserver::storage::{keys, At, ListOptions, Storage, StorageError, Stored};
use keel_store::config::Config;
use keel_store::engine::{MemEngine, SyncMode};
use keel_store::node::Member;
use keel_store::raft::network::Dialer;
use keel_store::server;
use tonic::transport::{Channel, Endpoint};

const DEADLINE: Duration = Duration::from_secs(30);

/// A channel to `url` once the store there answers.
async fn connect(url: &str) -> Channel {
    let endpoint = Endpoint::from_shared(url.to_string()).unwrap().timeout(Duration::from_secs(10));
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Ok(channel) = endpoint.connect().await {
            if Storage::new(channel.clone()).get("/probe").await.is_ok() {
                return channel;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no store answered at {url}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A keel member in this process, on the in-memory engine, serving its client API on a port of
/// its own.
async fn keel() -> (Storage, Arc<Member>) {
    let peer = format!("http://127.0.0.1:{}", common::port());
    let cfg = Config::parse_from([
        "keel",
        "--name",
        "a",
        "--initial-cluster",
        &format!("a={peer}"),
        "--initial-advertise-peer-urls",
        &peer,
    ])
    .expect("flags");
    let member = Member::start_with(&cfg, Arc::new(MemEngine::new()), Dialer::default(), SyncMode::Background)
        .await
        .expect("a member");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = server::client_router(server::Edge::new(member.clone()));
    tokio::spawn(server::serve_with(listener, router, std::future::pending()));
    (Storage::new(connect(&url).await), member)
}

async fn etcd() -> (Storage, common::Etcd) {
    let etcd = common::etcd();
    (Storage::new(connect(&etcd.url).await), etcd)
}

fn obj(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Everything the apiserver relies on, in one pass.
async fn semantics(s: &Storage) {
    let pods = keys::collection("/registry", "pods", None);
    let key = |ns: &str, name: &str| keys::object("/registry", "pods", Some(ns), name);

    // Create, and create again.
    let rev = s.create(&key("a", "p0"), obj("v0"), 0).await.unwrap();
    assert!(matches!(s.create(&key("a", "p0"), obj("again"), 0).await, Err(StorageError::AlreadyExists)));
    assert_eq!(s.get(&key("a", "p0")).await.unwrap(), Some(Stored { value: obj("v0"), rev }));

    // Updates only at the expected resourceVersion; a stale one sees what is there.
    match s.update(&key("a", "p0"), obj("v1"), rev - 1).await {
        Err(StorageError::Conflict { current: Some(c) }) => assert_eq!(c, Stored { value: obj("v0"), rev }),
        other => panic!("a stale update: {other:?}"),
    }
    let rev1 = s.update(&key("a", "p0"), obj("v1"), rev).await.unwrap();
    assert!(rev1 > rev);
    assert!(matches!(s.update(&key("a", "nothing"), obj("x"), 5).await, Err(StorageError::NotFound)));

    // Deletes: stale, right, gone.
    assert!(matches!(s.delete(&key("a", "p0"), Some(rev)).await, Err(StorageError::Conflict { .. })));
    let gone = s.delete(&key("a", "p0"), Some(rev1)).await.unwrap();
    assert_eq!(gone.value, obj("v1"));
    assert!(gone.rev > rev1, "a deletion has a revision of its own");
    assert_eq!(s.get(&key("a", "p0")).await.unwrap(), None);
    assert!(matches!(s.delete(&key("a", "p0"), None).await, Err(StorageError::NotFound)));

    // Lists in pages, every page at the first one's revision.
    for i in 1..=5 {
        s.create(&key("a", &format!("p{i}")), obj(&format!("a{i}")), 0).await.unwrap();
    }
    for i in 1..=2 {
        s.create(&key("b", &format!("p{i}")), obj(&format!("b{i}")), 0).await.unwrap();
    }
    let first = s.list(&pods, &ListOptions { limit: 2, continue_token: None, at: At::Latest }).await.unwrap();
    assert_eq!(first.items.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), [key("a", "p1"), key("a", "p2")]);
    assert_eq!(first.remaining, Some(5));
    // A write between pages is not in them.
    s.create(&key("a", "p3x"), obj("late"), 0).await.unwrap();
    let mut seen: Vec<String> = first.items.iter().map(|(k, _)| k.clone()).collect();
    let mut token = first.continue_token.clone();
    let mut pages = 1;
    while let Some(t) = token {
        let page = s.list(&pods, &ListOptions { limit: 2, continue_token: Some(t), at: At::Latest }).await.unwrap();
        assert_eq!(page.rev, first.rev, "page {pages} reads at the list's revision");
        seen.extend(page.items.iter().map(|(k, _)| k.clone()));
        token = page.continue_token;
        pages += 1;
    }
    let expected: Vec<String> =
        ["a/p1", "a/p2", "a/p3", "a/p4", "a/p5", "b/p1", "b/p2"].iter().map(|k| format!("{pods}{k}")).collect();
    assert_eq!((seen, pages), (expected, 4));
    let in_b = keys::collection("/registry", "pods", Some("b"));
    let b = s.list(&in_b, &ListOptions { limit: 0, continue_token: None, at: At::Latest }).await.unwrap();
    assert_eq!((b.items.len(), b.continue_token, b.remaining), (2, None, None));

    // An exact revision reads the past.
    let past = s.list(&pods, &ListOptions { limit: 0, continue_token: None, at: At::Exact(first.rev) }).await.unwrap();
    assert_eq!(past.items.len(), 7);
    let bad = s.list(&pods, &ListOptions { limit: 1, continue_token: Some("!".into()), at: At::Latest }).await;
    assert!(matches!(bad, Err(StorageError::InvalidContinue(m)) if m.starts_with("continue key is not valid")));

    // A watch from a resourceVersion: what happened after it, in order, deletions with the
    // object as it was.
    let from = s.get(&key("a", "p5")).await.unwrap().unwrap().rev;
    let mut changes = Box::pin(s.watch(&pods, from).await.unwrap());
    let x = key("a", "x");
    let added = s.create(&x, obj("x0"), 0).await.unwrap();
    let modified = s.update(&x, obj("x1"), added).await.unwrap();
    let deleted = s.delete(&x, Some(modified)).await.unwrap().rev;
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let next = tokio::time::timeout(DEADLINE, changes.next()).await.expect("a change in time");
        match next.expect("the watch goes on").expect("a change") {
            Change::Progress { .. } => {}
            c => seen.push(c),
        }
    }
    // The three writes after `from` that are not x's: b/p1, b/p2, a/p3x.
    assert_eq!(
        seen[3..],
        [
            Change::Added { key: x.clone(), value: obj("x0"), rev: added },
            Change::Modified { key: x.clone(), value: obj("x1"), prev: Some(obj("x0")), rev: modified },
            Change::Deleted { key: x.clone(), value: obj("x1"), rev: deleted },
        ]
    );
    assert!(matches!(&seen[0], Change::Added { key: k, .. } if *k == key("b", "p1")), "{seen:?}");
    drop(changes);

    // The compactor: the first round records the revision, the second compacts at it; a
    // continue token from before is then expired, and the restart token goes on at the latest.
    let r1 = s.compact_round(Round::default()).await.unwrap();
    assert_eq!(r1.clock, 1);
    let stale = s.compact_round(Round::default()).await.unwrap();
    assert_eq!(stale.clock, 1, "a compactor with an old clock skips its round and learns the clock");
    s.create(&key("c", "p1"), obj("c1"), 0).await.unwrap();
    let r2 = s.compact_round(r1).await.unwrap();
    assert_eq!(r2.clock, 2);
    let expired =
        s.list(&pods, &ListOptions { limit: 2, continue_token: first.continue_token.clone(), at: At::Latest }).await;
    let Err(StorageError::Expired { restart: Some(restart) }) = expired else { panic!("{expired:?}") };
    let rest = s.list(&pods, &ListOptions { limit: 0, continue_token: Some(restart), at: At::Latest }).await.unwrap();
    assert_eq!(rest.items.first().map(|(k, _)| k.clone()), Some(key("a", "p3")));
    assert!(rest.items.iter().any(|(k, _)| *k == key("c", "p1")), "the restart reads the latest state");
    let old = s.list(&pods, &ListOptions { limit: 0, continue_token: None, at: At::Exact(first.rev) }).await;
    assert!(matches!(old, Err(StorageError::Compacted(_))), "{old:?}");
    let mut too_old = Box::pin(s.watch(&pods, from).await.unwrap());
    let first = tokio::time::timeout(DEADLINE, too_old.next()).await.expect("an answer in time");
    assert!(matches!(first, Some(Err(StorageError::Compacted(_)))), "{first:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_keel() {
    let (storage, _member) = keel().await;
    semantics(&storage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd() {
    let (storage, _etcd) = etcd().await;
    semantics(&storage).await;
}
