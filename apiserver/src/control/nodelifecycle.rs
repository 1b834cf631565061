//! Node lifecycle (kube's `nodelifecycle` controller) and NoExecute taint eviction (kube's
//! `taint-eviction-controller`). A node whose kubelet neither renewed its Lease nor posted status
//! for `--node-monitor-grace-period` (kube's default 40 s, measured on this side's clock from when
//! either last changed) gets its conditions set Unknown ("Kubelet stopped posting node status."),
//! its pods marked not ready, and the `node.kubernetes.io/unreachable` taints (NoSchedule and
//! NoExecute); a NotReady node gets the `not-ready` ones; a node Ready again loses them. A pod
//! on a node with a NoExecute taint it does not tolerate is deleted at once; one tolerating it
//! for `tolerationSeconds` is deleted that long after the taint was added.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::client::{resource, Client};
use super::record::Recorder;
use super::Failure;
use crate::meta;

/// How often nodes are looked at (`--node-monitor-period`).
const PERIOD: Duration = Duration::from_secs(5);
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// What was last seen of a node's heartbeats, and when it was first seen so.
struct Seen {
    beat: Value,
    at: Instant,
}

pub async fn run(client: Client, grace: Duration) {
    let recorder = Recorder::new(client.clone(), "node-controller", None);
    let seen: Mutex<HashMap<String, Seen>> = Mutex::default();
    let evictions = Arc::new(super::record::Recorder::new(
        client.as_user("system:serviceaccount:kube-system:taint-eviction-controller"),
        "taint-eviction-controller",
        None,
    ));
    let mut last_monitor: Option<Instant> = None;
    loop {
        if last_monitor.is_none_or(|t| t.elapsed() >= PERIOD) {
            last_monitor = Some(Instant::now());
            if let Err(e) = monitor(&client, &recorder, &seen, grace).await {
                tracing::debug!(error = %e, "node monitoring");
            }
        }
        if let Err(e) = evict(&client, &evictions).await {
            tracing::debug!(error = %e, "taint eviction");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn conditions(node: &Value) -> Vec<Value> {
    node.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default()
}

fn ready_status(node: &Value) -> Option<String> {
    conditions(node).iter().find(|c| c["type"] == "Ready").and_then(|c| c["status"].as_str().map(str::to_string))
}

async fn monitor(
    client: &Client,
    recorder: &Recorder,
    seen: &Mutex<HashMap<String, Seen>>,
    grace: Duration,
) -> Result<(), Failure> {
    let (nodes, leases) = (resource("", "v1", "nodes"), resource("coordination.k8s.io", "v1", "leases"));
    let all = client.cached_list(nodes, None);
    let names: Vec<String> = all.iter().map(|o| super::informer::key_of(o)).collect();
    seen.lock().retain(|k, _| names.contains(k));
    for o in all {
        let node = o.json(nodes);
        let name = meta::get(&node, "name").to_string();
        let renew = client
            .cached(leases, Some("kube-node-lease"), &name)
            .and_then(|l| l.json(leases).pointer("/spec/renewTime").cloned());
        let heartbeat = conditions(&node).iter().find(|c| c["type"] == "Ready").map(|c| c["lastHeartbeatTime"].clone());
        let beat = json!([renew, heartbeat]);
        let silent = {
            let mut s = seen.lock();
            let entry = s.entry(name.clone()).or_insert_with(|| Seen { beat: beat.clone(), at: Instant::now() });
            if entry.beat != beat {
                *entry = Seen { beat, at: Instant::now() };
            }
            entry.at.elapsed() > grace
        };
        let ready = ready_status(&node);
        if silent && ready.as_deref() != Some("Unknown") {
            mark_unknown(client, &node).await?;
            mark_pods_not_ready(client, &name).await?;
            let message = format!("Node {name} status is now: NodeNotReady");
            recorder.event(&node, "Node", "Normal", "NodeNotReady", message);
            continue;
        }
        // Taints follow the Ready condition.
        let want: &[&str] = match ready.as_deref() {
            Some("True") => &[],
            Some("False") => &[NOT_READY],
            _ if silent || ready.as_deref() == Some("Unknown") => &[UNREACHABLE],
            _ => &[],
        };
        set_taints(client, &node, want).await?;
    }
    Ok(())
}

async fn mark_unknown(client: &Client, node: &Value) -> Result<(), Failure> {
    let nodes = resource("", "v1", "nodes");
    let now = meta::now();
    let mut updated = node.clone();
    let mut cs = conditions(node);
    for kind in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
        let fresh = json!({"type": kind, "status": "Unknown", "lastHeartbeatTime": now, "lastTransitionTime": now,
                           "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."});
        match cs.iter_mut().find(|c| c["type"] == kind) {
            Some(c) => {
                let beat = c.get("lastHeartbeatTime").cloned().unwrap_or(json!(now));
                *c = fresh;
                c["lastHeartbeatTime"] = beat;
            }
            None => cs.push(fresh),
        }
    }
    updated["status"]["conditions"] = Value::Array(cs);
    match client.update(nodes, None, meta::get(node, "name"), Some("status"), &updated).await {
        Err(e) if !e.is("NotFound") => Err(e),
        _ => Ok(()),
    }
}

/// Pods on the node: their Ready condition goes False (kube's `MarkPodsNotReady`).
async fn mark_pods_not_ready(client: &Client, node: &str) -> Result<(), Failure> {
    let pods = resource("", "v1", "pods");
    for p in client.cached_list(pods, None) {
        let seen = p.json(pods);
        if seen.pointer("/spec/nodeName").and_then(Value::as_str) != Some(node) {
            continue;
        }
        let mut v = (*seen).clone();
        let ready = v
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned());
        if ready.is_none_or(|c| c["status"] != "True") {
            continue;
        }
        crate::bindings::set_condition(&mut v, "Ready", "False", "", "");
        let (ns, name) = (p.namespace.clone(), meta::get(&v, "name").to_string());
        match client.update(pods, Some(&ns), &name, Some("status"), &v).await {
            Err(e) if !e.is("NotFound") && e.code != 409 => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Makes the node's condition taints exactly `want` (each NoSchedule and NoExecute).
async fn set_taints(client: &Client, node: &Value, want: &[&str]) -> Result<(), Failure> {
    let nodes = resource("", "v1", "nodes");
    let taints: Vec<Value> = node.pointer("/spec/taints").and_then(Value::as_array).cloned().unwrap_or_default();
    let ours = |t: &Value| [UNREACHABLE, NOT_READY].iter().any(|k| t["key"] == *k);
    let mut next: Vec<Value> =
        taints.iter().filter(|t| !ours(t) || want.iter().any(|k| t["key"] == *k)).cloned().collect();
    for key in want {
        for effect in ["NoSchedule", "NoExecute"] {
            if !next.iter().any(|t| t["key"] == *key && t["effect"] == effect) {
                let mut t = json!({"key": key, "effect": effect});
                if effect == "NoExecute" {
                    t["timeAdded"] = json!(meta::now());
                }
                next.push(t);
            }
        }
    }
    if next == taints {
        return Ok(());
    }
    let patch = json!({"metadata": {"resourceVersion": meta::get(node, "resourceVersion")},
                       "spec": {"taints": if next.is_empty() { Value::Null } else { Value::Array(next) }}});
    match client.merge_patch(nodes, None, meta::get(node, "name"), None, &patch).await {
        Err(e) if !e.is("NotFound") && e.code != 409 => Err(e),
        _ => Ok(()),
    }
}

/// When a pod must leave a node with `taints`: None if it tolerates them all for ever, else the
/// seconds after which it goes (0: at once).
pub fn eviction_after(pod: &Value, taints: &[Value]) -> Option<(i64, String)> {
    let tolerations: Vec<Toleration> =
        pod.pointer("/spec/tolerations").and_then(|t| serde_json::from_value(t.clone()).ok()).unwrap_or_default();
    let mut soonest: Option<(i64, String)> = None;
    for t in taints.iter().filter(|t| t["effect"] == "NoExecute") {
        let Ok(taint) = serde_json::from_value::<Taint>(t.clone()) else { continue };
        let matching: Vec<&Toleration> =
            tolerations.iter().filter(|tol| super::scheduler::tolerates(std::slice::from_ref(tol), &taint)).collect();
        let added = t.get("timeAdded").and_then(Value::as_str).and_then(crate::table::age_secs).unwrap_or(0);
        let after = if matching.is_empty() {
            Some(0)
        } else if matching.iter().any(|tol| tol.toleration_seconds.is_none()) {
            None
        } else {
            matching.iter().filter_map(|tol| tol.toleration_seconds).min().map(|s| (s - added).max(0))
        };
        if let Some(a) = after {
            if soonest.as_ref().is_none_or(|(s, _)| a < *s) {
                soonest = Some((a, taint.key.clone()));
            }
        }
    }
    soonest
}

async fn evict(client: &Client, recorder: &super::record::Recorder) -> Result<(), Failure> {
    let (nodes, pods) = (resource("", "v1", "nodes"), resource("", "v1", "pods"));
    let mut tainted: HashMap<String, Vec<Value>> = HashMap::new();
    for n in client.cached_list(nodes, None) {
        let v = n.json(nodes);
        let taints: Vec<Value> = v.pointer("/spec/taints").and_then(Value::as_array).cloned().unwrap_or_default();
        if taints.iter().any(|t| t["effect"] == "NoExecute") {
            tainted.insert(meta::get(&v, "name").to_string(), taints);
        }
    }
    if tainted.is_empty() {
        return Ok(());
    }
    for p in client.cached_list(pods, None) {
        let seen = p.json(pods);
        let Some(taints) = seen.pointer("/spec/nodeName").and_then(Value::as_str).and_then(|n| tainted.get(n)) else {
            continue;
        };
        if seen.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        if !matches!(eviction_after(&seen, taints), Some((0, _))) {
            continue;
        }
        let mut v = (*seen).clone();
        let (ns, name) = (p.namespace.clone(), meta::get(&v, "name").to_string());
        recorder.event(&v, "Pod", "Normal", "TaintManagerEviction", format!("Marking for deletion Pod {ns}/{name}"));
        crate::bindings::set_condition(
            &mut v,
            "DisruptionTarget",
            "True",
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        );
        match client.update(pods, Some(&ns), &name, Some("status"), &v).await {
            Err(e) if e.is("NotFound") => continue,
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        match client.delete(pods, Some(&ns), &name, &json!({})).await {
            Err(e) if !e.is("NotFound") => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_leave_tainted_nodes_as_their_tolerations_say() {
        let taints = vec![json!({"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": meta::now()})];
        let pod = |tolerations: Value| json!({"spec": {"tolerations": tolerations}});
        assert_eq!(eviction_after(&pod(json!([])), &taints), Some((0, UNREACHABLE.to_string())));
        let for_5 = json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]);
        assert!(matches!(eviction_after(&pod(for_5), &taints), Some((4..=5, _))));
        let forever = json!([{"operator": "Exists"}]);
        assert_eq!(eviction_after(&pod(forever), &taints), None);
        let no_schedule = vec![json!({"key": "x", "effect": "NoSchedule"})];
        assert_eq!(eviction_after(&pod(json!([])), &no_schedule), None);
    }
}
