//! Admission through kubectl 1.32 and a kube-rs client: ResourceQuota under concurrent creates
//! (never over the quota), LimitRanger's defaults and bounds, the ServiceAccount plugin, Priority,
//! NamespaceLifecycle and NodeRestriction — each refusal with kube's message.

use std::path::Path;

mod common;

use common::{eventually, Kubectl};
use k8s_openapi::api::core::v1::Pod;
use keel_apiserver::run::Running;
use serde_json::{json, Value};

async fn serve(dir: &Path) -> Running {
    let flags = ["--controllers=serviceaccount,resourcequota", "--enable-admission-plugins=NodeRestriction"];
    common::started(dir, &flags.map(String::from)).await
}

fn pod(name: &str, extra: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]}});
    if let (Value::Object(p), Value::Object(e)) = (&mut p["spec"], extra) {
        p.extend(e);
    }
    p
}

/// Waits for namespace `ns`'s `default` service account (the controller makes it).
async fn default_account(k: &Kubectl, ns: &str) {
    eventually("the default service account", || async {
        let o = k.run(&["get", "serviceaccount", "default", "-n", ns, "-o", "name"]).await;
        if o.ok {
            Ok(())
        } else {
            Err(o.stderr)
        }
    })
    .await
}

const FORBIDDEN: &str = "Error from server (Forbidden): ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_plugins_through_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let running = serve(dir.path()).await;
    let k =
        Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.path().join("cache"), files: dir.path().into() };
    k.ok(&["create", "namespace", "shop"]).await;
    default_account(&k, "shop").await;

    // ResourceQuota: twenty pods at once against a quota of five.
    k.ok(&["create", "quota", "q", "-n", "shop", "--hard=pods=5"]).await;
    eventually("the quota's usage to be counted", || async {
        let used = k.ok(&["get", "quota", "q", "-n", "shop", "-o", "jsonpath={.status.used.pods}"]).await;
        if used == "0" {
            Ok(())
        } else {
            Err(used)
        }
    })
    .await;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&running.kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, "shop");
    let creates = (0..20).map(|i| {
        let pods = pods.clone();
        async move {
            let p: Pod = serde_json::from_value(pod(&format!("p{i}"), json!({}))).unwrap();
            pods.create(&Default::default(), &p).await
        }
    });
    let results = futures::future::join_all(creates).await;
    let admitted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(admitted, 5, "{results:?}");
    for r in &results {
        if let Err(kube::Error::Api(s)) = r {
            assert_eq!(s.code, 403);
            assert!(
                s.message
                    .ends_with("is forbidden: exceeded quota: q, requested: pods=1, used: pods=5, limited: pods=5"),
                "{}",
                s.message
            );
        }
    }
    assert_eq!(k.ok(&["get", "pods", "-n", "shop", "-o", "name"]).await.lines().count(), 5);
    assert_eq!(k.ok(&["get", "quota", "q", "-n", "shop", "-o", "jsonpath={.status.used.pods}"]).await, "5");
    // A dry run is checked, not charged.
    let sixth = k.file("p-extra.json", pod("extra", json!({})));
    assert!(k.fails(&["create", "-f", &sixth, "-n", "shop", "--dry-run=server"]).await.contains("exceeded quota: q"));

    // ServiceAccount: the default account and its credentials volume; an account that does
    // not exist refuses the pod.
    let admitted_name = results.iter().flatten().next().and_then(|p| p.metadata.name.clone()).unwrap();
    let made = serde_json::from_str::<Value>(&k.ok(&["get", "pod", &admitted_name, "-n", "shop", "-o", "json"]).await)
        .unwrap();
    assert_eq!(made["spec"]["serviceAccountName"], "default");
    let volume = made["spec"]["volumes"][0]["name"].as_str().unwrap().to_string();
    assert!(volume.starts_with("kube-api-access-") && volume.len() == "kube-api-access-".len() + 5, "{volume}");
    assert_eq!(
        made["spec"]["containers"][0]["volumeMounts"][0],
        json!({"name": volume, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    );
    assert_eq!(made["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"], 3607);
    k.ok(&["create", "namespace", "lab"]).await;
    default_account(&k, "lab").await;
    let ghost = k.file("ghost.json", pod("ghost", json!({"serviceAccountName": "ghost"})));
    assert_eq!(
        k.fails(&["create", "-f", &ghost, "-n", "lab"]).await,
        format!("{FORBIDDEN}error when creating \"{ghost}\": pods \"ghost\" is forbidden: error looking up service account lab/ghost: serviceaccount \"ghost\" not found\n")
    );

    // LimitRanger: defaults set and noted, bounds enforced.
    let ranges = k.file(
        "limits.json",
        json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "cpu"},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"}, "max": {"cpu": "1"}}]}}),
    );
    k.ok(&["create", "-f", &ranges, "-n", "lab"]).await;
    let plain = k.file("plain.json", pod("plain", json!({})));
    k.ok(&["create", "-f", &plain, "-n", "lab"]).await;
    let made = serde_json::from_str::<Value>(&k.ok(&["get", "pod", "plain", "-n", "lab", "-o", "json"]).await).unwrap();
    assert_eq!(
        made["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "500m"}, "requests": {"cpu": "100m"}})
    );
    assert_eq!(
        made["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu request for container app; cpu limit for container app"
    );
    let big = k.file(
        "big.json",
        pod("big", json!({"containers": [{"name": "app", "image": "nginx", "resources": {"limits": {"cpu": "2"}}}]})),
    );
    assert_eq!(
        k.fails(&["create", "-f", &big, "-n", "lab"]).await,
        format!("{FORBIDDEN}error when creating \"{big}\": pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2\n")
    );

    // Priority: from the class named, or refused.
    let critical = k.file("critical.json", pod("critical", json!({"priorityClassName": "system-cluster-critical"})));
    k.ok(&["create", "-f", &critical, "-n", "lab"]).await;
    assert_eq!(
        k.ok(&["get", "pod", "critical", "-n", "lab", "-o", "jsonpath={.spec.priority} {.spec.preemptionPolicy}"])
            .await,
        "2000000000 PreemptLowerPriority"
    );
    let nope = k.file("nope.json", pod("nope", json!({"priorityClassName": "nope"})));
    assert_eq!(
        k.fails(&["create", "-f", &nope, "-n", "lab"]).await,
        format!("{FORBIDDEN}error when creating \"{nope}\": pods \"nope\" is forbidden: no PriorityClass with name nope was found\n")
    );

    // NamespaceLifecycle: the system namespaces stay.
    assert_eq!(
        k.fails(&["delete", "namespace", "default"]).await,
        format!("{FORBIDDEN}namespaces \"default\" is forbidden: this namespace may not be deleted\n")
    );

    // NodeRestriction: a kubelet writes its own Node only, and only mirror pods.
    for n in ["node-1", "node-9"] {
        let node = k.file(&format!("{n}.json"), json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}}));
        k.ok(&["create", "-f", &node]).await;
    }
    let kubelet = ["--as=system:node:node-9", "--as-group=system:nodes"];
    let mut args = vec!["label", "node", "node-9", "ready=yes"];
    args.extend(kubelet);
    k.ok(&args).await;
    let mut args = vec!["label", "node", "node-1", "ready=yes"];
    args.extend(kubelet);
    assert_eq!(
        k.fails(&args).await,
        format!("{FORBIDDEN}nodes \"node-1\" is forbidden: node \"node-9\" is not allowed to modify node \"node-1\"\n")
    );
    let mut args = vec!["create", "-f", &plain, "-n", "shop"];
    args.extend(kubelet);
    let refused = k.fails(&args).await;
    assert!(
        refused.ends_with("pods \"plain\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"node-9\" can only create mirror pods\n"),
        "{refused}"
    );
    running.stop().await;
}
