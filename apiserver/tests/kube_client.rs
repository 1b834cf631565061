//! A second real client, kube-rs (`kube` 5): its typed API, `watcher` and `reflector`, against
//! keel-apiserver on a 3-member keel cluster whose leader is killed (SIGKILL) and restarted
//! while they run. The apiserver is given the leader's URL first, so the kill takes away the
//! endpoint it uses: its requests fail over to the other members and its watch cache watches
//! again from where it was.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use keel_bench::server::{Cluster, Kind};
use keel_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use keel_proto::etcdserverpb::StatusRequest;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use parking_lot::Mutex;

mod common;

const DEADLINE: Duration = Duration::from_secs(90);

fn keel_bin() -> PathBuf {
    // <target>/debug/deps/kube_client-<hash> -> <target>/debug/keel
    let exe = std::env::current_exe().expect("this test's path");
    let bin = exe.parent().and_then(|d| d.parent()).expect("<target>/debug").join("keel");
    assert!(bin.exists(), "no keel binary at {} (cargo test --workspace builds it)", bin.display());
    bin
}

/// The index of the cluster's leader, as its members report it.
async fn leader(endpoints: &[String]) -> usize {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let mut ids = Vec::new();
        let mut leader = 0;
        for e in endpoints {
            let status = async {
                let channel = tonic::transport::Endpoint::from_shared(e.clone()).ok()?.connect().await.ok()?;
                MaintenanceClient::new(channel).status(StatusRequest {}).await.ok().map(|r| r.into_inner())
            };
            match status.await {
                Some(s) => {
                    ids.push(s.header.map_or(0, |h| h.member_id));
                    leader = leader.max(s.leader);
                }
                None => ids.push(0),
            }
        }
        if let Some(i) = ids.iter().position(|id| *id == leader && leader != 0) {
            return i;
        }
        assert!(tokio::time::Instant::now() < deadline, "the cluster has no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"n": name}})).unwrap()
}

/// Creates `name`, again while the store cannot take it; an earlier attempt that did is fine.
async fn create(api: &Api<ConfigMap>, name: &str) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match api.create(&PostParams::default(), &configmap(name)).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "creating {name}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_lists_and_watches_through_a_store_leader_kill() {
    let mut cluster = Cluster::start(Kind::Keel, &keel_bin(), 3, &[]).await.expect("a keel cluster");
    let mut endpoints = cluster.endpoints();
    let first = leader(&endpoints).await;
    endpoints.swap(0, first);
    let dir = tempfile::tempdir().unwrap();
    let (running, client) = common::apiserver(dir.path(), &[format!("--etcd-servers={}", endpoints.join(","))]).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");

    // A reflector over a watcher, and every object its stream applies.
    let (reader, writer) = reflector::store();
    let applied = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = applied.clone();
    let watching = tokio::spawn(
        reflector(writer, watcher(cms.clone(), watcher::Config::default()))
            .default_backoff()
            .applied_objects()
            .for_each(move |o| {
                if let Ok(cm) = o {
                    seen.lock().insert(cm.metadata.name.unwrap_or_default());
                }
                futures::future::ready(())
            }),
    );
    let names: Vec<String> = (0..30).map(|i| format!("cm-{i:02}")).collect();
    for n in &names[..10] {
        create(&cms, n).await;
    }
    // The leader goes, with the endpoint the apiserver uses.
    let pid = cluster.pids()[first];
    // SAFETY: kill(2) on a child of this process.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    for n in &names[10..20] {
        create(&cms, n).await;
    }
    assert_ne!(leader(&cluster.endpoints()).await, first, "a new leader");
    cluster.restart(first).await.expect("the old leader comes back");
    for n in &names[20..] {
        create(&cms, n).await;
    }

    // The reflector's store and what the watch applied hold every object; a typed list agrees.
    let want: BTreeSet<String> = names.iter().cloned().collect();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let cached: BTreeSet<String> = reader.state().iter().filter_map(|c| c.metadata.name.clone()).collect();
        if cached == want && *applied.lock() == want {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reflector holds {cached:?}, the watch applied {:?}",
            applied.lock()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed: BTreeSet<String> =
        cms.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert_eq!(listed, want);
    watching.abort();
    running.stop().await;
}
