//! Server-side apply through kubectl 1.32: objects created and changed by `apply --server-side`,
//! `metadata.managedFields` kept on every write, conflicts between managers refused with kube's
//! 409 (and taken over with `--force-conflicts`), fields a manager stops applying removed, map
//! lists merged by key, `kubectl diff`, the move from client-side apply, and custom resources.

mod common;

use common::Kubectl;
use serde_json::{json, Value};

fn managers(v: &Value) -> Vec<(String, String)> {
    v["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| (e["manager"].as_str().unwrap_or("").to_string(), e["operation"].as_str().unwrap_or("").to_string()))
        .collect()
}

async fn get(k: &Kubectl, what: &[&str]) -> Value {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", "json", "--show-managed-fields"]);
    serde_json::from_str(&k.ok(&args).await).unwrap()
}

fn configmap(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}, "data": data})
}

fn deployment(image: &str, replicas: Option<i64>) -> Value {
    let mut d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": image}]}},
        },
    });
    if let Some(n) = replicas {
        d["spec"]["replicas"] = json!(n);
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_through_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let (running, _client) = common::apiserver(dir.path(), &[]).await;
    let k =
        Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.path().join("cache"), files: dir.path().into() };

    // Every write records its manager: kubectl's own names for create, and Apply for apply.
    k.ok(&["create", "configmap", "made", "--from-literal=a=1"]).await;
    let made = get(&k, &["configmap", "made"]).await;
    assert_eq!(managers(&made), [("kubectl-create".to_string(), "Update".to_string())]);
    let entry = &made["metadata"]["managedFields"][0];
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert_eq!(entry["fieldsV1"], json!({"f:data": {".": {}, "f:a": {}}}));

    let out =
        k.ok(&["apply", "--server-side", "-f", &k.file("cm1.json", configmap(json!({"a": "1", "b": "2"})))]).await;
    assert_eq!(out.trim(), "configmap/cfg serverside-applied");
    let cfg = get(&k, &["configmap", "cfg"]).await;
    assert_eq!(managers(&cfg), [("kubectl".to_string(), "Apply".to_string())]);
    assert_eq!(cfg["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:data": {"f:a": {}, "f:b": {}}}));

    // Another manager changing a field kubectl applied: kube's conflict, naming field and owner.
    let err = k
        .fails(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &k.file("cm2.json", configmap(json!({"a": "9"}))),
        ])
        .await;
    // kubectl's is an Apply entry: named without a version (an Update one says `using <version>`).
    assert!(err.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .data.a"), "{err}");
    assert_eq!(get(&k, &["configmap", "cfg"]).await["data"]["a"], "1", "a refused apply changes nothing");
    // Forced, the field changes hands; the same value applied by both is shared, not a conflict.
    k.ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=other",
        "-f",
        &k.file("cm2.json", configmap(json!({"a": "9"}))),
    ])
    .await;
    k.ok(&["apply", "--server-side", "--field-manager=third", "-f", &k.file("cm3.json", configmap(json!({"b": "2"})))])
        .await;
    let cfg = get(&k, &["configmap", "cfg"]).await;
    assert_eq!(cfg["data"], json!({"a": "9", "b": "2"}));
    let owners = cfg["metadata"]["managedFields"].as_array().unwrap();
    let of = |m: &str| owners.iter().find(|e| e["manager"] == m).map(|e| e["fieldsV1"].clone());
    assert_eq!(of("kubectl"), Some(json!({"f:data": {"f:b": {}}})));
    assert_eq!(of("other"), Some(json!({"f:data": {"f:a": {}}})));
    assert_eq!(of("third"), Some(json!({"f:data": {"f:b": {}}})));

    // A field its only owner stops applying goes; one still owned by another stays.
    k.ok(&["apply", "--server-side", "--field-manager=other", "-f", &k.file("cm4.json", configmap(json!({"c": "3"})))])
        .await;
    k.ok(&["apply", "--server-side", "-f", &k.file("cm5.json", configmap(json!({})))]).await;
    assert_eq!(get(&k, &["configmap", "cfg"]).await["data"], json!({"b": "2", "c": "3"}));

    // Map lists merge by key: a second manager's container field is its own, and a change to
    // the first's is a conflict naming the list item.
    k.ok(&["apply", "--server-side", "-f", &k.file("d1.json", deployment("nginx:1.25", Some(2)))]).await;
    let err = k
        .fails(&[
            "apply",
            "--server-side",
            "--field-manager=ci",
            "-f",
            &k.file("d2.json", deployment("nginx:1.27", None)),
        ])
        .await;
    assert!(err.contains("conflict with \"kubectl\": .spec.template.spec.containers[name=\"nginx\"].image"), "{err}");
    k.ok(&["scale", "deployment", "web", "--replicas=3"]).await;
    let err = k.fails(&["apply", "--server-side", "-f", &k.file("d1.json", deployment("nginx:1.25", Some(2)))]).await;
    // kubectl scale names no manager: it is the User-Agent's first part (this kubectl's binary name).
    assert!(err.contains("with subresource \"scale\" using apps/v1: .spec.replicas"), "{err}");

    // An apply of the status subresource owns the status only, under its own entry.
    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
        "status": {"observedGeneration": 1}});
    k.ok(&[
        "apply",
        "--server-side",
        "--subresource=status",
        "--field-manager=reporter",
        "-f",
        &k.file("st.json", status),
    ])
    .await;
    let d = get(&k, &["deployment", "web"]).await;
    assert_eq!(d["status"]["observedGeneration"], 1);
    let reporter =
        d["metadata"]["managedFields"].as_array().unwrap().iter().find(|e| e["manager"] == "reporter").cloned();
    let reporter = reporter.expect("the status applier's entry");
    assert_eq!((reporter["operation"].as_str(), reporter["subresource"].as_str()), (Some("Apply"), Some("status")));
    assert_eq!(reporter["fieldsV1"], json!({"f:status": {"f:observedGeneration": {}}}));

    // kubectl diff: the server's dry-run apply shows what would change and stores nothing.
    let diff = k
        .run(&[
            "diff",
            "--server-side",
            "--force-conflicts",
            "-f",
            &k.file("d3.json", deployment("nginx:1.28", Some(3))),
        ])
        .await;
    assert!(!diff.ok, "diff exits 1 when something differs: {}", diff.stderr);
    assert!(
        diff.stdout.contains("-      - image: nginx:1.25") && diff.stdout.contains("+      - image: nginx:1.28"),
        "{}",
        diff.stdout
    );
    let d = get(&k, &["deployment", "web"]).await;
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.25");

    // From client-side apply to server-side apply: kubectl's fields move over without conflicts.
    let csa = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old", "namespace": "default"}, "data": {"x": "1"}});
    k.ok(&["apply", "-f", &k.file("old1.json", csa.clone())]).await;
    let old = get(&k, &["configmap", "old"]).await;
    assert_eq!(managers(&old), [("kubectl-client-side-apply".to_string(), "Update".to_string())]);
    let mut changed = csa;
    changed["data"]["x"] = json!("2");
    k.ok(&["apply", "--server-side", "-f", &k.file("old2.json", changed)]).await;
    let old = get(&k, &["configmap", "old"]).await;
    assert_eq!(old["data"]["x"], "2");
    assert!(managers(&old).contains(&("kubectl".to_string(), "Apply".to_string())), "{:?}", managers(&old));

    // Custom resources apply the same way, merged by their schema.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {
                    "size": {"type": "integer"},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}}}}}}}}]},
    });
    k.ok(&["create", "-f", &k.file("crd.json", crd)]).await;
    k.ok(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=30s"]).await;
    let widget = |ports: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}, "spec": {"ports": ports}});
    k.ok(&["apply", "--server-side", "-f", &k.file("w1.json", widget(json!([{"name": "http", "port": 80}])))]).await;
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "-f",
        &k.file("w2.json", widget(json!([{"name": "https", "port": 443}]))),
    ])
    .await;
    let w = get(&k, &["widget", "w"]).await;
    assert_eq!(w["spec"]["ports"], json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]));
    let err = k
        .fails(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &k.file("w3.json", widget(json!([{"name": "http", "port": 8080}]))),
        ])
        .await;
    assert!(err.contains("conflict with \"kubectl\": .spec.ports[name=\"http\"].port"), "{err}");
}
