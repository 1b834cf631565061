//! A pod's `binding` (the scheduler's) and `eviction` (kubectl drain's) subresources through
//! kube-rs: a pod is bound once, with kube's conflicts and errors; an eviction deletes a pod
//! unless a disruption budget that selects it has no disruption left, and spends one when it has.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, PostParams};

mod common;

/// POSTs `body` to `uri`; the answer's code and body.
async fn post(client: &kube::Client, uri: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let req = http::Request::post(uri)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    match client.request_text(req).await {
        Ok(text) => (201, serde_json::from_str(&text).unwrap()),
        Err(kube::Error::Api(s)) => (s.code, serde_json::json!({"reason": s.reason, "message": s.message})),
        Err(e) => panic!("{uri}: {e}"),
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": {"app": "db"}},
        "spec": {"containers": [{"name": "c", "image": "postgres"}]}}))
    .unwrap()
}

fn binding(name: &str, node: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_bound_once_and_evicted_within_their_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let (running, _) = common::apiserver(dir.path(), &[]).await;
    // kube-rs retries a 429 for minutes by default; the budget's refusals are the point here.
    let kubeconfig = kube::config::Kubeconfig::read_from(&running.kubeconfig).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await.unwrap();
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let at = |name: &str, sub: &str| format!("/api/v1/namespaces/default/pods/{name}/{sub}");

    // Binding: once, and marked scheduled.
    pods.create(&PostParams::default(), &pod("p1")).await.unwrap();
    let (code, answer) = post(&client, &at("p1", "binding"), binding("p1", "n1")).await;
    assert_eq!((code, &answer["status"], &answer["code"]), (201, &"Success".into(), &201.into()));
    let p1 = pods.get("p1").await.unwrap();
    assert_eq!(p1.spec.unwrap().node_name.as_deref(), Some("n1"));
    let scheduled = p1.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "PodScheduled").unwrap();
    assert_eq!(scheduled.status, "True");
    let (code, answer) = post(&client, &at("p1", "binding"), binding("p1", "n2")).await;
    assert_eq!(code, 409);
    assert_eq!(
        answer["message"],
        "Operation cannot be fulfilled on pods/binding \"p1\": pod p1 is already assigned to node \"n1\""
    );
    let (code, answer) = post(&client, &at("p1", "binding"), binding("other", "n2")).await;
    assert_eq!((code, answer["message"].as_str().unwrap()), (400, "name in URL does not match name in Binding object"));
    let no_target = serde_json::json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"}, "target": {"kind": "Pod"}});
    let (code, answer) = post(&client, &at("p1", "binding"), no_target).await;
    assert_eq!(code, 500);
    assert_eq!(answer["message"], "[target.kind: Unsupported value: \"Pod\": supported values: \"Node\", \"<empty>\", target.name: Required value]");

    // A pending pod is evicted whatever the budgets say; unbound, it is gone at once.
    pods.create(&PostParams::default(), &pod("p2")).await.unwrap();
    let budget: PodDisruptionBudget = serde_json::from_value(serde_json::json!({"metadata": {"name": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}))
    .unwrap();
    pdbs.create(&PostParams::default(), &budget).await.unwrap();
    pods.evict("p2", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("p2").await.unwrap().is_none());

    // A running, ready pod: the budget decides (its status as the disruption controller keeps it).
    pods.create(&PostParams::default(), &pod("p3")).await.unwrap();
    post(&client, &at("p3", "binding"), binding("p3", "n1")).await;
    let ready =
        serde_json::json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status("p3", &Default::default(), &kube::api::Patch::Merge(&ready)).await.unwrap();
    let budget_status = |allowed: i64| {
        serde_json::json!({"status": {"observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": 1,
            "desiredHealthy": 1, "expectedPods": 1}})
    };
    pdbs.patch_status("db", &Default::default(), &kube::api::Patch::Merge(&budget_status(0))).await.unwrap();
    match pods.evict("p3", &EvictParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
            assert_eq!(s.message, "Cannot evict pod as it would violate the pod's disruption budget.");
        }
        other => panic!("an eviction past the budget: {other:?}"),
    }
    let raw = post(
        &client,
        &at("p3", "eviction"),
        serde_json::json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p3"}}),
    )
    .await;
    assert_eq!(raw.0, 429);
    pdbs.patch_status("db", &Default::default(), &kube::api::Patch::Merge(&budget_status(1))).await.unwrap();
    pods.evict("p3", &EvictParams::default()).await.unwrap();
    let status = pdbs.get("db").await.unwrap().status.unwrap();
    assert_eq!(status.disruptions_allowed, 0);
    assert!(status.disrupted_pods.unwrap().contains_key("p3"));
    // Bound to a node, it terminates gracefully, marked as disrupted.
    let p3 = pods.get("p3").await.unwrap();
    assert!(p3.metadata.deletion_timestamp.is_some());
    let target = p3.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "DisruptionTarget").unwrap();
    assert_eq!(
        (target.reason.as_deref(), target.message.as_deref()),
        (Some("EvictionByEvictionAPI"), Some("Eviction API: evicting"))
    );
    running.stop().await;
}
