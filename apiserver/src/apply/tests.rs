//! Server-side apply against kube's own samples and texts. Each asserted text names the Go
//! function it comes from.

use serde_json::{json, Map, Value};

use super::managed::identifier;
use super::schema::{ListType, MapType, Scalar};
use super::*;

const SCHEMAS: &str = r##"{
 "ConfigMap": {"type": "object", "properties": {
   "apiVersion": {"type": "string"}, "kind": {"type": "string"},
   "metadata": {"$ref": "#/components/schemas/ObjectMeta", "description": "meta"},
   "data": {"type": "object", "additionalProperties": {"type": "string"}}}},
 "ObjectMeta": {"type": "object", "properties": {
   "name": {"type": "string"}, "namespace": {"type": "string"}, "uid": {"type": "string"},
   "resourceVersion": {"type": "string"}, "generation": {"type": "integer", "format": "int64"},
   "creationTimestamp": {"type": "string", "format": "date-time"},
   "labels": {"type": "object", "additionalProperties": {"type": "string"}},
   "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
   "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"},
   "ownerReferences": {"type": "array", "items": {"type": "object", "properties": {"uid": {"type": "string"}, "name": {"type": "string"}}},
     "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge"},
   "managedFields": {"type": "array", "items": {"$ref": "#/components/schemas/ManagedFieldsEntry"}}}},
 "ManagedFieldsEntry": {"type": "object", "properties": {
   "manager": {"type": "string"}, "operation": {"type": "string"}, "apiVersion": {"type": "string"},
   "time": {"type": "string", "format": "date-time"}, "fieldsType": {"type": "string"},
   "fieldsV1": {"type": "object"}, "subresource": {"type": "string"}}},
 "Deployment": {"type": "object", "properties": {
   "apiVersion": {"type": "string"}, "kind": {"type": "string"},
   "metadata": {"$ref": "#/components/schemas/ObjectMeta"},
   "spec": {"$ref": "#/components/schemas/DeploymentSpec"},
   "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}},
 "DeploymentSpec": {"type": "object", "properties": {
   "replicas": {"type": "integer"}, "progressDeadlineSeconds": {"type": "integer"},
   "revisionHistoryLimit": {"type": "integer"},
   "selector": {"$ref": "#/components/schemas/LabelSelector"},
   "strategy": {"type": "object", "properties": {"type": {"type": "string"},
     "rollingUpdate": {"type": "object", "properties": {
       "maxSurge": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
       "maxUnavailable": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}}}}},
   "template": {"type": "object", "properties": {
     "metadata": {"$ref": "#/components/schemas/ObjectMeta"},
     "spec": {"$ref": "#/components/schemas/PodSpec"}}}}},
 "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"x-kubernetes-int-or-string": true},
 "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
 "LabelSelector": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
   "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
 "Pod": {"type": "object", "properties": {
   "apiVersion": {"type": "string"}, "kind": {"type": "string"},
   "metadata": {"$ref": "#/components/schemas/ObjectMeta"},
   "spec": {"allOf": [{"$ref": "#/components/schemas/PodSpec"}]},
   "status": {"type": "object"}}},
 "PodSpec": {"type": "object", "properties": {
   "containers": {"type": "array", "items": {"$ref": "#/components/schemas/Container"},
     "x-kubernetes-patch-merge-key": "name", "x-kubernetes-patch-strategy": "merge"},
   "dnsPolicy": {"type": "string"}, "restartPolicy": {"type": "string"}, "schedulerName": {"type": "string"},
   "terminationGracePeriodSeconds": {"type": "integer"},
   "securityContext": {"type": "object", "properties": {"runAsUser": {"type": "integer"}}},
   "tolerations": {"type": "array", "items": {"type": "object", "properties": {"key": {"type": "string"}}}},
   "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}, "x-kubernetes-map-type": "atomic"}}},
 "Container": {"type": "object", "properties": {
   "name": {"type": "string"}, "image": {"type": "string"}, "imagePullPolicy": {"type": "string"},
   "terminationMessagePath": {"type": "string"}, "terminationMessagePolicy": {"type": "string"},
   "args": {"type": "array", "items": {"type": "string"}},
   "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
     "items": {"type": "object", "properties": {"containerPort": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}}}},
   "resources": {"type": "object", "properties": {"limits": {"type": "object",
     "additionalProperties": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"}}}}}},
 "JSONSchemaProps": {"type": "object", "properties": {"type": {"type": "string"},
   "properties": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/JSONSchemaProps"}},
   "items": {"allOf": [{"$ref": "#/components/schemas/JSONSchemaProps"}]}}},
 "Loop": {"$ref": "#/components/schemas/Loop"},
 "Widget": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
   "properties": {"size": {"type": "integer"}}}}}
}"##;

/// kube-apiserver's managedFields entry for `kubectl create deployment example-web --image=...`
/// (a real response body; written by `encodeManagedFields` / `Set.ToJSON`).
const KUBECTL_CREATE: &str = r#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:progressDeadlineSeconds":{},"f:replicas":{},"f:revisionHistoryLimit":{},"f:selector":{},"f:strategy":{"f:rollingUpdate":{".":{},"f:maxSurge":{},"f:maxUnavailable":{}},"f:type":{}},"f:template":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"example-web\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}}}"#;

const NOW: &str = "2024-05-01T12:00:00Z";
const LATER: &str = "2024-05-01T13:00:00Z";

fn schemas() -> Map<String, Value> {
    serde_json::from_str(SCHEMAS).unwrap()
}

/// Go's zero Deployment as kube's `New()` serializes it.
fn empty_deployment() -> Value {
    json!({"metadata": {"creationTimestamp": null},
        "spec": {"selector": null, "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": null}}, "strategy": {}},
        "status": {}})
}

