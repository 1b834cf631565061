//! The admission plugins about pods: LimitRanger (defaults and bounds from the namespace's
//! LimitRanges), ServiceAccount (the default account, its existence, the API credentials volume),
//! Priority (a pod's priority from its PriorityClass) and NodeRestriction (a kubelet writes only
//! its own Node and the pods bound to it).

use rand::Rng;
use serde_json::{json, Map, Value};

use super::{forbidden, Attributes};
use crate::control::milli;
use crate::rest::Api;
use crate::status::{self, Status};

/// The objects of core/v1 `plural` in `namespace` (all namespaces when None) the cache holds.
fn cached(api: &Api, group: &str, plural: &str, namespace: Option<&str>) -> Vec<std::sync::Arc<Value>> {
    let r = crate::resources::find(group, "v1", plural).expect("a served resource");
    api.cached_list(r, namespace).iter().map(|o| o.json(r)).collect()
}

fn containers_mut<'a>(pod: &'a mut Value, kind: &str) -> impl Iterator<Item = &'a mut Value> {
    pod.pointer_mut(&format!("/spec/{kind}")).and_then(Value::as_array_mut).into_iter().flatten()
}

/// kube's quantity order for two quantity strings (by thousandths).
fn less(a: &str, b: &str) -> bool {
    matches!((milli(a), milli(b)), (Some(x), Some(y)) if x < y)
}

/// LimitRanger: each container gets the default limits and requests of the namespace's
/// `Container` limits it does not set (noted in the `kubernetes.io/limit-ranger` annotation),
/// then must fall within their minimum and maximum.
pub fn limit_ranges(api: &Api, a: &Attributes<'_>, pod: &mut Value) -> Result<(), Status> {
    let items: Vec<Value> = cached(api, "", "limitranges", Some(a.namespace))
        .iter()
        .flat_map(|lr| lr.pointer("/spec/limits").and_then(Value::as_array).cloned().unwrap_or_default())
        .filter(|l| l.get("type").and_then(Value::as_str) == Some("Container"))
        .collect();
    if items.is_empty() {
        return Ok(());
    }
    let map = |v: Option<&Value>| v.and_then(Value::as_object).cloned().unwrap_or_default();
    let mut noted = Vec::new();
    let mut errors = Vec::new();
    for kind in ["containers", "initContainers"] {
        let prefix = if kind == "containers" { "container" } else { "init container" };
        for c in containers_mut(pod, kind) {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            for item in &items {
                // kube's LimitRange defaults: the default limit is the maximum when not given,
                // the default request the default limit, else the minimum.
                let (min, max) = (map(item.get("min")), map(item.get("max")));
                let mut limits = map(item.get("default"));
                for (k, v) in &max {
                    limits.entry(k.clone()).or_insert(v.clone());
                }
                let mut requests = map(item.get("defaultRequest"));
                for (k, v) in limits.iter().chain(min.iter()) {
                    requests.entry(k.clone()).or_insert(v.clone());
                }
                let res = c.as_object_mut().expect("a container").entry("resources").or_insert_with(|| json!({}));
                let mut set = |part: &str, defaults: &Map<String, Value>| {
                    let held = res.as_object_mut().expect("resources").entry(part).or_insert_with(|| json!({}));
                    let held = held.as_object_mut().expect("a resource list");
                    let mut added: Vec<String> = Vec::new();
                    for (k, v) in defaults {
                        if !held.contains_key(k) {
                            held.insert(k.clone(), v.clone());
                            added.push(k.clone());
                        }
                    }
                    added.sort();
                    added
                };
                let (req, lim) = (set("requests", &requests), set("limits", &limits));
                if !req.is_empty() {
                    noted.push(format!("{} request for {prefix} {name}", req.join(", ")));
                }
                if !lim.is_empty() {
                    noted.push(format!("{} limit for {prefix} {name}", lim.join(", ")));
                }
                let text = |part: &str, k: &str| {
                    c.pointer(&format!("/resources/{part}/{k}")).and_then(Value::as_str).map(str::to_string)
                };
                for (k, bound) in &min {
                    let bound = bound.as_str().unwrap_or("");
                    match text("requests", k) {
                        None => {
                            errors.push(format!("minimum {k} usage per Container is {bound}.  No request is specified"))
                        }
                        Some(q) if less(&q, bound) => {
                            errors.push(format!("minimum {k} usage per Container is {bound}, but request is {q}"))
                        }
                        Some(_) => {}
                    }
                }
                for (k, bound) in &max {
                    let bound = bound.as_str().unwrap_or("");
                    match text("limits", k) {
                        None => {
                            errors.push(format!("maximum {k} usage per Container is {bound}.  No limit is specified"))
                        }
                        Some(q) if less(bound, &q) => {
                            errors.push(format!("maximum {k} usage per Container is {bound}, but limit is {q}"))
                        }
                        Some(_) => {}
                    }
                }
            }
            // Empty lists the defaults did not fill are left out, as kube leaves them.
            if let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) {
                res.retain(|_, v| v.as_object().is_none_or(|o| !o.is_empty()));
            }
        }
    }
    match errors.as_slice() {
        [] => {}
        [one] => return Err(forbidden(a, one)),
        many => return Err(forbidden(a, &format!("[{}]", many.join(", ")))),
    }
    if !noted.is_empty() {
        let annotations = crate::meta::metadata(pod).entry("annotations").or_insert_with(|| json!({}));
        annotations["kubernetes.io/limit-ranger"] = json!(format!("LimitRanger plugin set: {}", noted.join("; ")));
    }
    Ok(())
}

