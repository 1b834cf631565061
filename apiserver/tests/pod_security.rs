//! PodSecurity admission through kubectl 1.32: namespace labels checked, pods refused by the
//! enforce level with kube's message, warned of by the warn level, workloads only warned of,
//! existing pods named when a namespace's enforce level is made stricter, and the audit level's
//! findings in the audit log.

mod common;

use common::Kubectl;
use serde_json::{json, Value};

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

/// A pod that passes the restricted level.
fn restricted_pod(name: &str) -> Value {
    pod(
        name,
        json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "image": "nginx", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}),
    )
}

fn bare_pod(name: &str) -> Value {
    pod(name, json!({"containers": [{"name": "app", "image": "nginx"}]}))
}

const LABEL: &str = "pod-security.kubernetes.io";
const RESTRICTED: &str = r#"allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_security_levels_through_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources:\n  - group: \"\"\n    resources: [pods]\n").unwrap();
    let log = dir.path().join("audit.log");
    let flags = [format!("--audit-policy-file={}", policy.display()), format!("--audit-log-path={}", log.display())];
    let (running, _client) = common::apiserver(dir.path(), &flags).await;
    let k =
        Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.path().join("cache"), files: dir.path().into() };

    // Labels that are no level or version are refused, and nothing is made.
    let bad = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bad",
        "labels": {format!("{LABEL}/enforce"): "strict", format!("{LABEL}/warn-version"): "1.25"}}});
    let e = k.fails(&["create", "-f", &k.file("bad.json", bad)]).await;
    assert!(
        e.contains(r#"The Namespace "bad" is invalid: "#)
            && e.contains(&format!(
                r#"metadata.labels[{LABEL}/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#
            ))
            && e.contains(&format!(r#"metadata.labels[{LABEL}/warn-version]: Invalid value: "1.25": must be "latest" or "v1.x""#)),
        "{e}"
    );
    assert!(k.fails(&["get", "namespace", "bad"]).await.contains("NotFound"));

    // A namespace at restricted: a bare pod is refused with every reason, a compliant one made.
    k.ok(&["create", "namespace", "locked"]).await;
    k.ok(&["create", "-f", &k.file("early.json", bare_pod("early")), "-n", "locked"]).await;
    let o = k.run(&["label", "namespace", "locked", &format!("{LABEL}/enforce=restricted")]).await;
    assert!(o.ok, "{}", o.stderr);
    for w in [
        r#"Warning: existing pods in namespace "locked" violate the new PodSecurity enforce level "restricted:latest""#,
        "Warning: early: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
    ] {
        assert!(o.stderr.contains(w), "{w} not in {}", o.stderr);
    }
    let e = k.fails(&["create", "-f", &k.file("bare.json", bare_pod("bare")), "-n", "locked"]).await;
    let want = format!(r#"pods "bare" is forbidden: violates PodSecurity "restricted:latest": {RESTRICTED}"#);
    assert!(e.contains(&want), "{e}");
    assert!(k.fails(&["get", "pod", "bare", "-n", "locked"]).await.contains("NotFound"));
    let o = k.run(&["create", "-f", &k.file("good.json", restricted_pod("good")), "-n", "locked"]).await;
    assert!(o.ok && !o.stderr.contains("Warning"), "{}", o.stderr);
    // An update that changes nothing that runs is not judged; one that changes an image is.
    k.ok(&["label", "pod", "early", "-n", "locked", "tier=old"]).await;
    let e = k.fails(&["set", "image", "pod/early", "-n", "locked", "app=nginx:2"]).await;
    assert!(e.contains(r#"violates PodSecurity "restricted:latest""#), "{e}");

    // Workloads are only warned of (warn follows enforce).
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "nginx"}]}}}});
    let o = k.run(&["create", "-f", &k.file("deploy.json", deployment), "-n", "locked"]).await;
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(r#"Warning: would violate PodSecurity "restricted:latest": {RESTRICTED}"#)),
        "{}",
        o.stderr
    );

    // Baseline: a privileged container with host networking is refused, a bare pod is not; a
    // warn level alone only warns.
    k.ok(&["create", "namespace", "base"]).await;
    k.ok(&["label", "namespace", "base", &format!("{LABEL}/enforce=baseline"), &format!("{LABEL}/warn=restricted")])
        .await;
    let privileged = pod(
        "root",
        json!({"hostNetwork": true, "containers": [{"name": "app", "image": "nginx",
            "securityContext": {"privileged": true}}]}),
    );
    let e = k.fails(&["create", "-f", &k.file("root.json", privileged), "-n", "base"]).await;
    assert!(
        e.contains(r#"pods "root" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), privileged (container "app" must not set securityContext.privileged=true)"#),
        "{e}"
    );
    let o = k.run(&["create", "-f", &k.file("plain.json", bare_pod("plain")), "-n", "base"]).await;
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stderr.contains(&format!(r#"Warning: would violate PodSecurity "restricted:latest": {RESTRICTED}"#)),
        "{}",
        o.stderr
    );

    // The audit level's findings land in the audit log.
    k.ok(&["create", "namespace", "watched"]).await;
    k.ok(&["label", "namespace", "watched", &format!("{LABEL}/audit=restricted")]).await;
    k.ok(&["create", "-f", &k.file("seen.json", bare_pod("seen")), "-n", "watched"]).await;
    let events: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|e: &Value| {
            e["stage"] == "ResponseComplete" && e["objectRef"]["name"] == "seen" && e["verb"] == "create"
        })
        .collect();
    let annotations = &events
        .first()
        .unwrap_or_else(|| panic!("no audit event: {}", std::fs::read_to_string(&log).unwrap()))["annotations"];
    assert_eq!(
        annotations[format!("{LABEL}/audit-violations")],
        json!(format!(r#"would violate PodSecurity "restricted:latest": {RESTRICTED}"#))
    );
    assert_eq!(annotations[format!("{LABEL}/enforce-policy")], json!("privileged:latest"));
    running.stop().await;
}