fn empty_meta() -> Value {
    json!({"metadata": {"creationTimestamp": null}})
}

struct Fixture {
    schemas: Map<String, Value>,
    reset: Set,
    empty: Value,
}

impl Fixture {
    fn new(empty: Value, reset: &[&[&str]]) -> Self {
        let mut set = Set::new();
        for p in reset {
            set.insert(&Path::fields(p).0);
        }
        Fixture { schemas: schemas(), reset: set, empty }
    }

    fn ctx<'a>(&'a self, kind: &'a str, api_version: &'a str, now: &'a str) -> Context<'a> {
        let types = Types::new(&self.schemas);
        Context {
            types,
            root: types.named(kind).unwrap(),
            api_version,
            kind,
            subresource: "",
            reset: &self.reset,
            empty: &self.empty,
            now,
        }
    }
}

fn fields_of(managed: &ManagedFields, manager: &str, operation: Operation) -> String {
    managed.find(manager, operation).map(|e| e.fields.to_fields_v1()).unwrap_or_default()
}

fn do_apply(
    ctx: &Context<'_>,
    live: &Value,
    config: &Value,
    manager: &str,
    force: bool,
) -> Result<(Value, ManagedFields), ApplyError> {
    let managed = ManagedFields::from_object(live).unwrap();
    apply(ctx, live, config, managed, manager, force)
}

fn map_of<'a>(types: &Types<'a>, tr: TypeRef<'a>) -> MapType<'a> {
    match types.resolve(tr) {
        Atom::Map(m) => m,
        other => panic!("not a map: {other:?}"),
    }
}

fn list_of<'a>(types: &Types<'a>, tr: TypeRef<'a>) -> ListType<'a> {
    match types.resolve(tr) {
        Atom::List(l) => l,
        other => panic!("not a list: {other:?}"),
    }
}

fn keys_of(list: &ListType<'_>) -> Option<Vec<String>> {
    match list.kind() {
        ListKind::Map(keys) => Some(keys.names().into_iter().map(str::to_string).collect()),
        _ => None,
    }
}

/// kube-openapi's `schemaconv` rules: list types, the patch-strategy fallback, atomic maps,
/// int-or-string, preserve-unknown-fields, and recursion without end.
#[test]
fn types_follow_kubes_markers() {
    let s = schemas();
    let types = Types::new(&s);
    let deploy = map_of(&types, types.named("Deployment").unwrap());
    let spec = map_of(&types, deploy.child("spec"));
    assert!(spec.declares("replicas") && !spec.allows_other_keys());
    assert!(map_of(&types, spec.child("selector")).is_atomic(), "the definition's map type");
    let pod_spec = map_of(&types, map_of(&types, types.named("Pod").unwrap()).child("spec"));
    let containers = list_of(&types, pod_spec.child("containers"));
    assert_eq!(keys_of(&containers), Some(vec!["name".to_string()]), "patch merge key makes a map list");
    assert!(list_of(&types, pod_spec.child("tolerations")).is_atomic());
    assert!(map_of(&types, pod_spec.child("nodeSelector")).is_atomic());
    let container = map_of(&types, containers.elem());
    let ports = list_of(&types, container.child("ports"));
    assert_eq!(keys_of(&ports), Some(vec!["containerPort".to_string(), "protocol".to_string()]));
    let meta = map_of(&types, deploy.child("metadata"));
    assert!(matches!(list_of(&types, meta.child("finalizers")).kind(), ListKind::Set), "list type wins");
    assert!(keys_of(&list_of(&types, meta.child("ownerReferences"))).is_some());
    assert!(map_of(&types, meta.child("labels")).allows_other_keys());
    let rolling = map_of(&types, map_of(&types, spec.child("strategy")).child("rollingUpdate"));
    assert!(matches!(types.resolve(rolling.child("maxSurge")), Atom::Scalar(Scalar::Untyped)));
    let limits = map_of(&types, map_of(&types, container.child("resources")).child("limits"));
    assert!(matches!(types.resolve(limits.child("cpu")), Atom::Scalar(Scalar::Untyped)), "Quantity is a scalar");
    // JSONSchemaProps holds itself, through additionalProperties and allOf.
    let mut props = types.named("JSONSchemaProps").unwrap();
    for _ in 0..50 {
        let m = map_of(&types, props);
        props = map_of(&types, m.child("properties")).child("anything");
        props = map_of(&types, props).child("items");
    }
    assert!(matches!(types.resolve(types.named("Loop").unwrap()), Atom::Any(..)), "a cycle of refs is deduced");
    let widget = map_of(&types, map_of(&types, types.named("Widget").unwrap()).child("spec"));
    assert!(widget.declares("size") && widget.allows_other_keys());
    match Types::default().resolve(TypeRef::DEDUCED) {
        Atom::Any(_, m, l) => assert!(!m.is_atomic() && l.is_atomic()),
        other => panic!("deduced is {other:?}"),
    }
}