/// Where the API credentials are mounted in each container.
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// ServiceAccount: a pod runs as `default` unless it names an account; the account must exist;
/// unless the pod or the account opts out, a projected volume of a bound token, the cluster's CA
/// and the namespace is mounted in every container.
pub async fn service_account(api: &Api, a: &Attributes<'_>, pod: &mut Value) -> Result<(), Status> {
    if pod.pointer("/metadata/annotations/kubernetes.io~1config.mirror").is_some() {
        return Ok(());
    }
    let name = match pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(n) => n.to_string(),
        None => {
            pod["spec"]["serviceAccountName"] = json!("default");
            "default".to_string()
        }
    };
    let accounts = crate::resources::find("", "v1", "serviceaccounts").expect("serviceaccounts are served");
    let key = crate::rest::key(api, accounts, Some(a.namespace), &name);
    let account = match api.cached(accounts, Some(a.namespace), &name) {
        Some(o) => o.json(accounts),
        // Just made, perhaps: the store has the last word.
        None => match crate::rest::read(api, accounts, &key, &name).await {
            Ok(stored) => std::sync::Arc::new(crate::rest::shown(accounts, &stored)?),
            Err(_) => {
                let why = format!(
                    "error looking up service account {}/{name}: serviceaccount {} not found",
                    a.namespace,
                    status::go_quote(&name)
                );
                return Err(forbidden(a, &why));
            }
        },
    };
    let automount = pod
        .pointer("/spec/automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| account.get("automountServiceAccountToken").and_then(Value::as_bool))
        .unwrap_or(true);
    if !automount {
        return Ok(());
    }
    let mounted = |c: &Value| {
        c.get("volumeMounts").and_then(Value::as_array).into_iter().flatten().any(|m| m["mountPath"] == TOKEN_PATH)
    };
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
    let volume = format!("kube-api-access-{suffix}");
    let mut any = false;
    for kind in ["initContainers", "containers"] {
        for c in containers_mut(pod, kind) {
            if mounted(c) {
                continue;
            }
            let mounts = c.as_object_mut().expect("a container").entry("volumeMounts").or_insert_with(|| json!([]));
            if let Some(m) = mounts.as_array_mut() {
                m.push(json!({"name": volume, "readOnly": true, "mountPath": TOKEN_PATH}));
                any = true;
            }
        }
    }
    if any {
        let volumes = pod["spec"].as_object_mut().expect("a pod spec").entry("volumes").or_insert_with(|| json!([]));
        if let Some(v) = volumes.as_array_mut() {
            v.push(json!({"name": volume, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}));
        }
    }
    Ok(())
}

