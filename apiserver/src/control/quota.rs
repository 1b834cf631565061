//! The ResourceQuota controller (kube's `resourcequota` package): each quota's
//! `status.hard` follows `spec.hard`, and `status.used` counts what its namespace holds of each
//! resource it names — object counts (`pods`, `services`, `services.nodeports`,
//! `services.loadbalancers`, `configmaps`, `secrets`, `persistentvolumeclaims`,
//! `replicationcontrollers`, `resourcequotas`, `count/<resource>[.<group>]`) and the pods'
//! compute (`requests.cpu`/`cpu`, `requests.memory`/`memory`, `limits.cpu`, `limits.memory`,
//! ephemeral storage) and the claims' `requests.storage` — over the pods its scopes select
//! (Terminating, NotTerminating, BestEffort, NotBestEffort). Pods that finished do not count.
//! Recounted when anything in the namespace changes, and every 5 minutes (kube's resync).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::informer::{self, key_of, split_key};
use super::{milli, Failure, Queue};
use crate::resources::{Resource, RESOURCES};
use crate::rest::{Selectors, Target};

const RESYNC: Duration = Duration::from_secs(300);

pub async fn run(client: Client) {
    let queue = Queue::new();
    let quotas = resource("", "v1", "resourcequotas");
    let q = queue.clone();
    let quota_watch =
        informer::run(client.cache(quotas).clone(), Selectors::everything(), move |ch| q.add(key_of(ch.object())));
    let mut tasks: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> = vec![Box::pin(quota_watch)];
    // A change to a counted kind recounts the quotas of its namespace.
    for plural in ["pods", "services", "configmaps", "secrets", "persistentvolumeclaims", "replicationcontrollers"] {
        let (q, c, r) = (queue.clone(), client.clone(), resource("", "v1", plural));
        tasks.push(Box::pin(informer::run(client.cache(r).clone(), Selectors::everything(), move |ch| {
            for quota in c.cached_list(quotas, Some(&ch.object().namespace)) {
                q.add(key_of(&quota));
            }
        })));
    }
    let q = queue.clone();
    let c = client.clone();
    tasks.push(Box::pin(async move {
        loop {
            tokio::time::sleep(RESYNC).await;
            for quota in c.cached_list(quotas, None) {
                q.add(key_of(&quota));
            }
        }
    }));
    tasks.push(Box::pin(queue.clone().work("resourcequota-controller", 2, move |key| {
        let client = client.clone();
        async move { sync(&client, &key).await }
    })));
    super::together(tasks).await;
}

/// A sum in thousandths written as kube writes the quantity: CPU as cores or millicores, bytes
/// in the largest binary unit that divides them, counts as integers.
pub fn format(name: &str, thousandths: i64) -> String {
    let cpu = name.ends_with("cpu");
    if cpu {
        return if thousandths % 1000 == 0 { (thousandths / 1000).to_string() } else { format!("{thousandths}m") };
    }
    let units = thousandths / 1000;
    if units == 0 || !(name.contains("memory") || name.contains("storage")) {
        return units.to_string();
    }
    for (suffix, size) in
        [("Ei", 1i64 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)]
    {
        if units % size == 0 {
            return format!("{}{suffix}", units / size);
        }
    }
    units.to_string()
}

/// Whether a pod falls in the quota's scopes.
fn in_scope(scopes: &[String], pod: &Value) -> bool {
    let terminating = pod.pointer("/spec/activeDeadlineSeconds").is_some_and(|d| !d.is_null());
    let best_effort = crate::pods::qos_class(pod) == "BestEffort";
    scopes.iter().all(|s| match s.as_str() {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => best_effort,
        "NotBestEffort" => !best_effort,
        _ => true,
    })
}

/// The resource whose objects quota item `name` counts, if it is one kube counts.
pub fn counted(name: &str) -> Option<&'static Resource> {
    let (plural, group) = match name {
        "pods"
        | "services"
        | "configmaps"
        | "secrets"
        | "persistentvolumeclaims"
        | "replicationcontrollers"
        | "resourcequotas" => (name, ""),
        "services.nodeports" | "services.loadbalancers" => ("services", ""),
        "requests.storage" => ("persistentvolumeclaims", ""),
        n if n.starts_with("count/") => {
            let what = &n["count/".len()..];
            what.split_once('.').unwrap_or((what, ""))
        }
        n if n.contains("cpu") || n.contains("memory") || n.contains("ephemeral-storage") => ("pods", ""),
        _ => return None,
    };
    RESOURCES.iter().find(|r| r.stored() && r.plural == plural && r.group == group && r.namespaced)
}