/// A real kube managedFields entry decodes and encodes back byte for byte (SMD's
/// `Set.FromJSON` / `Set.ToJSON`), and key order is SMD's, not the text's.
#[test]
fn fields_v1_round_trips_as_kube_writes_it() {
    let set = Set::from_fields_v1_str(KUBECTL_CREATE).unwrap();
    assert_eq!(set.to_fields_v1(), KUBECTL_CREATE);
    let image = PathElement::key([("name".to_string(), json!("example-web"))]);
    let mut path = Path::fields(&["spec", "template", "spec", "containers"]).0;
    path.push(image);
    assert!(set.has(&path), "a list item is a member");
    path.push(PathElement::Field("image".into()));
    assert!(set.has(&path));
    assert!(!set.has(&Path::fields(&["spec", "template"]).0), "a parent is not");
    assert_eq!(Set::from_fields_v1(&set.to_fields_v1_value()).unwrap(), set);

    // Numbers by value (80 before 443), and field < key < value < index.
    let ports = r#"{"f:a":{},"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{},"k:{\"containerPort\":443,\"protocol\":\"TCP\"}":{},"v:\"x\"":{},"i:2":{}}"#;
    assert_eq!(Set::from_fields_v1_str(ports).unwrap().to_fields_v1(), ports);
    // Unknown element types are dropped; malformed ones are errors (`DeserializePathElement`).
    assert_eq!(Set::from_fields_v1_str(r#"{"x:y":{},"f:a":{}}"#).unwrap().to_fields_v1(), r#"{"f:a":{}}"#);
    assert!(Set::from_fields_v1_str(r#"{"f":{}}"#).unwrap_err().contains("key must be 2 characters long:"));
    assert!(Set::from_fields_v1_str(r#"{"fa":{}}"#).unwrap_err().contains("missing colon: fa"));
    assert_eq!(Set::new().to_fields_v1(), "{}");

    // The whole entry, as kube writes and reads it (`encodeManagedFields`, `DecodeManagedFields`).
    let entry = json!({"manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
        "time": "2022-11-14T14:31:13Z", "fieldsType": "FieldsV1", "fieldsV1": serde_json::from_str::<Value>(KUBECTL_CREATE).unwrap()});
    let managed = ManagedFields::decode(&json!([entry])).unwrap();
    assert_eq!(managed.encode().unwrap(), json!([entry]));
    let e = managed.find("kubectl-create", Operation::Update).unwrap();
    assert_eq!(e.identifier(), r#"{"manager":"kubectl-create","operation":"Update","apiVersion":"apps/v1"}"#);
    let bad = |entry: Value| ManagedFields::decode(&json!([entry])).unwrap_err();
    assert_eq!(
        bad(json!({"operation": "Patch", "apiVersion": "v1", "fieldsType": "FieldsV1"})),
        "operation must be `Apply` or `Update`"
    );
    assert_eq!(bad(json!({"operation": "Apply", "fieldsType": "FieldsV1"})), "apiVersion must not be empty");
    assert_eq!(bad(json!({"operation": "Apply", "apiVersion": "v1"})), "missing fieldsType in managed fields entry 0");
    assert_eq!(
        bad(json!({"operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV2"})),
        "invalid fieldsType \"FieldsV2\" in managed fields entry 0"
    );
}

/// Paths print as `fieldpath.Path.String` prints them.
#[test]
fn paths_print_as_kube_prints_them() {
    let mut p = Path::fields(&["spec", "containers"]);
    p.0.push(PathElement::key([("name".to_string(), json!("nginx"))]));
    p.0.push(PathElement::Field("image".into()));
    assert_eq!(p.to_string(), r#".spec.containers[name="nginx"].image"#);
    let mut p = Path::fields(&["foo"]);
    p.0.extend([json!("b"), json!(5), json!(false), json!(2.5)].into_iter().map(PathElement::Value));
    assert_eq!(p.to_string(), r#".foo[="b"][=5][=false][=2.5]"#);
    let key = PathElement::key([("protocol".to_string(), json!("TCP")), ("containerPort".to_string(), json!(80))]);
    assert_eq!(key.to_string(), r#"[containerPort=80,protocol="TCP"]"#);
    assert_eq!(PathElement::Index(1).to_string(), "[1]");
}

/// A create is compared with the kind's empty object: the creator owns every field it set, with
/// `"."` on parents that did not exist before, and nothing stripped or reset (kube's
/// `FieldManager.UpdateNoErrors` on create).
#[test]
fn a_create_gives_the_creator_kubes_fields() {
    let fx = Fixture::new(empty_deployment(), &[&["status"]]);
    let ctx = fx.ctx("Deployment", "apps/v1", NOW);
    let created: Value = serde_json::from_str(
        r#"{"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "test-deployment", "namespace": "acend-test", "creationTimestamp": null, "labels": {"app": "test-deployment"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "test-deployment"}},
            "template": {"metadata": {"creationTimestamp": null, "labels": {"app": "test-deployment"}},
                "spec": {"containers": [{"name": "example-web", "image": "nginx", "resources": {},
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "Always"}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                    "securityContext": {}, "schedulerName": "default-scheduler"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
        "status": {"replicas": 0}}"#,
    )
    .unwrap();
    let (object, managed) = update(&ctx, None, &created, "kubectl-create");
    assert_eq!(fields_of(&managed, "kubectl-create", Operation::Update), KUBECTL_CREATE);
    let entries = object["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["manager"], "kubectl-create");
    assert_eq!(entries[0]["operation"], "Update");
    assert_eq!(entries[0]["apiVersion"], "apps/v1");
    assert_eq!(entries[0]["time"], NOW);
    assert_eq!(entries[0]["fieldsType"], "FieldsV1");
    assert_eq!(entries[0]["fieldsV1"], serde_json::from_str::<Value>(KUBECTL_CREATE).unwrap());
    assert_eq!(object["spec"], created["spec"], "the object itself is untouched");
}

/// SMD's `ToFieldSet`: leaves, atomic lists and maps, empty maps, and map-list items keyed by
/// their key fields (a missing key field takes its schema default).
#[test]
fn a_pods_field_set_names_items_by_key() {
    let s = schemas();
    let types = Types::new(&s);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1", "ports": [{"containerPort": 80}], "args": ["a", "b"]},
            {"name": "side", "image": "busybox"}],
            "tolerations": [{"key": "k"}], "securityContext": {}}});
    let set = typed::to_field_set(&types, types.named("Pod").unwrap(), &pod);
    assert_eq!(
        set.to_fields_v1(),
        r#"{"f:apiVersion":{},"f:kind":{},"f:metadata":{"f:labels":{"f:app":{}},"f:name":{}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:args":{},"f:image":{},"f:name":{},"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}},"k:{\"name\":\"side\"}":{".":{},"f:image":{},"f:name":{}}},"f:securityContext":{},"f:tolerations":{}}}"#
    );
    let paths: Vec<String> = set.paths().iter().map(Path::to_string).collect();
    assert!(paths.contains(
        &r#".spec.containers[name="nginx"].ports[containerPort=80,protocol="TCP"].containerPort"#.to_string()
    ));
    assert_eq!(set.len(), paths.len());
}

/// Non-apply writes: the writer takes what it changed from everyone, removed fields leave every
/// set, an unchanged entry keeps its time (SMD's `Updater.Update`, kube's managedFieldsUpdater).
#[test]
fn updates_move_ownership_to_the_writer() {
    let fx = Fixture::new(empty_meta(), &[]);
    let ctx = fx.ctx("ConfigMap", "v1", NOW);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"}, "data": {"a": "1", "b": "2"}});
    let (created, managed) = update(&ctx, None, &cm, "alice");
    assert_eq!(fields_of(&managed, "alice", Operation::Update), r#"{"f:data":{".":{},"f:a":{},"f:b":{}}}"#);

    let mut live = created.clone();
    live["metadata"]["uid"] = json!("u-1");
    let mut edited = live.clone();
    edited["data"]["a"] = json!("x");
    let later = fx.ctx("ConfigMap", "v1", LATER);
    let (bobbed, managed) = update(&later, Some(&live), &edited, "bob");
    assert_eq!(fields_of(&managed, "alice", Operation::Update), r#"{"f:data":{".":{},"f:b":{}}}"#);
    assert_eq!(fields_of(&managed, "bob", Operation::Update), r#"{"f:data":{"f:a":{}}}"#);
    assert_eq!(managed.find("alice", Operation::Update).unwrap().time.as_deref(), Some(NOW));
    assert_eq!(managed.find("bob", Operation::Update).unwrap().time.as_deref(), Some(LATER));

    let mut removed = bobbed.clone();
    removed["data"].as_object_mut().unwrap().remove("b");
    let (_, managed) = update(&fx.ctx("ConfigMap", "v1", "2024-05-02T00:00:00Z"), Some(&bobbed), &removed, "bob");
    assert_eq!(fields_of(&managed, "alice", Operation::Update), r#"{"f:data":{}}"#);
    assert_eq!(managed.find("bob", Operation::Update).unwrap().time.as_deref(), Some(LATER), "bob gained nothing");

    // An object stored without managed fields stays untracked by updates (kube's
    // skipNonApplied), and a status write keeps the stored list whatever the request says.
    let mut untracked = live.clone();
    untracked["metadata"].as_object_mut().unwrap().remove("managedFields");
    let mut untracked_edit = untracked.clone();
    untracked_edit["data"]["a"] = json!("y");
    let (object, managed) = update(&ctx, Some(&untracked), &untracked_edit, "carol");
    assert!(managed.is_empty() && object["metadata"].get("managedFields").is_none());
    let status_ctx = Context { subresource: "status", ..ctx };
    let mut reset_request = edited.clone();
    reset_request["metadata"]["managedFields"] = json!([]);
    let (_, managed) = update(&status_ctx, Some(&live), &reset_request, "kubelet");
    assert!(managed.find("alice", Operation::Update).is_some());
    let entry = managed.find("kubelet", Operation::Update).unwrap();
    assert_eq!(entry.subresource, "status");
}

/// SMD's `Merge`: maps merge, atomic maps/lists and scalars are replaced, sets union, map lists
/// merge by key with the config's order for its items and live-only items kept in place.
#[test]
fn merges_follow_list_and_map_types() {
    let s = schemas();
    let types = Types::new(&s);
    let root = types.named("Pod").unwrap();
    let c = |names: &[(&str, &str)]| -> Value {
        names.iter().map(|(n, i)| json!({"name": n, "image": i})).collect::<Vec<_>>().into()
    };
    let pod = |containers: Value, finalizers: Value| {
        json!({"metadata": {"finalizers": finalizers, "labels": {"a": "1"}},
            "spec": {"containers": containers, "tolerations": [{"key": "a"}], "nodeSelector": {"a": "1", "b": "2"}}})
    };
    let live = pod(c(&[("a", "a1"), ("b", "b1"), ("c", "c1")]), json!(["x", "z"]));
    let config = json!({"metadata": {"finalizers": ["y", "x"], "labels": {"b": "2"}},
        "spec": {"containers": c(&[("c", "c2"), ("d", "d1")]), "tolerations": [{"key": "b"}], "nodeSelector": {"c": "3"}}});
    let merged = typed::merge(&types, root, &live, &config);
    assert_eq!(merged["spec"]["containers"], c(&[("a", "a1"), ("b", "b1"), ("c", "c2"), ("d", "d1")]));
    assert_eq!(merged["metadata"]["finalizers"], json!(["y", "x", "z"]));
    assert_eq!(merged["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert_eq!(merged["spec"]["tolerations"], json!([{"key": "b"}]));
    assert_eq!(merged["spec"]["nodeSelector"], json!({"c": "3"}));
    // A reordering config reorders the shared items.
    let live = pod(c(&[("a", "a1"), ("b", "b1")]), json!(null));
    let config = json!({"spec": {"containers": c(&[("b", "b1"), ("a", "a1"), ("x", "x1")])}});
    let merged = typed::merge(&types, root, &live, &config);
    assert_eq!(merged["spec"]["containers"], c(&[("b", "b1"), ("a", "a1"), ("x", "x1")]));
}

/// Apply adds the config's items next to another manager's, owns exactly its config, and
/// removes what it stops applying (SMD's `Updater.Apply` and `prune`).
#[test]
fn apply_merges_and_prunes_what_the_applier_drops() {
    let fx = Fixture::new(
        json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": null}, "status": {}}),
        &[&["status"]],
    );
    let ctx = fx.ctx("Pod", "v1", NOW);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "a1"}]}});
    let (live, _) = update(&ctx, None, &pod, "creator");
    let config = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"x": "1"}},
        "spec": {"containers": [{"name": "b", "image": "b1"}]}});
    let (applied, managed) = do_apply(&ctx, &live, &config, "m", false).unwrap();
    assert_eq!(applied["spec"]["containers"], json!([{"name": "a", "image": "a1"}, {"name": "b", "image": "b1"}]));
    assert_eq!(
        fields_of(&managed, "m", Operation::Apply),
        r#"{"f:metadata":{"f:labels":{"f:x":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"b\"}":{".":{},"f:image":{},"f:name":{}}}}}"#
    );
    assert_eq!(
        fields_of(&managed, "creator", Operation::Update),
        r#"{"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{".":{},"f:image":{},"f:name":{}}}}}"#
    );

    // The same config again changes nothing, not even a time.
    let again = fx.ctx("Pod", "v1", LATER);
    let (same, managed_again) = do_apply(&again, &applied, &config, "m", false).unwrap();
    assert_eq!(same, applied);
    assert_eq!(managed_again, managed);

    // Dropping container b and keeping the label removes b, and only b.
    let config = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"x": "1"}}});
    let (pruned, managed) = do_apply(&again, &applied, &config, "m", false).unwrap();
    assert_eq!(pruned["spec"]["containers"], json!([{"name": "a", "image": "a1"}]));
    assert_eq!(pruned["metadata"]["labels"], json!({"x": "1"}));
    assert_eq!(fields_of(&managed, "m", Operation::Apply), r#"{"f:metadata":{"f:labels":{"f:x":{}}}}"#);
    assert_eq!(managed.find("m", Operation::Apply).unwrap().time.as_deref(), Some(LATER));
}

/// A field another applier also owns survives when one of them stops applying it; an applier
/// that changes nothing gets an entry without a time (kube's managedFieldsUpdater).
#[test]
fn shared_fields_survive_one_owner_leaving() {
    let fx = Fixture::new(empty_meta(), &[]);
    let ctx = fx.ctx("ConfigMap", "v1", NOW);
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1", "b": "2"}}, "data": {"x": "1"}});
    let (live, managed) = apply(&ctx, &fx.empty, &config, ManagedFields::default(), "m", false).unwrap();
    assert_eq!(
        fields_of(&managed, "m", Operation::Apply),
        r#"{"f:data":{"f:x":{}},"f:metadata":{"f:labels":{"f:a":{},"f:b":{}}}}"#
    );
    assert!(managed.find(managed::BEFORE_FIRST_APPLY, Operation::Update).is_none(), "nothing existed before");

    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"b": "2"}}});
    let (live, managed) = do_apply(&fx.ctx("ConfigMap", "v1", LATER), &live, &other, "o", false).unwrap();
    assert_eq!(fields_of(&managed, "o", Operation::Apply), r#"{"f:metadata":{"f:labels":{"f:b":{}}}}"#);
    assert_eq!(managed.find("o", Operation::Apply).unwrap().time, None);

    let only_a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1"}});
    let (kept, managed) = do_apply(&ctx, &live, &only_a, "m", false).unwrap();
    assert_eq!(kept["metadata"]["labels"], json!({"a": "1", "b": "2"}), "o still owns b");
    assert_eq!(
        fields_of(&managed, "m", Operation::Apply),
        r#"{"f:data":{"f:x":{}},"f:metadata":{"f:labels":{"f:a":{}}}}"#
    );
    let (gone, _) = do_apply(&ctx, &live, &only_a, "o", false).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(gone["metadata"]["labels"], json!({"a": "1", "b": "2"}), "o applying a is sharing a; m still owns b");
}

