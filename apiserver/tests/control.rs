//! The control plane end to end through kubectl 1.32 (issue 28's demo): three simulated nodes; a
//! Deployment of five replicas spread over them; a deleted pod replaced; a node that stops
//! heartbeating losing its pods to the others within their toleration; the Service's
//! EndpointSlice and every node's kube-proxy table following each change; a rollout to a new
//! image completing under `kubectl rollout status`; the Deployment's deletion collecting its
//! ReplicaSets and pods. And the scheduler's refusal and its retry when the cluster changes; Jobs,
//! CronJobs, DaemonSets and StatefulSets.

use std::collections::BTreeSet;
use std::path::Path;

mod common;

use common::{eventually, Kubectl};
use keel_apiserver::run::Running;
use serde_json::{json, Value};

const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];

async fn serve(dir: &Path) -> Running {
    // A silent node is noticed after 4 s (kube's default is 40 s).
    let flags = ["--simulated-nodes=3", "--node-monitor-grace-period=4s"];
    common::started(dir, &flags.map(String::from)).await
}

/// keel-apiserver with three simulated nodes, and kubectl for it, once the nodes are there.
async fn cluster(dir: &Path) -> (Running, Kubectl) {
    let running = serve(dir).await;
    let k = Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.join("cache"), files: dir.into() };
    shows(&k, "three nodes", &["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"], "node-1 node-2 node-3")
        .await;
    (running, k)
}

/// Waits until kubectl `args` prints `want`.
async fn shows(k: &Kubectl, what: &str, args: &[&str], want: &str) {
    eventually(what, || async {
        let got = k.ok(args).await;
        if got == want {
            Ok(())
        } else {
            Err(got)
        }
    })
    .await
}

async fn json_of(k: &Kubectl, args: &[&str]) -> Value {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&k.ok(&all).await).expect("kubectl prints JSON")
}

/// The app's pods: (name, node, podIP, ready, being deleted, image).
async fn pods(k: &Kubectl) -> Vec<(String, String, String, bool, bool, String)> {
    let list = json_of(k, &["get", "pods", "-l", "app=web"]).await;
    let text = |p: &Value, at: &str| p.pointer(at).and_then(Value::as_str).unwrap_or("").to_string();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let ready = p
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
            let running = text(p, "/status/phase") == "Running";
            (
                text(p, "/metadata/name"),
                text(p, "/spec/nodeName"),
                text(p, "/status/podIP"),
                ready && running,
                p.pointer("/metadata/deletionTimestamp").is_some(),
                text(p, "/spec/containers/0/image"),
            )
        })
        .collect()
}

/// The serving pods' addresses (ready and not being deleted), once there are `n`.
async fn serving(k: &Kubectl, n: usize) -> BTreeSet<String> {
    eventually(&format!("{n} serving pods"), || async {
        let ps = pods(k).await;
        let up: BTreeSet<String> = ps.iter().filter(|p| p.3 && !p.4).map(|p| format!("{}:80", p.2)).collect();
        if up.len() == n {
            Ok(up)
        } else {
            Err(format!("{ps:?}"))
        }
    })
    .await
}

