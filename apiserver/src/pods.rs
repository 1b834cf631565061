//! Pods' strategy, as kube-apiserver's (`pkg/apis/core/v1/defaults.go`,
//! `pkg/registry/core/pod/strategy.go`, `pkg/apis/core/validation`): the defaults a new pod
//! gets, its status on create (Pending, with its QoS class), what validation refuses and how kube
//! words it, and its `kubectl get` row.

use serde_json::{json, Map, Value};

use crate::status::{FieldError, FieldErrorType};

/// The fields a pod's field selectors may name (kube's `PodToSelectableFields`).
pub const SELECTABLE: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];

/// Sets `field` of `o` to `value` where it is missing, null or empty (kube's defaulting of an
/// unset field).
pub(crate) fn set_default(o: &mut Map<String, Value>, field: &str, value: Value) {
    if o.get(field).is_none_or(|v| v.is_null() || v.as_str() == Some("")) {
        o.insert(field.into(), value);
    }
}

fn each_mut<'a>(v: &'a mut Value, field: &str) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    v.get_mut(field).and_then(Value::as_array_mut).into_iter().flatten().filter_map(Value::as_object_mut)
}

/// kube's image pull policy default: Always for `:latest` or no tag, else IfNotPresent.
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn probe_defaults(p: &mut Map<String, Value>) {
    set_default(p, "timeoutSeconds", json!(1));
    set_default(p, "periodSeconds", json!(10));
    set_default(p, "successThreshold", json!(1));
    set_default(p, "failureThreshold", json!(3));
    if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
        set_default(h, "path", json!("/"));
        set_default(h, "scheme", json!("HTTP"));
    }
}

fn container_defaults(c: &mut Map<String, Value>) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or("").to_string();
    set_default(c, "imagePullPolicy", json!(pull_policy(&image)));
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            probe_defaults(p);
        }
    }
    // Requests default to the limits given (kube's SetDefaults_Pod).
    let limits = c.get("resources").and_then(|r| r.get("limits")).and_then(Value::as_object).cloned();
    if let Some(limits) = limits.filter(|l| !l.is_empty()) {
        let resources = c.entry("resources").or_insert_with(|| json!({}));
        if let Some(requests) = resources.as_object_mut().map(|r| r.entry("requests").or_insert_with(|| json!({}))) {
            if let Some(requests) = requests.as_object_mut() {
                for (k, v) in limits {
                    requests.entry(k).or_insert(v);
                }
            }
        }
    }
    if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
        for e in env.iter_mut() {
            if let Some(f) = e.pointer_mut("/valueFrom/fieldRef").and_then(Value::as_object_mut) {
                set_default(f, "apiVersion", json!("v1"));
            }
        }
    }
}

/// kube's defaults for a new pod's spec (`SetDefaults_Pod`, `_PodSpec`, `_Container`, ...).
pub fn defaults(v: &mut Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else { return };
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", json!(true));
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool).unwrap_or(false);
    let mut spec_v = Value::Object(std::mem::take(spec));
    for list in ["containers", "initContainers"] {
        for c in each_mut(&mut spec_v, list) {
            container_defaults(c);
            if host_network {
                for p in c.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
                    if let Some(port) = p.get("containerPort").cloned() {
                        p.as_object_mut().map(|p| p.entry("hostPort").or_insert(port));
                    }
                }
            }
        }
    }
    for vol in each_mut(&mut spec_v, "volumes") {
        const SOURCES: &[&str] = &[
            "hostPath",
            "emptyDir",
            "gcePersistentDisk",
            "awsElasticBlockStore",
            "gitRepo",
            "secret",
            "nfs",
            "iscsi",
            "glusterfs",
            "persistentVolumeClaim",
            "rbd",
            "flexVolume",
            "cinder",
            "cephfs",
            "flocker",
            "downwardAPI",
            "fc",
            "azureFile",
            "configMap",
            "vsphereVolume",
            "quobyte",
            "azureDisk",
            "photonPersistentDisk",
            "projected",
            "portworxVolume",
            "scaleIO",
            "storageos",
            "csi",
            "ephemeral",
            "image",
        ];
        if !SOURCES.iter().any(|s| vol.contains_key(*s)) {
            vol.insert("emptyDir".into(), json!({}));
        }
        for source in ["secret", "configMap", "downwardAPI", "projected"] {
            if let Some(s) = vol.get_mut(source).and_then(Value::as_object_mut) {
                set_default(s, "defaultMode", json!(420));
            }
        }
        if let Some(h) = vol.get_mut("hostPath").and_then(Value::as_object_mut) {
            set_default(h, "type", json!(""));
        }
    }
    *v.get_mut("spec").expect("a spec") = spec_v;
}