/// The 409 for one conflict, byte for byte (`getConflictMessage`, `NewConflictError`,
/// `errors.NewApplyConflict`), and what forcing does instead (SMD's `update` with force).
#[test]
fn one_conflict_reads_as_kube_writes_it_and_force_takes_the_field() {
    let fx = Fixture::new(empty_deployment(), &[&["status"]]);
    let ctx = fx.ctx("Deployment", "apps/v1", NOW);
    let deploy =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 1}});
    let (live, managed) = update(&ctx, None, &deploy, "kubectl-client-side-apply");
    assert_eq!(fields_of(&managed, "kubectl-client-side-apply", Operation::Update), r#"{"f:spec":{"f:replicas":{}}}"#);
    let config =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 2}});
    let err = do_apply(&ctx, &live, &config, "m", false).unwrap_err();
    let ApplyError::Conflicts(conflicts) = &err else { panic!("{err:?}") };
    assert_eq!(
        conflicts.message(),
        r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas"#
    );
    assert_eq!(
        String::from_utf8(err.status().to_json()).unwrap(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Apply failed with 1 conflict: conflict with \\\"kubectl-client-side-apply\\\" using apps/v1: .spec.replicas\",\"reason\":\"Conflict\",\"details\":{\"causes\":[{\"reason\":\"FieldManagerConflict\",\"message\":\"conflict with \\\"kubectl-client-side-apply\\\" using apps/v1\",\"field\":\".spec.replicas\"}]},\"code\":409}\n"
    );

    let (forced, managed) = do_apply(&ctx, &live, &config, "m", true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 2);
    assert!(managed.find("kubectl-client-side-apply", Operation::Update).is_none(), "it owned nothing else");
    assert_eq!(fields_of(&managed, "m", Operation::Apply), r#"{"f:spec":{"f:replicas":{}}}"#);
    assert_eq!(forced["metadata"]["managedFields"].as_array().unwrap().len(), 1);
}

/// Several conflicts: grouped by owner, owners sorted, appliers named without a version
/// (`getConflictMessage`, `printManager`).
#[test]
fn several_conflicts_are_grouped_by_owner() {
    let fx = Fixture::new(empty_meta(), &[]);
    let ctx = fx.ctx("ConfigMap", "v1", NOW);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
    let (live, _) = update(&ctx, None, &cm, "m1");
    let config =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "x", "b": "y"}});
    let Err(ApplyError::Conflicts(two)) = do_apply(&ctx, &live, &config, "m2", false) else { panic!("no conflict") };
    assert_eq!(two.message(), "Apply failed with 2 conflicts: conflicts with \"m1\" using v1:\n- .data.a\n- .data.b");

    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let (live, _) = update(&ctx, None, &cm, "m1");
    let b = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2"}});
    let (live, _) = do_apply(&ctx, &live, &b, "m3", false).unwrap();
    let Err(ApplyError::Conflicts(mixed)) = do_apply(&ctx, &live, &config, "m2", false) else { panic!("no conflict") };
    assert_eq!(
        mixed.message(),
        "Apply failed with 2 conflicts: conflicts with \"m1\" using v1:\n- .data.a\nconflicts with \"m3\":\n- .data.b"
    );
    let causes: Vec<(String, String)> = mixed.causes().into_iter().map(|c| (c.message, c.field)).collect();
    assert_eq!(
        causes,
        [
            ("conflict with \"m1\" using v1".to_string(), ".data.a".to_string()),
            ("conflict with \"m3\"".to_string(), ".data.b".to_string())
        ]
    );
    assert!(mixed.causes().iter().all(|c| c.reason == "FieldManagerConflict"));
    assert_eq!(
        conflict::print_manager(&identifier("kubelet", Operation::Update, "v1", "status")),
        "\"kubelet\" with subresource \"status\" using v1"
    );
}