/// Priority: a pod's priority (and preemption policy) come from its PriorityClass, or the
/// cluster's default class, or are 0; a pod that gives other values is refused.
pub fn priority(api: &Api, a: &Attributes<'_>, pod: &mut Value) -> Result<(), Status> {
    let classes = cached(api, "scheduling.k8s.io", "priorityclasses", None);
    let named =
        pod.pointer("/spec/priorityClassName").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let class = match &named {
        Some(n) => match classes.iter().find(|c| crate::meta::get(c, "name") == n) {
            Some(c) => Some(c.clone()),
            None => return Err(forbidden(a, &format!("no PriorityClass with name {n} was found"))),
        },
        // The default: the global default class of the lowest value, if there is one.
        None => classes
            .iter()
            .filter(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
            .min_by_key(|c| c.get("value").and_then(Value::as_i64).unwrap_or(0))
            .cloned(),
    };
    let value = class.as_ref().and_then(|c| c.get("value").and_then(Value::as_i64)).unwrap_or(0);
    let policy = class
        .as_ref()
        .and_then(|c| c.get("preemptionPolicy").and_then(Value::as_str))
        .unwrap_or("PreemptLowerPriority")
        .to_string();
    if let Some(given) = pod.pointer("/spec/priority").and_then(Value::as_i64) {
        if given != value {
            return Err(forbidden(a, &format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
            )));
        }
    }
    if let Some(given) = pod.pointer("/spec/preemptionPolicy").and_then(Value::as_str) {
        if given != policy {
            return Err(forbidden(a, &format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
            )));
        }
    }
    let spec = pod["spec"].as_object_mut().expect("a pod spec");
    if let (None, Some(c)) = (&named, &class) {
        spec.insert("priorityClassName".into(), json!(crate::meta::get(c, "name")));
    }
    spec.insert("priority".into(), json!(value));
    spec.insert("preemptionPolicy".into(), json!(policy));
    Ok(())
}

/// NodeRestriction: a kubelet (`system:node:<name>` in `system:nodes`) changes only its own
/// Node, creates only mirror pods bound to itself, and updates or deletes only pods bound to it.
pub fn node_restriction(api: &Api, a: &Attributes<'_>) -> Result<(), Status> {
    let _ = api;
    let Some(node) = a.user.name.strip_prefix(crate::auth::NODE_PREFIX) else { return Ok(()) };
    if !a.user.groups.iter().any(|g| g == crate::auth::NODES) || !a.r.group.is_empty() {
        return Ok(());
    }
    let bound = |v: Option<&Value>| v.and_then(|p| p.pointer("/spec/nodeName")).and_then(Value::as_str) == Some(node);
    match (a.r.plural, a.operation) {
        ("nodes", _) if a.name != node => Err(forbidden(
            a,
            &format!("node {} is not allowed to modify node {}", status::go_quote(node), status::go_quote(a.name)),
        )),
        ("pods", "CREATE") if a.subresource.is_empty() => {
            let mirror =
                a.object.and_then(|p| p.pointer("/metadata/annotations/kubernetes.io~1config.mirror")).is_some();
            if !mirror {
                return Err(forbidden(
                    a,
                    &format!(
                    "pod does not have \"kubernetes.io/config.mirror\" annotation, node {} can only create mirror pods",
                    status::go_quote(node)
                ),
                ));
            }
            if !bound(a.object) {
                return Err(forbidden(
                    a,
                    &format!("node {} can only create pods with spec.nodeName set to itself", status::go_quote(node)),
                ));
            }
            Ok(())
        }
        ("pods", "UPDATE") if a.subresource == "status" && !bound(a.old) => Err(forbidden(
            a,
            &format!(
                "node {} can only update pod status for pods with spec.nodeName set to itself",
                status::go_quote(node)
            ),
        )),
        ("pods", "DELETE") if !bound(a.old) => Err(forbidden(
            a,
            &format!("node {} can only delete pods with spec.nodeName set to itself", status::go_quote(node)),
        )),
        _ => Ok(()),
    }
}