/// kube's QoS class of a pod (`qos.GetPodQOS`): BestEffort without requests or limits,
/// Guaranteed when every container's CPU and memory limits equal its requests, else Burstable.
pub fn qos_class(v: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|l| v.pointer(&format!("/spec/{l}")).and_then(Value::as_array).into_iter().flatten())
        .collect();
    let of = |c: &Value, which: &str, res: &str| c.pointer(&format!("/resources/{which}/{res}")).cloned();
    let any = containers
        .iter()
        .any(|c| ["requests", "limits"].iter().any(|w| ["cpu", "memory"].iter().any(|r| of(c, w, r).is_some())));
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| of(c, "limits", r).is_some() && of(c, "limits", r) == of(c, "requests", r))
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// kube's DefaultTolerationSeconds admission (on by default): a new pod that does not tolerate
/// the `not-ready` and `unreachable` NoExecute taints tolerates each for 300 s, so its node's
/// failure evicts it after five minutes.
pub fn default_tolerations(v: &mut Value) {
    const SECONDS: i64 = 300;
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let list = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = list.as_array_mut() else { return };
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        let tolerated = list.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let k = t.get("key").and_then(Value::as_str).unwrap_or("");
            (effect.is_empty() || effect == "NoExecute") && (k == key || k.is_empty())
        });
        if !tolerated {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": SECONDS}));
        }
    }
}

/// A new pod's status, as kube's strategy sets it whatever the client sent.
pub fn new_status(v: &mut Value) {
    let qos = qos_class(v);
    if let Some(o) = v.as_object_mut() {
        o.insert("status".into(), json!({"phase": "Pending", "qosClass": qos}));
    }
}

/// What kube's pod validation refuses in a pod's spec (the part of `ValidatePodSpec` keel
/// checks: containers, their names, images, ports and pull policies, volumes and their mounts,
/// restart and DNS policies).
pub fn validate(v: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = v.get("spec").cloned().unwrap_or(Value::Null);
    let volumes: Vec<&str> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|vol| vol.get("name").and_then(Value::as_str).unwrap_or(""))
        .collect();
    let mut seen = std::collections::HashSet::new();
    for (i, name) in volumes.iter().enumerate() {
        let field = format!("spec.volumes[{i}].name");
        if name.is_empty() {
            errors.push(FieldError::required(&field));
        } else if !seen.insert(*name) {
            errors.push(FieldError::new(FieldErrorType::Duplicate, &field, Some(json!(name)), ""));
        }
    }
    let containers = spec.get("containers").and_then(Value::as_array).cloned().unwrap_or_default();
    if containers.is_empty() {
        errors.push(FieldError::required("spec.containers"));
    }
    let mut names = std::collections::HashSet::new();
    for list in ["initContainers", "containers"] {
        for (i, c) in spec.get(list).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let at = |f: &str| format!("spec.{list}[{i}].{f}");
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                errors.push(FieldError::required(&at("name")));
            } else {
                for problem in crate::meta::name_problems(crate::resources::Names::Label, name) {
                    errors.push(FieldError::new(FieldErrorType::Invalid, &at("name"), Some(json!(name)), &problem));
                }
                if !names.insert(name.to_string()) {
                    errors.push(FieldError::new(FieldErrorType::Duplicate, &at("name"), Some(json!(name)), ""));
                }
            }
            if c.get("image").and_then(Value::as_str).unwrap_or("").trim().is_empty() {
                errors.push(FieldError::required(&at("image")));
            }
            if let Some(p) = c.get("imagePullPolicy").and_then(Value::as_str) {
                if !["Always", "IfNotPresent", "Never"].contains(&p) {
                    errors.push(FieldError::not_supported(
                        &at("imagePullPolicy"),
                        p,
                        &["Always", "IfNotPresent", "Never"],
                    ));
                }
            }
            for (j, port) in c.get("ports").and_then(Value::as_array).into_iter().flatten().enumerate() {
                let n = port.get("containerPort").and_then(Value::as_i64).unwrap_or(0);
                errors.extend(crate::validation::port_number(&at(&format!("ports[{j}].containerPort")), n));
            }
            for (j, m) in c.get("volumeMounts").and_then(Value::as_array).into_iter().flatten().enumerate() {
                let name = m.get("name").and_then(Value::as_str).unwrap_or("");
                if name.is_empty() {
                    errors.push(FieldError::required(&at(&format!("volumeMounts[{j}].name"))));
                } else if !volumes.contains(&name) {
                    errors.push(FieldError::new(
                        FieldErrorType::NotFound,
                        &at(&format!("volumeMounts[{j}].name")),
                        Some(json!(name)),
                        "",
                    ));
                }
                if m.get("mountPath").and_then(Value::as_str).unwrap_or("").is_empty() {
                    errors.push(FieldError::required(&at(&format!("volumeMounts[{j}].mountPath"))));
                }
            }
        }
    }
    if let Some(p) = spec.get("restartPolicy").and_then(Value::as_str) {
        if !["Always", "OnFailure", "Never"].contains(&p) {
            errors.push(FieldError::not_supported("spec.restartPolicy", p, &["Always", "OnFailure", "Never"]));
        }
    }
    if let Some(p) = spec.get("dnsPolicy").and_then(Value::as_str) {
        const DNS: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
        if !DNS.contains(&p) {
            errors.push(FieldError::not_supported("spec.dnsPolicy", p, DNS));
        }
    }
    errors
}

