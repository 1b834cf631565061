//! CustomResourceDefinitions through kubectl 1.32 and kube-rs: a definition served as soon as its
//! names are accepted, in discovery and OpenAPI; objects pruned, defaulted and validated by its
//! structural schema and CEL rules with kube's messages; printer columns, two versions, the
//! status and scale subresources; name conflicts; and deleting the definition deleting its
//! objects first.

mod common;

use std::time::Duration;

use common::{eventually, Kubectl};
use futures::TryStreamExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::WatchStreamExt as _;
use kube::CustomResourceExt;
use serde_json::{json, Value};

fn crontab_crd() -> Value {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"},
                    {"rule": "self.cronSpec == oldSelf.cronSpec || !self.locked", "message": "cronSpec is locked"},
                ],
                "required": ["cronSpec"],
                "properties": {
                    "cronSpec": {"type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"},
                    "image": {"type": "string"},
                    "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                    "maxReplicas": {"type": "integer", "default": 5},
                    "locked": {"type": "boolean", "default": false},
                    "color": {"type": "string", "enum": ["red", "blue"]},
                },
            },
            "status": {
                "type": "object",
                "properties": {"replicas": {"type": "integer"}, "selector": {"type": "string"}},
            },
        },
    });
    let version = |name: &str, storage: bool| {
        json!({
            "name": name, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": schema},
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
            "additionalPrinterColumns": [
                {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
                {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        })
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab", "shortNames": ["ct"]},
            "versions": [version("v1", true), version("v1beta1", false)],
        },
    })
}