/// An object created without managed fields is given to `before-first-apply` when first applied
/// to (kube's skipNonAppliedManager), and changing its fields conflicts with that manager.
#[test]
fn first_apply_to_an_untracked_object() {
    let fx = Fixture::new(empty_meta(), &[]);
    let ctx = fx.ctx("ConfigMap", "v1", NOW);
    let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "uid": "u-1", "resourceVersion": "5", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "data": {"a": "1", "b": "2"}});
    let config =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "c": "3"}});
    let (object, managed) = do_apply(&ctx, &live, &config, "m", false).unwrap();
    assert_eq!(object["data"], json!({"a": "1", "b": "2", "c": "3"}));
    let before = managed.find(managed::BEFORE_FIRST_APPLY, Operation::Update).unwrap();
    assert_eq!(before.fields.to_fields_v1(), r#"{"f:data":{".":{},"f:a":{},"f:b":{}}}"#);
    assert_eq!((before.api_version.as_str(), before.time.as_deref()), ("v1", Some(NOW)));
    assert_eq!(fields_of(&managed, "m", Operation::Apply), r#"{"f:data":{"f:a":{},"f:c":{}}}"#);
    let entries = object["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!((entries[0]["operation"].as_str(), entries[1]["operation"].as_str()), (Some("Apply"), Some("Update")));

    let change_b = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "9"}});
    let Err(ApplyError::Conflicts(c)) = do_apply(&ctx, &live, &change_b, "m", false) else { panic!("no conflict") };
    assert_eq!(c.message(), r#"Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.b"#);
}