/// The spec fields a pod update may change (kube's `updatablePodSpecFields`).
const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// What kube's `ValidatePodUpdate` refuses in a pod's new spec: any change but the images, the
/// active deadline, added tolerations, and a negative grace period set to 1. (kube appends a Go
/// `cmp.Diff` of the specs to the message; keel does not.)
pub fn update_errors(old: &Value, new: &Value) -> Vec<FieldError> {
    let spec = |v: &Value| v.get("spec").cloned().unwrap_or(Value::Null);
    let (old_spec, mut new_spec) = (spec(old), spec(new));
    let mut munged = old_spec.clone();
    for list in ["containers", "initContainers"] {
        let images: Vec<Value> = new_spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| c.get("image").cloned().unwrap_or(Value::Null))
            .collect();
        if let Some(cs) = munged.get_mut(list).and_then(Value::as_array_mut) {
            if cs.len() == images.len() {
                for (c, image) in cs.iter_mut().zip(images) {
                    c["image"] = image;
                }
            }
        }
    }
    let mut errors = Vec::new();
    let tolerations = |s: &Value| s.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let (old_t, new_t) = (tolerations(&old_spec), tolerations(&new_spec));
    if old_t.iter().all(|t| new_t.contains(t)) {
        if let Some(o) = munged.as_object_mut() {
            match new_spec.get("tolerations") {
                Some(t) => o.insert("tolerations".into(), t.clone()),
                None => o.remove("tolerations"),
            };
        }
    }
    for field in ["activeDeadlineSeconds"] {
        if let Some(o) = munged.as_object_mut() {
            match new_spec.get(field) {
                Some(t) => o.insert(field.into(), t.clone()),
                None => o.remove(field),
            };
        }
    }
    let old_grace = old_spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
    if old_grace.is_some_and(|g| g < 0) && new_spec.get("terminationGracePeriodSeconds") == Some(&json!(1)) {
        munged["terminationGracePeriodSeconds"] = json!(1);
    }
    if let Some(o) = new_spec.as_object_mut() {
        o.retain(|_, v| !v.is_null());
    }
    if munged != new_spec {
        errors.push(FieldError::new(
            FieldErrorType::Forbidden,
            "spec",
            None,
            &format!("pod updates may not change fields other than {UPDATABLE}\n"),
        ));
    }
    errors
}