/// What one object of `r` adds to quota item `name` within `scopes`, in thousandths (a pod that
/// finished, or outside the scopes, adds nothing).
pub fn charge(r: &Resource, object: &Value, scopes: &[String], name: &str) -> i64 {
    if counted(name).is_none_or(|c| c.plural != r.plural || c.group != r.group) {
        return 0;
    }
    let one = 1000;
    if r.group.is_empty() && r.plural == "pods" {
        let finished = matches!(object.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
        if finished || !in_scope(scopes, object) {
            return 0;
        }
    }
    match name {
        "services.nodeports" => {
            let ports = object.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten();
            one * ports.filter(|p| p.get("nodePort").is_some_and(|n| !n.is_null())).count() as i64
        }
        "services.loadbalancers" => {
            if object.pointer("/spec/type") == Some(&json!("LoadBalancer")) {
                one
            } else {
                0
            }
        }
        "requests.storage" => {
            object.pointer("/spec/resources/requests/storage").and_then(Value::as_str).and_then(milli).unwrap_or(0)
        }
        n if r.plural == "pods" && (n.contains("cpu") || n.contains("memory") || n.contains("ephemeral-storage")) => {
            pod_usage(object, n)
        }
        _ => one,
    }
}

/// What the pods ask of `name` (`requests.cpu`, `limits.memory`, `cpu`…), in thousandths.
fn pod_usage(pod: &Value, name: &str) -> i64 {
    let (kind, res) = match name.split_once('.') {
        Some(("requests", r)) => ("requests", r),
        Some(("limits", r)) => ("limits", r),
        _ => ("requests", name),
    };
    let sum = |path: &str| -> i64 {
        pod.pointer(path)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.pointer(&format!("/resources/{kind}/{res}")).and_then(Value::as_str).and_then(milli))
            .sum()
    };
    let init_max = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.pointer(&format!("/resources/{kind}/{res}")).and_then(Value::as_str).and_then(milli))
        .max()
        .unwrap_or(0);
    sum("/spec/containers").max(init_max)
}

async fn sync(client: &Client, key: &str) -> Result<(), Failure> {
    let quotas = resource("", "v1", "resourcequotas");
    let (ns, name) = split_key(key);
    let Some(o) = client.cached(quotas, ns, name) else { return Ok(()) };
    let quota = o.value(quotas);
    let ns = ns.unwrap_or("");
    let hard: BTreeMap<String, Value> =
        quota.pointer("/spec/hard").and_then(|h| serde_json::from_value(h.clone()).ok()).unwrap_or_default();
    let scopes: Vec<String> =
        quota.pointer("/spec/scopes").and_then(|s| serde_json::from_value(s.clone()).ok()).unwrap_or_default();
    let mut used = serde_json::Map::new();
    let mut listed: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for name in hard.keys() {
        let Some(r) = counted(name) else { continue };
        // Counted from a consistent LIST: at a revision past the quota's version, so it holds
        // every object that version was charged for (admission charges in the creating
        // transaction), and the write below, conditional on that version, never takes back a
        // charge for an object it did not count.
        if !listed.contains_key(r.plural) {
            let target = Target::Collection { namespace: Some(ns.to_string()) };
            let list = client.call(r, http::Method::GET, target, &[], None).await?;
            listed.insert(r.plural, list["items"].as_array().cloned().unwrap_or_default());
        }
        let thousandths: i64 = listed[r.plural].iter().map(|o| charge(r, o, &scopes, name)).sum();
        used.insert(name.clone(), json!(format(name, thousandths)));
    }
    let status = json!({"hard": hard, "used": used});
    client.put_status(quotas, &quota, status).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_written_as_kube_writes_quantities() {
        assert_eq!(format("requests.cpu", 1500), "1500m");
        assert_eq!(format("limits.cpu", 2000), "2");
        assert_eq!(format("requests.memory", 1024 * 1024 * 1024 * 1000), "1Gi");
        assert_eq!(format("memory", 1000 * 1000), "1000");
        assert_eq!(format("pods", 3000), "3");
        let pod = json!({"spec": {"containers": [
            {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1"}}},
            {"resources": {"requests": {"cpu": "250m"}}}]}});
        assert_eq!(pod_usage(&pod, "requests.cpu"), 350);
        assert_eq!(pod_usage(&pod, "cpu"), 350);
        assert_eq!(pod_usage(&pod, "limits.cpu"), 1000);
        assert!(in_scope(&["NotTerminating".into()], &pod));
        assert!(!in_scope(&["BestEffort".into()], &pod));
    }
}
