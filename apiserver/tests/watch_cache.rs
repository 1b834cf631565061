//! The watch cache on a real store (etcd 3.4, restarted under it, and compacted past it): a
//! watcher gets every change once, in order, or its end and then a 410 that sends it to
//! re-list.

use std::time::Duration;

mod common;

use futures::StreamExt;
use keel_apiserver::cache::{reflector, Cache, Caches, Selectors, Start, Subscription};
use keel_apiserver::resources;
use keel_apiserver::storage::compact::Round;
use keel_apiserver::storage::watch::Change;
use keel_apiserver::storage::{keys, Storage, StorageError};
use tonic::transport::Endpoint;

const DEADLINE: Duration = Duration::from_secs(60);

fn configmap(name: &str, n: u32) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"metadata": {"name": name, "namespace": "d"}, "data": {"n": n.to_string()}}))
        .unwrap()
}

/// Runs `op` until the store answers it (it may be restarting); what it answered.
async fn retried<T>(mut op: impl AsyncFnMut() -> Result<T, StorageError>) -> Result<T, StorageError> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match op().await {
            Err(StorageError::Store(_)) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

/// Every change under `prefix` after `from` up to `to`, as the store's own history has them:
/// (key, resourceVersion, deleted).
async fn history(storage: &Storage, prefix: &str, from: i64, to: i64) -> Vec<(String, i64, bool)> {
    let mut out = Vec::new();
    let changes = storage.watch(prefix, from).await.unwrap();
    let mut changes = std::pin::pin!(changes);
    while out.last().is_none_or(|(_, rev, _)| *rev < to) {
        match tokio::time::timeout(DEADLINE, changes.next()).await.expect("history in time").unwrap().unwrap() {
            Change::Added { key, rev, .. } | Change::Modified { key, rev, .. } => out.push((key, rev, false)),
            Change::Deleted { key, rev, .. } => out.push((key, rev, true)),
            Change::Progress { .. } => {}
        }
    }
    out
}

/// What `sub` delivers until it has reached `to`: (key, resourceVersion, deleted).
async fn delivered(sub: &mut Subscription, to: i64) -> Vec<(String, i64, bool)> {
    let mut out: Vec<(String, i64, bool)> = Vec::new();
    while out.last().is_none_or(|(_, rev, _)| *rev < to) {
        let (e, seen) =
            tokio::time::timeout(DEADLINE, sub.next()).await.expect("an event in time").expect("not closed");
        let (kind, o) = e.as_seen(seen);
        out.push((o.key.clone(), o.rev, kind == keel_apiserver::cache::Kind::Deleted));
    }
    out
}

async fn until_reached(cache: &Cache, rev: i64) {
    assert!(cache.wait_for(rev, DEADLINE).await, "the cache reaches {rev}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_go_on_through_a_store_restart_and_relist_after_a_compaction() {
    let mut etcd = common::etcd();
    let channel = Endpoint::from_shared(etcd.url.clone()).unwrap().timeout(Duration::from_secs(5)).connect_lazy();
    let storage = Storage::new(channel);
    let prefix = keys::collection("/registry", "configmaps", Some("d"));
    let key = |name: &str| keys::object("/registry", "configmaps", Some("d"), name);
    retried(async || storage.get("/probe").await).await.unwrap();

    let (caches, feeding) = Caches::start(&storage, "/registry", false);
    assert!(caches.ready(DEADLINE).await);
    let r = resources::find("", "v1", "configmaps").unwrap();
    let cache = caches.of(r).unwrap().clone();
    let start = cache.rev();
    let mut sub = cache.watch(Start::Now, Some("d".into()), Selectors::everything()).unwrap();
    assert!(sub.initial.is_empty());

    // Creates, updates and deletes on both sides of a store restart.
    let mut last = 0;
    for round in 0..2u32 {
        for i in 0..10u32 {
            let name = format!("c{}", round * 10 + i);
            match retried(async || storage.create(&key(&name), configmap(&name, 0), 0).await).await {
                // A create the dying store applied without answering is there.
                Ok(_) | Err(StorageError::AlreadyExists) => {}
                Err(e) => panic!("{e}"),
            }
        }
        let cur = retried(async || storage.get(&key("c0")).await).await.unwrap().unwrap();
        retried(async || storage.update(&key("c0"), configmap("c0", round + 1), cur.rev).await).await.unwrap();
        last = retried(async || storage.delete(&key(&format!("c{}", round * 10 + 1)), None).await).await.unwrap().rev;
        if round == 0 {
            etcd.restart();
        }
    }
    until_reached(&cache, last).await;
    let want = history(&storage, &prefix, start, last).await;
    assert_eq!(want.len(), 24);
    assert_eq!(delivered(&mut sub, last).await, want);

    // The cache's store watch stops; meanwhile the store changes and compacts past the cache.
    for t in feeding {
        t.abort();
    }
    let before = cache.rev();
    let mut changed = 0;
    for n in 0..3u32 {
        let cur = storage.get(&key("c0")).await.unwrap().unwrap();
        changed = storage.update(&key("c0"), configmap("c0", 10 + n), cur.rev).await.unwrap();
    }
    let round = storage.compact_round(Round::default()).await.unwrap();
    storage.compact_round(round).await.unwrap();
    assert!(round.rev > before);
    let fed = tokio::spawn(reflector::run(cache.clone(), storage.clone()));
    until_reached(&cache, changed).await;
    // The watcher is closed (after what it had), and resuming where it was is too old.
    assert!(tokio::time::timeout(DEADLINE, sub.next()).await.expect("closed in time").is_none());
    let e = cache.watch(Start::After(before), Some("d".into()), Selectors::everything()).err().expect("too old");
    assert_eq!((e.code, e.reason.as_ref()), (410, "Expired"));
    // A re-list sees the state as the store has it, and a watch from there goes on.
    let listed = cache.list(&prefix, &Selectors::everything(), 0);
    assert_eq!(listed.items.len(), 18);
    let mut again = cache.watch(Start::After(listed.rev), Some("d".into()), Selectors::everything()).unwrap();
    let cur = storage.get(&key("c0")).await.unwrap().unwrap();
    let rev = storage.update(&key("c0"), configmap("c0", 99), cur.rev).await.unwrap();
    assert_eq!(delivered(&mut again, rev).await, vec![(key("c0"), rev, false)]);
    fed.abort();
}