/// kubectl moving from client-side to server-side apply: conflicts on fields its last-applied
/// annotation shows it set are taken over, and the annotation follows the config (kube's
/// lastAppliedManager and lastAppliedUpdater). Another manager still conflicts.
#[test]
fn kubectl_takes_over_what_it_applied_client_side() {
    let fx = Fixture::new(empty_meta(), &[]);
    let ctx = fx.ctx("ConfigMap", "v1", NOW);
    let last = r#"{"apiVersion":"v1","data":{"a":"1"},"kind":"ConfigMap","metadata":{"annotations":{},"name":"c"}}"#;
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": {}}, "data": {"a": "1"}});
    cm["metadata"]["annotations"][LAST_APPLIED] = json!(format!("{last}\n"));
    let (live, _) = update(&ctx, None, &cm, "kubectl-client-side-apply");
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "2"}});
    assert!(matches!(do_apply(&ctx, &live, &config, "other", false), Err(ApplyError::Conflicts(_))));
    let (object, managed) = do_apply(&ctx, &live, &config, KUBECTL, false).unwrap();
    assert_eq!(object["data"]["a"], "2");
    assert_eq!(fields_of(&managed, KUBECTL, Operation::Apply), r#"{"f:data":{"f:a":{}}}"#);
    assert_eq!(
        object["metadata"]["annotations"][LAST_APPLIED],
        "{\"apiVersion\":\"v1\",\"data\":{\"a\":\"2\"},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"}}\n"
    );
    // A field changed since the annotation was written is not kubectl's any more.
    let mut drifted = live.clone();
    drifted["data"]["a"] = json!("1b");
    let allowed = allowed_conflicts_from_last_applied(&ctx, &drifted).unwrap();
    assert!(!allowed.has(&Path::fields(&["data", "a"]).0));
    assert!(allowed.has(&Path::fields(&["metadata", "name"]).0));
    assert_eq!(
        build_last_applied(&cm),
        format!(
            "{}\n",
            r#"{"apiVersion":"v1","data":{"a":"1"},"kind":"ConfigMap","metadata":{"annotations":{},"name":"c"}}"#
        )
    );
}