/// Waits until the Service's EndpointSlice and every node's kube-proxy table send its traffic
/// to exactly `backends`.
async fn traffic_goes_to(k: &Kubectl, backends: &BTreeSet<String>) {
    eventually("the EndpointSlice to follow", || async {
        let slices = json_of(k, &["get", "endpointslices", "-l", "kubernetes.io/service-name=web"]).await;
        let ready: BTreeSet<String> = slices["items"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e.pointer("/conditions/ready") == Some(&json!(true)))
            .map(|e| format!("{}:80", e["addresses"][0].as_str().unwrap()))
            .collect();
        if &ready == backends {
            Ok(())
        } else {
            Err(format!("{ready:?}"))
        }
    })
    .await;
    for node in NODES {
        eventually(&format!("{node}'s kube-proxy to follow"), || async {
            let path = format!("/api/v1/nodes/{node}/proxy/services/default/web");
            let table: Value = serde_json::from_str(&k.ok(&["get", "--raw", &path]).await).unwrap();
            let rules = table.pointer("/services/0/rules").and_then(Value::as_array).cloned().unwrap_or_default();
            let cluster: Option<BTreeSet<String>> = rules
                .iter()
                .find(|r| r["kind"] == "ClusterIP")
                .map(|r| r["backends"].as_array().unwrap().iter().map(|b| b.as_str().unwrap().to_string()).collect());
            if cluster.as_ref() == Some(backends) {
                Ok(())
            } else {
                Err(format!("{table}"))
            }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_warehouse_demo() {
    let dir = tempfile::tempdir().unwrap();
    let running = serve(dir.path()).await;
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    let k = Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.path().join("cache"), files };

    eventually("three Ready nodes", || async {
        let nodes = k.ok(&["get", "nodes", "--no-headers"]).await;
        let ready = nodes.lines().filter(|l| l.split_whitespace().nth(1) == Some("Ready")).count();
        if ready == 3 {
            Ok(())
        } else {
            Err(nodes)
        }
    })
    .await;

    // A Deployment of five replicas reaches five Running pods spread over the nodes.
    let web = k.file(
        "web.json",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 5,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                         "effect": "NoExecute", "tolerationSeconds": 2}],
                        "containers": [{"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}],
                    },
                },
            },
        }),
    );
    assert_eq!(k.ok(&["apply", "-f", &web]).await, "deployment.apps/web created\n");
    let status = k.ok(&["rollout", "status", "deploy/web", "--timeout=90s"]).await;
    assert!(status.ends_with("deployment \"web\" successfully rolled out\n"), "{status}");
    let first = serving(&k, 5).await;
    let ps = pods(&k).await;
    let per_node: Vec<usize> = NODES.iter().map(|n| ps.iter().filter(|p| p.1 == *n).count()).collect();
    assert!(per_node.iter().all(|c| (1..=2).contains(c)), "spread over the nodes: {per_node:?}");

    // The Service's EndpointSlice and every node's kube-proxy table follow.
    assert_eq!(k.ok(&["expose", "deploy", "web", "--port=80"]).await, "service/web exposed\n");
    traffic_goes_to(&k, &first).await;

    // Deleting a pod brings a new one.
    let gone = ps[0].0.clone();
    k.ok(&["delete", "pod", &gone, "--wait=false"]).await;
    let after_delete = eventually("a replacement pod", || async {
        let ps = pods(&k).await;
        let up: BTreeSet<String> = ps.iter().filter(|p| p.3 && !p.4).map(|p| format!("{}:80", p.2)).collect();
        if up.len() == 5 && !ps.iter().any(|p| p.0 == gone) {
            Ok(up)
        } else {
            Err(format!("{ps:?}"))
        }
    })
    .await;
    traffic_goes_to(&k, &after_delete).await;

    // A node that stops heartbeating loses its pods to the others within their toleration.
    let victim = pods(&k).await.iter().find(|p| !p.1.is_empty()).map(|p| p.1.clone()).unwrap();
    k.ok(&["annotate", "node", &victim, "keel.dev/heartbeat=stopped"]).await;
    eventually("the silent node to go NotReady", || async {
        let ready =
            k.ok(&["get", "node", &victim, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"]).await;
        let taints = k.ok(&["get", "node", &victim, "-o", "jsonpath={.spec.taints[*].key}"]).await;
        if ready == "Unknown" && taints.contains("node.kubernetes.io/unreachable") {
            Ok(())
        } else {
            Err(format!("{ready} {taints}"))
        }
    })
    .await;
    let moved = eventually("the pods to move off the silent node", || async {
        let ps = pods(&k).await;
        let up: Vec<_> = ps.iter().filter(|p| p.3 && !p.4).collect();
        if up.len() == 5 && up.iter().all(|p| p.1 != victim) {
            Ok(up.iter().map(|p| format!("{}:80", p.2)).collect::<BTreeSet<_>>())
        } else {
            Err(format!("{ps:?}"))
        }
    })
    .await;
    traffic_goes_to(&k, &moved).await;
    k.ok(&["annotate", "node", &victim, "keel.dev/heartbeat-"]).await;
    eventually("the node to come back", || async {
        let ready =
            k.ok(&["get", "node", &victim, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"]).await;
        let taints = k.ok(&["get", "node", &victim, "-o", "jsonpath={.spec.taints}"]).await;
        if ready == "True" && taints.is_empty() {
            Ok(())
        } else {
            Err(format!("{ready} {taints}"))
        }
    })
    .await;

    // A rollout to a new image completes.
    k.ok(&["set", "image", "deploy/web", "nginx=nginx:1.26"]).await;
    let status = k.ok(&["rollout", "status", "deploy/web", "--timeout=90s"]).await;
    assert!(status.ends_with("deployment \"web\" successfully rolled out\n"), "{status}");
    let rolled = eventually("every pod on the new image", || async {
        let ps = pods(&k).await;
        let up: Vec<_> = ps.iter().filter(|p| p.3 && !p.4).collect();
        if up.len() == 5 && up.iter().all(|p| p.5 == "nginx:1.26") && ps.iter().all(|p| p.5 == "nginx:1.26" || p.4) {
            Ok(up.iter().map(|p| format!("{}:80", p.2)).collect::<BTreeSet<_>>())
        } else {
            Err(format!("{ps:?}"))
        }
    })
    .await;
    traffic_goes_to(&k, &rolled).await;
    let sets = k.ok(&["get", "rs", "-l", "app=web", "-o", "jsonpath={.items[*].spec.replicas}"]).await;
    let mut sizes: Vec<&str> = sets.split_whitespace().collect();
    sizes.sort();
    assert_eq!(sizes, ["0", "5"], "the old ReplicaSet is kept, scaled to zero");
    let history = k.ok(&["rollout", "history", "deploy/web"]).await;
    assert!(history.contains("1         <none>") && history.contains("2         <none>"), "{history}");
    // Undo goes back to the first template (its ReplicaSet, revision 3); restart rolls anew;
    // a paused Deployment does not roll until resumed.
    k.ok(&["rollout", "undo", "deploy/web"]).await;
    let status = k.ok(&["rollout", "status", "deploy/web", "--timeout=90s"]).await;
    assert!(status.ends_with("successfully rolled out\n"), "{status}");
    let revision = "jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\\.kubernetes\\.io/revision}";
    assert_eq!(k.ok(&["get", "deploy", "web", "-o", revision]).await, "nginx:1.25 3");
    let sets = || async { k.ok(&["get", "rs", "-l", "app=web", "-o", "name"]).await.lines().count() };
    assert_eq!(sets().await, 2, "undo reuses the first ReplicaSet");
    k.ok(&["rollout", "restart", "deploy/web"]).await;
    let status = k.ok(&["rollout", "status", "deploy/web", "--timeout=90s"]).await;
    assert!(status.ends_with("successfully rolled out\n"), "{status}");
    assert_eq!(sets().await, 3);
    k.ok(&["rollout", "pause", "deploy/web"]).await;
    k.ok(&["set", "image", "deploy/web", "nginx=nginx:1.27"]).await;
    let progressing = "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}";
    shows(&k, "the paused Deployment to say so", &["get", "deploy", "web", "-o", progressing], "DeploymentPaused")
        .await;
    assert_eq!(sets().await, 3, "no rollout while paused");
    k.ok(&["rollout", "resume", "deploy/web"]).await;
    let status = k.ok(&["rollout", "status", "deploy/web", "--timeout=90s"]).await;
    assert!(status.ends_with("successfully rolled out\n"), "{status}");
    assert_eq!(sets().await, 4);

    // Deleting the Deployment collects its ReplicaSets and pods.
    assert_eq!(k.ok(&["delete", "deploy", "web"]).await, "deployment.apps \"web\" deleted\n");
    eventually("the ReplicaSets and pods to be collected", || async {
        let left = k.ok(&["get", "rs,pods", "-l", "app=web", "-o", "name"]).await;
        if left.is_empty() {
            Ok(())
        } else {
            Err(left)
        }
    })
    .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_fits_nowhere_waits_for_the_cluster_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let (running, k) = cluster(dir.path()).await;
    for n in NODES {
        assert_eq!(k.ok(&["cordon", n]).await, format!("node/{n} cordoned\n"));
    }
    k.ok(&["run", "lonely", "--image=nginx", "--restart=Never"]).await;
    let expected = "0/3 nodes are available: 3 node(s) were unschedulable. preemption: 0/3 nodes are available: 3 \
                    Preemption is not helpful for scheduling.";
    eventually("the scheduler's refusal", || async {
        let cond = k
            .ok(&[
                "get",
                "pod",
                "lonely",
                "-o",
                "jsonpath={.status.conditions[0].reason}|{.status.conditions[0].message}",
            ])
            .await;
        let events = k
            .ok(&["get", "events", "--field-selector", "reason=FailedScheduling", "-o", "jsonpath={.items[*].message}"])
            .await;
        if cond == format!("Unschedulable|{expected}") && events.contains(expected) {
            Ok(())
        } else {
            Err(format!("{cond} / {events}"))
        }
    })
    .await;
    k.ok(&["uncordon", "node-3"]).await;
    eventually("the pod to be placed once a node opens", || async {
        let at = k.ok(&["get", "pod", "lonely", "-o", "jsonpath={.spec.nodeName} {.status.phase}"]).await;
        if at == "node-3 Running" {
            Ok(())
        } else {
            Err(at)
        }
    })
    .await;
    // A batch pod's command decides how it ends.
    k.ok(&["run", "fails", "--image=busybox", "--restart=Never", "--", "sh", "-c", "exit 3"]).await;
    eventually("the failing pod to fail with its exit code", || async {
        let got = k
            .ok(&[
                "get",
                "pod",
                "fails",
                "-o",
                "jsonpath={.status.phase} {.status.containerStatuses[0].state.terminated.exitCode}",
            ])
            .await;
        if got == "Failed 3" {
            Ok(())
        } else {
            Err(got)
        }
    })
    .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_daemon_and_stateful_workloads() {
    let dir = tempfile::tempdir().unwrap();
    let (running, k) = cluster(dir.path()).await;
    // A CronJob running every minute: its first Job is checked at the end.
    k.ok(&["create", "cronjob", "tick", "--image=busybox", "--schedule=* * * * *", "--", "true"]).await;

    // Jobs end as their commands do.
    k.ok(&["create", "job", "ok", "--image=busybox", "--", "true"]).await;
    assert_eq!(
        k.ok(&["wait", "--for=condition=complete", "job/ok", "--timeout=60s"]).await,
        "job.batch/ok condition met\n"
    );
    let bad = k.file(
        "bad.json",
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad"}, "spec": {"backoffLimit": 0,
               "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["false"]}]}}}}),
    );
    k.ok(&["create", "-f", &bad]).await;
    assert_eq!(
        k.ok(&["wait", "--for=condition=failed", "job/bad", "--timeout=60s"]).await,
        "job.batch/bad condition met\n"
    );
    let why = k
        .ok(&[
            "get",
            "job",
            "bad",
            "-o",
            "jsonpath={.status.failed} {.status.conditions[?(@.type==\"Failed\")].reason}",
        ])
        .await;
    assert_eq!(why, "1 BackoffLimitExceeded");
    let indexed = k.file(
        "indexed.json",
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "indexed"}, "spec": {
            "completions": 3, "parallelism": 2, "completionMode": "Indexed", "ttlSecondsAfterFinished": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1"]}]}}}}),
    );
    k.ok(&["create", "-f", &indexed]).await;
    assert_eq!(
        k.ok(&["wait", "--for=condition=complete", "job/indexed", "--timeout=60s"]).await,
        "job.batch/indexed condition met\n"
    );
    // Finished, it goes after its TTL (and its pods with it).
    eventually("the finished Job to be collected after its TTL", || async {
        let left = k.ok(&["get", "jobs,pods", "-l", "batch.kubernetes.io/job-name=indexed", "-o", "name"]).await;
        let job = k.run(&["get", "job", "indexed"]).await;
        if left.is_empty() && !job.ok {
            Ok(())
        } else {
            Err(left)
        }
    })
    .await;

    // A DaemonSet runs one pod on every node.
    let agent = k.file(
        "agent.json",
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"terminationGracePeriodSeconds": 1,
                "containers": [{"name": "a", "image": "fluentd:1"}]}}}}),
    );
    k.ok(&["create", "-f", &agent]).await;
    let status = k.ok(&["rollout", "status", "ds/agent", "--timeout=60s"]).await;
    assert!(status.ends_with("daemon set \"agent\" successfully rolled out\n"), "{status}");
    let nodes = k.ok(&["get", "pods", "-l", "app=agent", "-o", "jsonpath={.items[*].spec.nodeName}"]).await;
    let mut nodes: Vec<&str> = nodes.split_whitespace().collect();
    nodes.sort();
    assert_eq!(nodes, NODES);

    // A StatefulSet makes its pods in order, each with its claim, and removes them from the top.
    let web = k.file(
        "sts.json",
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}, "spec": {
            "replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"terminationGracePeriodSeconds": 1,
                "containers": [{"name": "d", "image": "postgres:16"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    );
    k.ok(&["create", "-f", &web]).await;
    let status = k.ok(&["rollout", "status", "sts/db", "--timeout=60s"]).await;
    assert!(status.contains("partitioned roll out complete") || status.contains("roll out complete"), "{status}");
    let names = k
        .ok(&["get", "pods", "-l", "app=db", "-o", "jsonpath={.items[*].metadata.name} {.items[*].spec.hostname}"])
        .await;
    assert_eq!(names, "db-0 db-1 db-2 db-0 db-1 db-2");
    let claims = k.ok(&["get", "pvc", "-o", "jsonpath={.items[*].metadata.name}"]).await;
    assert_eq!(claims, "data-db-0 data-db-1 data-db-2");
    k.ok(&["scale", "sts", "db", "--replicas=1"]).await;
    eventually("the set to shrink from the top", || async {
        let names = k.ok(&["get", "pods", "-l", "app=db", "-o", "jsonpath={.items[*].metadata.name}"]).await;
        if names == "db-0" {
            Ok(())
        } else {
            Err(names)
        }
    })
    .await;

    // A Job past its deadline fails.
    let slow = k.file(
        "slow.json",
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "slow"}, "spec": {"activeDeadlineSeconds": 2,
               "template": {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                   "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}}}),
    );
    k.ok(&["create", "-f", &slow]).await;
    assert_eq!(
        k.ok(&["wait", "--for=condition=failed", "job/slow", "--timeout=60s"]).await,
        "job.batch/slow condition met\n"
    );
    let why = k.ok(&["get", "job", "slow", "-o", "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}"]).await;
    assert_eq!(why, "DeadlineExceeded");

    // A ReplicationController keeps its replicas; a Recreate Deployment replaces all at once.
    let rc = k.file(
        "rc.json",
        json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy"}, "spec": {
            "replicas": 2, "selector": {"app": "legacy"},
            "template": {"metadata": {"labels": {"app": "legacy"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
    );
    k.ok(&["create", "-f", &rc]).await;
    let counts = "jsonpath={.status.replicas} {.status.readyReplicas}";
    shows(&k, "the ReplicationController's pods", &["get", "rc", "legacy", "-o", counts], "2 2").await;
    let recreate = k.file(
        "recreate.json",
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "batch"}, "spec": {
            "replicas": 2, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": {"app": "batch"}},
            "template": {"metadata": {"labels": {"app": "batch"}}, "spec": {"terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "worker:1"}]}}}}),
    );
    k.ok(&["create", "-f", &recreate]).await;
    let status = k.ok(&["rollout", "status", "deploy/batch", "--timeout=60s"]).await;
    assert!(status.ends_with("successfully rolled out\n"), "{status}");
    k.ok(&["set", "image", "deploy/batch", "c=worker:2"]).await;
    let status = k.ok(&["rollout", "status", "deploy/batch", "--timeout=60s"]).await;
    assert!(status.ends_with("successfully rolled out\n"), "{status}");
    let running_images = "jsonpath={.items[*].spec.containers[0].image}";
    let images =
        k.ok(&["get", "pods", "-l", "app=batch", "--field-selector=status.phase=Running", "-o", running_images]).await;
    assert_eq!(images, "worker:2 worker:2");

    // The CronJob's first run.
    eventually("the CronJob to run a Job", || async {
        let jobs = k
            .ok(&["get", "jobs", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.succeeded}{\"\\n\"}{end}"])
            .await;
        if jobs.lines().any(|l| l.starts_with("tick-") && l.ends_with(" 1")) {
            Ok(())
        } else {
            Err(jobs)
        }
    })
    .await;
    let last = k.ok(&["get", "cronjob", "tick", "-o", "jsonpath={.status.lastScheduleTime}"]).await;
    assert!(last.ends_with(":00Z"), "scheduled on the minute: {last}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_quotas_mirrors_tokens_and_aggregation() {
    let dir = tempfile::tempdir().unwrap();
    let (running, k) = cluster(dir.path()).await;
    k.ok(&["create", "quota", "q", "--hard=pods=10,requests.cpu=2,count/deployments.apps=5,services=4"]).await;
    let db = k.file(
        "db.json",
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "db"}, "spec": {
            "replicas": 3, "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [
                {"name": "postgres", "image": "postgres:16", "resources": {"requests": {"cpu": "250m"}}}]}}}}),
    );
    k.ok(&["create", "-f", &db]).await;
    let status = k.ok(&["rollout", "status", "deploy/db", "--timeout=90s"]).await;
    assert!(status.ends_with("deployment \"db\" successfully rolled out\n"), "{status}");
    k.ok(&["create", "pdb", "db", "--selector=app=db", "--min-available=2"]).await;
    eventually("the budget's status", || async {
        let got = k
            .ok(&["get", "pdb", "db", "-o", "jsonpath={.status.expectedPods} {.status.currentHealthy} {.status.desiredHealthy} {.status.disruptionsAllowed} {.status.conditions[0].reason}"])
            .await;
        if got == "3 3 2 1 SufficientPods" {
            Ok(())
        } else {
            Err(got)
        }
    })
    .await;
    let percent = k.ok(&["create", "pdb", "half", "--selector=app=db", "--max-unavailable=50%"]).await;
    assert_eq!(percent, "poddisruptionbudget.policy/half created\n");
    eventually("a percentage of the Deployment's scale", || async {
        let got = k
            .ok(&[
                "get",
                "pdb",
                "half",
                "-o",
                "jsonpath={.status.expectedPods} {.status.desiredHealthy} {.status.disruptionsAllowed}",
            ])
            .await;
        if got == "3 1 2" {
            Ok(())
        } else {
            Err(got)
        }
    })
    .await;
    // A Service without a selector, its Endpoints written by hand: mirrored into a slice.
    let service = k.file(
        "external-service.json",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "external"}, "spec": {"ports": [{"port": 5432}]}}),
    );
    let endpoints = k.file(
        "external-endpoints.json",
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "external"},
               "subsets": [{"addresses": [{"ip": "192.168.7.7"}], "ports": [{"port": 5432}]}]}),
    );
    k.ok(&["create", "-f", &service]).await;
    k.ok(&["create", "-f", &endpoints]).await;
    eventually("the Endpoints to be mirrored", || async {
        let got = k
            .ok(&["get", "endpointslices", "-l", "kubernetes.io/service-name=external", "-o",
                  "jsonpath={.items[*].metadata.labels.endpointslice\\.kubernetes\\.io/managed-by} {.items[*].endpoints[*].addresses[0]}"])
            .await;
        if got == "endpointslicemirroring-controller.k8s.io 192.168.7.7" {
            Ok(())
        } else {
            Err(got)
        }
    })
    .await;
    eventually("the quota's usage", || async {
        let used = k.ok(&["get", "quota", "q", "-o", "jsonpath={.status.used}"]).await;
        let want = json!({"count/deployments.apps": "1", "pods": "3", "requests.cpu": "750m", "services": "2"});
        match serde_json::from_str::<Value>(&used) {
            Ok(v) if v == want => Ok(()),
            _ => Err(used),
        }
    })
    .await;
    // A service account token Secret gets its token, CA and namespace; it goes with its account.
    k.ok(&["create", "serviceaccount", "robot"]).await;
    let token = k.file(
        "token.json",
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
               "metadata": {"name": "robot-token", "annotations": {"kubernetes.io/service-account.name": "robot"}}}),
    );
    k.ok(&["create", "-f", &token]).await;
    let jwt = eventually("the token to be filled in", || async {
        let got = k.ok(&["get", "secret", "robot-token", "-o", "jsonpath={.data.token}"]).await;
        if got.is_empty() {
            Err("no token".to_string())
        } else {
            Ok(got)
        }
    })
    .await;
    use base64::Engine as _;
    let jwt = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(jwt).unwrap()).unwrap();
    let claims = jwt.split('.').nth(1).unwrap();
    let claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
    assert_eq!(claims["sub"], "system:serviceaccount:default:robot");
    let ns = k.ok(&["get", "secret", "robot-token", "-o", "jsonpath={.data.namespace}"]).await;
    assert_eq!(ns, base64::engine::general_purpose::STANDARD.encode("default"));
    k.ok(&["delete", "serviceaccount", "robot"]).await;
    eventually("the token to go with its account", || async {
        let left = k.run(&["get", "secret", "robot-token"]).await;
        if left.ok {
            Err(left.stdout)
        } else {
            Ok(())
        }
    })
    .await;
    // An aggregated ClusterRole gathers the rules of the roles it selects.
    let aggregate = k.file(
        "monitoring.json",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "monitoring"},
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"aggregate-to-monitoring": "true"}}]}}),
    );
    k.ok(&["create", "-f", &aggregate]).await;
    k.ok(&["create", "clusterrole", "pod-reader", "--verb=get,list", "--resource=pods"]).await;
    k.ok(&["label", "clusterrole", "pod-reader", "aggregate-to-monitoring=true"]).await;
    let rules = "jsonpath={.rules[*].resources} {.rules[*].verbs}";
    shows(&k, "the aggregated rules", &["get", "clusterrole", "monitoring", "-o", rules], r#"["pods"] ["get","list"]"#)
        .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_collection_and_nodes_going() {
    let dir = tempfile::tempdir().unwrap();
    let (running, k) = cluster(dir.path()).await;
    // A namespace's deletion deletes everything in it, then the namespace.
    k.ok(&["create", "namespace", "doomed"]).await;
    k.ok(&["create", "deployment", "x", "-n", "doomed", "--image=nginx", "--replicas=2"]).await;
    k.ok(&["create", "configmap", "c", "-n", "doomed", "--from-literal=a=b"]).await;
    eventually("the namespace's default account and pods", || async {
        let got = k.ok(&["get", "sa,pods", "-n", "doomed", "-o", "name"]).await;
        if got.contains("serviceaccount/default") && got.matches("pod/").count() == 2 {
            Ok(())
        } else {
            Err(got)
        }
    })
    .await;
    k.ok(&["delete", "namespace", "doomed", "--wait=false"]).await;
    eventually("the namespace and its content to go", || async {
        let ns = k.run(&["get", "namespace", "doomed"]).await;
        if !ns.ok && ns.stderr.contains("NotFound") {
            Ok(())
        } else {
            Err(ns.stdout)
        }
    })
    .await;

    // Foreground: the owner stays until its pods are gone; orphan: the pods stay, unowned.
    for name in ["front", "orphans"] {
        let rs = k.file(
            &format!("{name}.json"),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name}, "spec": {
                "replicas": 2, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "nginx"}]}}}}),
        );
        k.ok(&["create", "-f", &rs]).await;
        shows(&k, "two running pods", &["get", "rs", name, "-o", "jsonpath={.status.readyReplicas}"], "2").await;
    }
    k.ok(&["delete", "rs", "front", "--cascade=foreground", "--wait=false"]).await;
    shows(&k, "the owner to go after its pods", &["get", "rs,pods", "-l", "app=front", "-o", "name"], "").await;
    k.ok(&["delete", "rs", "orphans", "--cascade=orphan"]).await;
    eventually("the orphans to lose their owner", || async {
        let refs =
            k.ok(&["get", "pods", "-l", "app=orphans", "-o", "jsonpath={.items[*].metadata.ownerReferences}"]).await;
        let n = k.ok(&["get", "pods", "-l", "app=orphans", "-o", "name"]).await.lines().count();
        if n == 2 && refs.is_empty() {
            Ok(())
        } else {
            Err(format!("{n} {refs}"))
        }
    })
    .await;

    // A Node deleted through the API stays deleted; the pod collector removes its pods.
    let on_node = k.ok(&["get", "pods", "-l", "app=orphans", "-o", "jsonpath={.items[0].spec.nodeName}"]).await;
    k.ok(&["delete", "node", &on_node]).await;
    eventually("the deleted node's pods to be collected", || async {
        let pods = k.ok(&["get", "pods", "-A", "-o", "jsonpath={.items[*].spec.nodeName}"]).await;
        if pods.split_whitespace().all(|n| n != on_node) {
            Ok(())
        } else {
            Err(pods)
        }
    })
    .await;
    let nodes = k.ok(&["get", "nodes", "-o", "name"]).await;
    assert!(!nodes.contains(&format!("node/{on_node}")), "the node came back: {nodes}");
    assert_eq!(nodes.lines().count(), 2);
    running.stop().await;
}
