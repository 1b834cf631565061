//! Two keel-apiservers on one store (etcd 3.4) run each controller once: the first takes the
//! controller manager's and the scheduler's Leases, the second waits; a ReplicaSet gets its pods
//! made once; when the leader stops, the second takes the Leases over (after they expire) and
//! its controllers act.

mod common;

use common::eventually;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, PostParams};

fn replica_set(name: &str) -> ReplicaSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    }))
    .unwrap()
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<(String, i32)> {
    let l = leases.get_opt(name).await.ok()??;
    let spec = l.spec?;
    Some((spec.holder_identity?, spec.lease_transitions.unwrap_or(0)))
}

/// Pods of `app`, and the ReplicaSet's SuccessfulCreate events (each counted once per write).
async fn made(client: &kube::Client, app: &str) -> (usize, i32) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let n = pods.list(&ListParams::default().labels(&format!("app={app}"))).await.unwrap().items.len();
    let created = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("SuccessfulCreate") && e.involved_object.name.as_deref() == Some(app))
        .map(|e| e.count.unwrap_or(1))
        .sum();
    (n, created)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_apiservers_run_each_controller_once_and_hand_over() {
    let etcd = common::etcd();
    let store = format!("--etcd-servers={}", etcd.url);
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let all = "--controllers=*".to_string();
    let (first, client) = common::apiserver(dirs.0.path(), &[store.clone(), all.clone()]).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let (leader, _) = eventually("the first apiserver to lead", || async {
        match (holder(&leases, "kube-controller-manager").await, holder(&leases, "kube-scheduler").await) {
            (Some(cm), Some(_)) => Ok(cm),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (second, second_client) = common::apiserver(dirs.1.path(), &[store, all]).await;

    // One ReplicaSet, its pods made once (two controllers acting would each make three).
    let sets: Api<ReplicaSet> = Api::namespaced(second_client.clone(), "default");
    sets.create(&PostParams::default(), &replica_set("one")).await.unwrap();
    eventually("three pods, made once", || async {
        match made(&second_client, "one").await {
            (3, 3) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    eventually("the ReplicaSet's status", || async {
        let rs = sets.get("one").await.unwrap();
        match rs.status.map(|s| s.replicas) {
            Some(3) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        holder(&leases, "kube-controller-manager").await.map(|h| h.0),
        Some(leader.clone()),
        "the leader kept its lease"
    );

    // The leader stops: the second takes over once the Lease expires, and acts.
    first.stop().await;
    let leases: Api<Lease> = Api::namespaced(second_client.clone(), "kube-system");
    eventually("the second apiserver to take the leases over", || async {
        match holder(&leases, "kube-controller-manager").await {
            Some((h, transitions)) if h != leader && transitions == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    sets.create(&PostParams::default(), &replica_set("two")).await.unwrap();
    eventually("the new leader's controllers to act", || async {
        match made(&second_client, "two").await {
            (3, 3) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    second.stop().await;
    drop(client);
}