/// Configs that do not fit are refused with kube's texts (`versionCheckManager`,
/// `structuredMergeManager.Apply`, SMD's validation).
#[test]
fn bad_configs_are_refused_as_kube_refuses_them() {
    let fx =
        Fixture::new(json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": null}, "status": {}}), &[]);
    let ctx = fx.ctx("Pod", "v1", NOW);
    let live = fx.empty.clone();
    let pod = |spec: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec});
    let err = |config: Value| apply(&ctx, &live, &config, ManagedFields::default(), "m", false).unwrap_err();
    assert_eq!(
        err(pod(json!({"containers": [{"name": "a"}, {"name": "a", "image": "x"}]}))),
        ApplyError::Internal(
            r#"failed to create typed patch object (ns/p; /v1, Kind=Pod): .spec.containers: duplicate entries for key [name="a"]"#.into()
        )
    );
    assert_eq!(
        err(pod(json!({"foo": 1}))),
        ApplyError::Internal(
            "failed to create typed patch object (ns/p; /v1, Kind=Pod): .spec.foo: field not declared in schema".into()
        )
    );
    assert_eq!(
        err(pod(json!({"containers": [{"image": "x"}]}))),
        ApplyError::Internal(
            "failed to create typed patch object (ns/p; /v1, Kind=Pod): .spec.containers: element 0: associative list with keys has an element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)".into()
        )
    );
    let mut wrong = pod(json!({}));
    wrong["apiVersion"] = json!("apps/v1");
    assert_eq!(err(wrong), ApplyError::BadRequest("invalid object type: apps/v1, Kind=Pod".into()));
    let mut managed = pod(json!({}));
    managed["metadata"]["managedFields"] = json!([]);
    assert_eq!(err(managed).status().code, 400);
    assert_eq!(ApplyError::Internal("x".into()).status().code, 500);
}