/// kube's `kubectl get pods` cells: NAME READY STATUS RESTARTS AGE, then (wide) IP NODE
/// NOMINATED NODE READINESS GATES (`printPod`); `since` prints how long ago a timestamp was.
pub fn cells(obj: &Value, name: Value, age: Value, since: impl Fn(&str) -> Option<String>) -> Vec<Value> {
    let statuses = obj.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
    let total = obj.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
    let ready = statuses.iter().filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true)).count();
    let restarts: i64 = statuses.iter().filter_map(|s| s.get("restartCount").and_then(Value::as_i64)).sum();
    // The last restart: the latest time a container's previous run finished.
    let last_restart = statuses
        .iter()
        .filter_map(|s| s.pointer("/lastState/terminated/finishedAt").and_then(Value::as_str))
        .max()
        .and_then(&since);
    let restarts = match last_restart {
        Some(ago) if restarts != 0 => format!("{restarts} ({ago} ago)"),
        _ => restarts.to_string(),
    };
    let mut reason = obj
        .pointer("/status/reason")
        .or_else(|| obj.pointer("/status/phase"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    for s in statuses.iter().rev() {
        if let Some(r) = s.pointer("/state/waiting/reason").and_then(Value::as_str).filter(|r| !r.is_empty()) {
            reason = r.to_string();
        } else if let Some(t) = s.pointer("/state/terminated") {
            reason = match t.get("reason").and_then(Value::as_str).filter(|r| !r.is_empty()) {
                Some(r) => r.to_string(),
                None => match t.get("signal").and_then(Value::as_i64).filter(|n| *n != 0) {
                    Some(n) => format!("Signal:{n}"),
                    None => format!("ExitCode:{}", t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)),
                },
            };
        }
    }
    if obj.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        reason = "Terminating".into();
    }
    let text = |p: &str| obj.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or("<none>");
    let gates = obj.pointer("/spec/readinessGates").and_then(Value::as_array).map_or(0, Vec::len);
    let gates = if gates == 0 { "<none>".to_string() } else { format!("0/{gates}") };
    vec![
        name,
        Value::String(format!("{ready}/{total}")),
        Value::String(reason),
        Value::String(restarts),
        age,
        Value::String(text("/status/podIP").into()),
        Value::String(text("/spec/nodeName").into()),
        Value::String(text("/status/nominatedNodeName").into()),
        Value::String(gates),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_pods_get_kubes_defaults_and_status() {
        let mut v = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "web", "image": "nginx", "ports": [{"containerPort": 80}], "resources": {"limits": {"cpu": "1"}}},
            {"name": "side", "image": "busybox:1.36"}
        ], "volumes": [{"name": "scratch"}, {"name": "cfg", "configMap": {"name": "c"}}]}});
        defaults(&mut v);
        new_status(&mut v);
        let spec = &v["spec"];
        assert_eq!(
            (
                &spec["restartPolicy"],
                &spec["dnsPolicy"],
                &spec["terminationGracePeriodSeconds"],
                &spec["schedulerName"]
            ),
            (&json!("Always"), &json!("ClusterFirst"), &json!(30), &json!("default-scheduler"))
        );
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(spec["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(spec["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(spec["containers"][0]["resources"]["requests"]["cpu"], "1");
        assert_eq!(spec["containers"][0]["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"][1]["configMap"]["defaultMode"], 420);
        assert_eq!(v["status"], json!({"phase": "Pending", "qosClass": "Burstable"}));
    }

    #[test]
    fn updates_change_only_what_kube_lets_them() {
        let old = json!({"spec": {"containers": [{"name": "a", "image": "i:1"}], "restartPolicy": "Always"}});
        let image = json!({"spec": {"containers": [{"name": "a", "image": "i:2"}], "restartPolicy": "Always"}});
        assert!(update_errors(&old, &image).is_empty());
        let tolerated = json!({"spec": {"containers": [{"name": "a", "image": "i:1"}], "restartPolicy": "Always", "tolerations": [{"key": "k", "operator": "Exists"}]}});
        assert!(update_errors(&old, &tolerated).is_empty());
        assert_eq!(update_errors(&tolerated, &old).len(), 1, "tolerations may only be added");
        let policy = json!({"spec": {"containers": [{"name": "a", "image": "i:1"}], "restartPolicy": "Never"}});
        let e = update_errors(&old, &policy);
        assert_eq!(
            e[0].to_string(),
            format!("spec: Forbidden: pod updates may not change fields other than {UPDATABLE}\n")
        );
    }

    #[test]
    fn pods_tolerate_node_failure_for_five_minutes_unless_they_say_otherwise() {
        let mut p = json!({"spec": {"tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                                     "effect": "NoExecute", "tolerationSeconds": 5}]}});
        default_tolerations(&mut p);
        assert_eq!(
            p["spec"]["tolerations"],
            json!([
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
        let mut all = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        default_tolerations(&mut all);
        assert_eq!(all["spec"]["tolerations"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn qos_classes_follow_kubes_rules() {
        let pod = |r: Value| json!({"spec": {"containers": [{"name": "a", "image": "i", "resources": r}]}});
        assert_eq!(qos_class(&pod(json!({}))), "BestEffort");
        let same = json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(qos_class(&pod(same)), "Guaranteed");
        assert_eq!(qos_class(&pod(json!({"requests": {"cpu": "1"}}))), "Burstable");
    }

    #[test]
    fn validation_words_errors_as_kube() {
        let v = json!({"spec": {"containers": [
            {"name": "Web", "image": "", "ports": [{"containerPort": 0}], "volumeMounts": [{"name": "nope", "mountPath": "/x"}]},
            {"name": "a", "image": "i"}, {"name": "a", "image": "i"}
        ], "restartPolicy": "Sometimes"}});
        let got: Vec<String> = validate(&v).iter().map(|e| format!("{}: {}", e.field, e.body())).collect();
        assert_eq!(
            got,
            vec![
                "spec.containers[0].name: Invalid value: \"Web\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.containers[0].image: Required value",
                "spec.containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.containers[0].volumeMounts[0].name: Not found: \"nope\"",
                "spec.containers[2].name: Duplicate value: \"a\"",
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            ]
        );
        assert_eq!(
            validate(&json!({"spec": {}})).iter().map(|e| format!("{}: {}", e.field, e.body())).collect::<Vec<_>>(),
            vec!["spec.containers: Required value"]
        );
    }
}