fn crontab(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab", "metadata": {"name": name, "namespace": "default"},
        "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resource_lifecycle_through_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let (running, _client) = common::apiserver(dir.path(), &[]).await;
    let k =
        Kubectl { kubeconfig: running.kubeconfig.clone(), cache: dir.path().join("cache"), files: dir.path().into() };

    // A definition kube refuses.
    let mut bad = crontab_crd();
    bad["metadata"]["name"] = json!("tabs.stable.example.com");
    let err = k.fails(&["create", "-f", &k.file("bad-crd.json", bad)]).await;
    assert!(
        err.contains(
            "metadata.name: Invalid value: \"tabs.stable.example.com\": must be spec.names.plural+\".\"+spec.group"
        ),
        "{err}"
    );

    // A schema that is not structural (a property without a type), refused as kube refuses it.
    let mut loose = crontab_crd();
    loose["spec"]["versions"] = json!([{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema":
        {"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}}}}]);
    let err = k.fails(&["create", "-f", &k.file("loose-crd.json", loose)]).await;
    assert!(
        err.contains("spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"),
        "{err}"
    );

    k.ok(&["create", "-f", &k.file("crd.json", crontab_crd())]).await;
    k.ok(&["wait", "--for=condition=Established", "crd/crontabs.stable.example.com", "--timeout=30s"]).await;
    let crd: Value =
        serde_json::from_str(&k.ok(&["get", "crd", "crontabs.stable.example.com", "-o", "json"]).await).unwrap();
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "CronTab");
    let names = crd["status"]["conditions"].as_array().unwrap();
    assert!(names
        .iter()
        .any(|c| c["type"] == "NamesAccepted" && c["status"] == "True" && c["reason"] == "NoConflicts"));

    // Discovery (kubectl's, aggregated) and OpenAPI.
    let resources = k.ok(&["api-resources", "--api-group=stable.example.com", "--no-headers"]).await;
    let row: Vec<&str> = resources.split_whitespace().collect();
    assert_eq!(row, ["crontabs", "ct", "stable.example.com/v1", "true", "CronTab"], "{resources}");
    let versions = k.ok(&["api-versions"]).await;
    assert!(
        versions.contains("stable.example.com/v1\n") && versions.contains("stable.example.com/v1beta1\n"),
        "{versions}"
    );
    let explained = k.ok(&["explain", "crontabs.spec.replicas"]).await;
    assert!(
        explained.contains("KIND:       CronTab") && explained.contains("FIELD: replicas <integer>"),
        "{explained}"
    );

    // Defaults, pruning (kube's unknown-field warnings), and a list in both versions.
    let created = k
        .run(&[
            "create",
            "--validate=warn",
            "-f",
            &k.file("a.json", crontab("a", json!({"cronSpec": "*/5 * * * *", "bogus": 1}))),
        ])
        .await;
    assert!(created.ok, "{}", created.stderr);
    assert!(created.stderr.contains("unknown field \"spec.bogus\""), "{}", created.stderr);
    let a: Value = serde_json::from_str(&k.ok(&["get", "crontab", "a", "-o", "json"]).await).unwrap();
    assert_eq!(a["spec"], json!({"cronSpec": "*/5 * * * *", "replicas": 1, "maxReplicas": 5, "locked": false}));
    assert_eq!(a["metadata"]["generation"], 1);
    let beta: Value =
        serde_json::from_str(&k.ok(&["get", "crontabs.v1beta1.stable.example.com", "a", "-o", "json"]).await).unwrap();
    assert_eq!(beta["apiVersion"], "stable.example.com/v1beta1");
    assert_eq!(beta["spec"], a["spec"]);
    let strict = k
        .fails(&[
            "create",
            "--validate=strict",
            "-f",
            &k.file("s.json", crontab("s", json!({"cronSpec": "* * * * *", "bogus": 1}))),
        ])
        .await;
    assert!(strict.contains("unknown field \"spec.bogus\""), "{strict}");

    // Printer columns.
    let table = k.ok(&["get", "ct"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), ["NAME", "SPEC", "REPLICAS", "AGE"], "{table}");
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&row[..7], ["a", "*/5", "*", "*", "*", "*", "1"], "{table}");

    // Schema and rule errors: kube's 422s, nothing stored.
    let err = k
        .fails(&[
            "create",
            "-f",
            &k.file("b.json", crontab("b", json!({"cronSpec": "nope", "replicas": 20, "color": "pink"}))),
        ])
        .await;
    assert!(err.contains("The CronTab \"b\" is invalid: "), "{err}");
    assert!(
        err.contains("spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10"),
        "{err}"
    );
    assert!(err.contains("spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\""), "{err}");
    assert!(err.contains("spec.cronSpec: Invalid value: \"nope\": spec.cronSpec in body should match"), "{err}");
    // The value outside its enum kept the rules from running, and kube says so.
    assert!(err.contains("<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"), "{err}");
    let err = k.fails(&["create", "-f", &k.file("c.json", crontab("c", json!({"replicas": 1})))]).await;
    assert!(err.contains("spec.cronSpec: Required value"), "{err}");
    let err = k
        .fails(&["create", "-f", &k.file("d.json", crontab("d", json!({"cronSpec": "* * * * *", "replicas": 7})))])
        .await;
    assert!(
        err.contains(
            "The CronTab \"d\" is invalid: spec: Invalid value: \"object\": replicas must not exceed maxReplicas"
        ),
        "{err}"
    );
    k.fails(&["get", "crontab", "b"]).await;

    // A transition rule holds on update only.
    k.ok(&["patch", "crontab", "a", "--type=merge", "-p", r#"{"spec":{"locked":true}}"#]).await;
    let err = k.fails(&["patch", "crontab", "a", "--type=merge", "-p", r#"{"spec":{"cronSpec":"1 * * * *"}}"#]).await;
    assert!(err.contains("spec: Invalid value: \"object\": cronSpec is locked"), "{err}");
    // Patches: JSON patch and merge patch; a strategic merge patch is refused as kube does.
    k.ok(&["patch", "crontab", "a", "--type=json", "-p", r#"[{"op":"add","path":"/spec/image","value":"busybox"}]"#])
        .await;
    let err = k.fails(&["patch", "crontab", "a", "--type=strategic", "-p", r#"{"spec":{"image":"x"}}"#]).await;
    assert!(err.contains("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json"), "{err}");
    let a: Value = serde_json::from_str(&k.ok(&["get", "crontab", "a", "-o", "json"]).await).unwrap();
    assert_eq!(a["spec"]["image"], "busybox");
    assert_eq!(a["metadata"]["generation"], 3, "spec changes move the generation");

    // Status: only through its subresource; scale through its paths.
    k.ok(&["patch", "crontab", "a", "--type=merge", "-p", r#"{"status":{"replicas":9}}"#]).await;
    let a: Value = serde_json::from_str(&k.ok(&["get", "crontab", "a", "-o", "json"]).await).unwrap();
    assert!(a.get("status").is_none(), "{a}");
    k.ok(&[
        "patch",
        "crontab",
        "a",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":2,"selector":"app=a"}}"#,
    ])
    .await;
    k.ok(&["scale", "crontab", "a", "--replicas=4"]).await;
    let a: Value = serde_json::from_str(&k.ok(&["get", "crontab", "a", "-o", "json"]).await).unwrap();
    assert_eq!((a["spec"]["replicas"].as_i64(), a["status"]["replicas"].as_i64()), (Some(4), Some(2)));
    let scale: Value = serde_json::from_str(
        &k.ok(&["get", "--raw", "/apis/stable.example.com/v1/namespaces/default/crontabs/a/scale"]).await,
    )
    .unwrap();
    assert_eq!(scale["spec"]["replicas"], 4);
    assert_eq!(scale["status"], json!({"replicas": 2, "selector": "app=a"}));
    let err = k.fails(&["scale", "crontab", "a", "--replicas=11"]).await;
    assert!(err.contains("spec.replicas in body should be less than or equal to 10"), "{err}");

    // Cluster-scoped definitions, and a name another definition of the group holds.
    let cluster = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "tabs.stable.example.com"},
        "spec": {"group": "stable.example.com", "scope": "Cluster",
            "names": {"plural": "tabs", "kind": "CronTab"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    k.ok(&["create", "-f", &k.file("tabs.json", cluster)]).await;
    let conflict = eventually("the second definition's names are refused", || async {
        let crd: Value =
            serde_json::from_str(&k.ok(&["get", "crd", "tabs.stable.example.com", "-o", "json"]).await).unwrap();
        let c = crd["status"]["conditions"].as_array().cloned().unwrap_or_default();
        c.into_iter().find(|c| c["type"] == "NamesAccepted").ok_or_else(|| format!("{crd}"))
    })
    .await;
    assert_eq!(conflict["status"], "False");
    assert_eq!(conflict["reason"], "ListKindConflict");
    assert_eq!(conflict["message"], "\"CronTabList\" is already in use");
    k.ok(&["delete", "crd", "tabs.stable.example.com"]).await;
    let things = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.other.example.com"},
        "spec": {"group": "other.example.com", "scope": "Cluster",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    k.ok(&["create", "-f", &k.file("things.json", things)]).await;
    k.ok(&["wait", "--for=condition=Established", "crd/things.other.example.com", "--timeout=30s"]).await;
    let thing = json!({"apiVersion": "other.example.com/v1", "kind": "Thing", "metadata": {"name": "t1"}, "anything": {"goes": [1, 2]}});
    k.ok(&["create", "-f", &k.file("t1.json", thing)]).await;
    let t1: Value = serde_json::from_str(&k.ok(&["get", "thing", "t1", "-o", "json"]).await).unwrap();
    assert_eq!(t1["anything"], json!({"goes": [1, 2]}));
    assert!(t1["metadata"].get("namespace").is_none());
    let table = k.ok(&["get", "things"]).await;
    assert_eq!(table.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(), ["NAME", "AGE"], "{table}");

    // Deleting the definition deletes its objects first, then it goes; a new one starts empty.
    k.ok(&["create", "-f", &k.file("e.json", crontab("e", json!({"cronSpec": "* * * * *"})))]).await;
    k.ok(&["delete", "crd", "crontabs.stable.example.com", "--timeout=60s"]).await;
    k.fails(&["get", "crd", "crontabs.stable.example.com"]).await;
    let gone = k.fails(&["get", "--raw", "/apis/stable.example.com/v1/namespaces/default/crontabs"]).await;
    assert!(gone.contains("NotFound") || gone.contains("not found"), "{gone}");
    k.ok(&["create", "-f", &k.file("crd.json", crontab_crd())]).await;
    k.ok(&["wait", "--for=condition=Established", "crd/crontabs.stable.example.com", "--timeout=30s"]).await;
    let left = k.ok(&["get", "crontabs", "-A", "-o", "name"]).await;
    assert_eq!(left.trim(), "", "the objects went with the first definition");
}

/// A type made with kube-rs's `CustomResource` derive.
#[derive(kube::CustomResource, serde::Serialize, serde::Deserialize, Clone, Debug, schemars::JsonSchema)]
#[kube(
    group = "kube.rs",
    version = "v1",
    kind = "Document",
    namespaced,
    status = "DocumentStatus",
    shortname = "doc",
    printcolumn = r#"{"name":"Title","type":"string","jsonPath":".spec.title"}"#
)]
pub struct DocumentSpec {
    title: String,
    #[serde(default)]
    pages: i64,
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, schemars::JsonSchema)]
pub struct DocumentStatus {
    published: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_derived_custom_resources() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let dir = tempfile::tempdir().unwrap();
    let gc = ["--controllers=garbage-collector-controller".to_string()];
    let (_running, client) = common::apiserver(dir.path(), &gc).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let made = crds.create(&PostParams::default(), &Document::crd()).await.unwrap();
    let uid = made.metadata.uid.clone().unwrap();
    let established = await_condition(crds.clone(), "documents.kube.rs", conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(30), established).await.expect("established in time").unwrap();

    let docs: Api<Document> = Api::namespaced(client.clone(), "default");
    let mut watch = Box::pin(kube::runtime::watcher(docs.clone(), Default::default()).applied_objects());
    let doc = Document::new("guide", DocumentSpec { title: "A guide".into(), pages: 3 });
    docs.create(&PostParams::default(), &doc).await.unwrap();
    let seen =
        tokio::time::timeout(Duration::from_secs(30), watch.try_next()).await.expect("an event").unwrap().unwrap();
    assert_eq!(seen.spec.title, "A guide");

    let patch = json!({"status": {"published": true}});
    docs.patch_status("guide", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let got = docs.get("guide").await.unwrap();
    assert!(got.status.unwrap().published);
    let listed = docs.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);

    // The garbage collector follows owner references to custom objects.
    let temp = docs
        .create(&PostParams::default(), &Document::new("temp", DocumentSpec { title: "t".into(), pages: 1 }))
        .await
        .unwrap();
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "default");
    let owned = serde_json::from_value(json!({"metadata": {"name": "owned", "ownerReferences": [{
        "apiVersion": "kube.rs/v1", "kind": "Document", "name": "temp", "uid": temp.metadata.uid.clone().unwrap()}]}}))
    .unwrap();
    maps.create(&PostParams::default(), &owned).await.unwrap();
    docs.delete("temp", &DeleteParams::default()).await.unwrap();
    eventually("the owned ConfigMap is collected", || async {
        match maps.get_opt("owned").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // Deleting the definition takes its documents with it.
    crds.delete("documents.kube.rs", &DeleteParams::default()).await.unwrap();
    let gone = await_condition(crds.clone(), "documents.kube.rs", conditions::is_deleted(&uid));
    tokio::time::timeout(Duration::from_secs(30), gone).await.expect("deleted in time").unwrap();
    eventually("documents are no longer served", || async {
        match docs.list(&Default::default()).await {
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}