/// kube's capManagers: beyond ten update entries the oldest fold into `ancient-changes`.
#[test]
fn update_entries_are_capped_at_ten() {
    let mut managed = ManagedFields::default();
    for i in 0..11 {
        let mut fields = Set::new();
        let key = format!("k{i:02}");
        fields.insert(&Path::fields(&["data", key.as_str()]).0);
        managed.put(ManagedEntry {
            manager: format!("m{i:02}"),
            operation: Operation::Update,
            api_version: "v1".into(),
            subresource: String::new(),
            time: Some(format!("2024-01-01T00:00:{i:02}Z")),
            fields,
        });
    }
    managed.cap_update_managers(managed::MAX_UPDATE_MANAGERS);
    assert_eq!(managed.len(), 10);
    let ancient = managed.find(managed::ANCIENT_CHANGES, Operation::Update).unwrap();
    assert_eq!(ancient.fields.to_fields_v1(), r#"{"f:data":{"f:k00":{},"f:k01":{}}}"#);
    assert_eq!(ancient.time.as_deref(), Some("2024-01-01T00:00:01Z"));
    assert!(managed.find("m00", Operation::Update).is_none() && managed.find("m02", Operation::Update).is_some());
}

/// SMD's set algebra: a member of the right-hand side takes away only itself in `difference`,
/// and everything under it in `recursive_difference`; `leaves` keeps members without children.
#[test]
fn set_algebra_is_smds() {
    let path = |p: &[&str]| Path::fields(p).0;
    let mut s = Set::new();
    s.insert(&path(&["spec"]));
    s.insert(&path(&["spec", "replicas"]));
    s.insert(&path(&["status", "ready"]));
    let mut spec = Set::new();
    spec.insert(&path(&["spec"]));
    assert_eq!(s.difference(&spec).to_fields_v1(), r#"{"f:spec":{"f:replicas":{}},"f:status":{"f:ready":{}}}"#);
    assert_eq!(s.recursive_difference(&spec).to_fields_v1(), r#"{"f:status":{"f:ready":{}}}"#);
    assert_eq!(s.leaves().to_fields_v1(), r#"{"f:spec":{"f:replicas":{}},"f:status":{"f:ready":{}}}"#);
    assert_eq!(s.intersection(&spec).to_fields_v1(), r#"{"f:spec":{}}"#);
    assert_eq!(s.len(), 3);
    let paths: Vec<String> = s.paths().iter().map(Path::to_string).collect();
    assert_eq!(paths, [".spec", ".spec.replicas", ".status.ready"]);
    assert!(s.difference(&s).is_empty() && spec.union(&s) == s);
}

/// Malformed input anywhere is an error with SMD's wording, never a panic.
#[test]
fn hostile_inputs_are_errors_not_panics() {
    let fx =
        Fixture::new(json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": null}, "status": {}}), &[]);
    let ctx = fx.ctx("Pod", "v1", NOW);
    let config = |spec: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec});
    let err =
        |live: &Value, spec: Value| apply(&ctx, live, &config(spec), ManagedFields::default(), "m", false).unwrap_err();
    let internal = |e: ApplyError| match e {
        ApplyError::Internal(m) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        internal(err(&fx.empty, json!("x"))),
        "failed to create typed patch object (/p; /v1, Kind=Pod): .spec: expected map, got &{x}"
    );
    assert_eq!(
        internal(err(&fx.empty, json!({"terminationGracePeriodSeconds": "30"}))),
        "failed to create typed patch object (/p; /v1, Kind=Pod): .spec.terminationGracePeriodSeconds: expected numeric (int or float), got string"
    );
    assert_eq!(
        internal(err(&fx.empty, json!({"containers": [null], "tolerations": {"a": 1}}))),
        "failed to create typed patch object (/p; /v1, Kind=Pod): errors:\n  .spec.containers: element 0: associative list with keys may not have a null element\n  .spec.tolerations: expected list, got &{map[a:1]}"
    );
    let broken_live = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, 7]}});
    assert_eq!(
        internal(err(&broken_live, json!({}))),
        "failed to create typed live object (/p; /v1, Kind=Pod): .spec.containers: element 1: associative list with keys may not have non-map elements"
    );
    let mut bad_managed = broken_live.clone();
    bad_managed["metadata"]["managedFields"] =
        json!([{"operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:a": 5}}]);
    assert!(internal(managed_for_apply(&bad_managed).unwrap_err()).starts_with("failed to decode managed fields: "));
    // A bad stored list does not stop other writes: they start afresh from the stored object.
    let (_, managed) = update(&ctx, Some(&bad_managed), &bad_managed, "m");
    assert!(managed.is_empty());

    // The walks themselves take any shapes.
    let s = schemas();
    let types = Types::new(&s);
    let root = types.named("Pod").unwrap();
    let odd = [
        json!(null),
        json!(1),
        json!("s"),
        json!([1, {"a": null}]),
        json!({"spec": [1]}),
        json!({"spec": {"containers": [1, null, {"name": 2}]}}),
    ];
    for a in &odd {
        for b in &odd {
            let _ = typed::merge(&types, root, a, b);
            let cmp = typed::compare(&types, root, a, b);
            let set = typed::to_field_set(&types, root, b);
            let _ = typed::remove_items(&types, root, a, &set.union(&cmp.removed));
            let _ = typed::ensure_named_fields_are_members(&types, root, &set);
        }
    }
    for text in [r#"{"f:a":5}"#, "[]", r#"{"k:5":{}}"#, r#"{"v:{":{}}"#, r#"{"i:x":{}}"#, r#"{"f:a":null}"#] {
        let _ = Set::from_fields_v1_str(text);
    }
    assert_eq!(Set::from_fields_v1_str(r#"{"f:a":null}"#).unwrap().to_fields_v1(), r#"{"f:a":{}}"#);
}
