//! The disruption controller (kube's `disruption` package): each PodDisruptionBudget's status,
//! which the eviction API reads and spends — the pods it selects (`expectedPods`: their count,
//! or with a percentage or `maxUnavailable` the scale of their controllers: ReplicaSets,
//! Deployments through their ReplicaSets, StatefulSets, ReplicationControllers), how many are
//! healthy (Ready and not being deleted), how many must stay so, and `disruptionsAllowed`, with
//! kube's `DisruptionAllowed` condition (SufficientPods or InsufficientPods). Evictions the API
//! recorded in `disruptedPods` are dropped once the pod is gone or two minutes passed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::informer::{self, key_of, split_key};
use super::replicaset::{controller_of, ready_since};
use super::{Failure, Queue};
use crate::meta;
use crate::rest::Selectors;
use crate::selector::LabelSelector;

/// How long an eviction the API recorded counts before the pod's deletion shows.
const DELETION_TIMEOUT: i64 = 120;

pub async fn run(client: Client) {
    let queue = Queue::new();
    let (budgets, pods) = (resource("policy", "v1", "poddisruptionbudgets"), resource("", "v1", "pods"));
    let q = queue.clone();
    let pdb_watch =
        informer::run(client.cache(budgets).clone(), Selectors::everything(), move |ch| q.add(key_of(ch.object())));
    let (q, c) = (queue.clone(), client.clone());
    let pod_watch = informer::run(client.cache(pods).clone(), Selectors::everything(), move |ch| {
        let p = ch.object().json(pods);
        for b in c.cached_list(budgets, Some(&ch.object().namespace)) {
            let sel = b.json(budgets).pointer("/spec/selector").cloned().unwrap_or(Value::Null);
            if crate::workloads::selects(&sel, p.pointer("/metadata/labels")) {
                q.add(key_of(&b));
            }
        }
    });
    let work = queue.clone().work("disruption-controller", 2, move |key| {
        let (client, queue) = (client.clone(), queue.clone());
        async move { sync(&client, &queue, &key).await }
    });
    super::together(vec![Box::pin(pdb_watch), Box::pin(pod_watch), Box::pin(work)]).await;
}

/// The scale of the pods' controllers (each counted once), or None if a pod has none kube knows.
fn controllers_scale(client: &Client, ns: &str, pods: &[Value]) -> Option<i64> {
    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    for p in pods {
        let (kind, name, uid) = controller_of(p)?;
        if seen.contains_key(&uid) {
            continue;
        }
        let (r, scale_of) = match kind.as_str() {
            "ReplicaSet" => (resource("apps", "v1", "replicasets"), name.clone()),
            "StatefulSet" => (resource("apps", "v1", "statefulsets"), name.clone()),
            "ReplicationController" => (resource("", "v1", "replicationcontrollers"), name.clone()),
            _ => return None,
        };
        let owner = client.cached(r, Some(ns), &scale_of)?.value(r);
        // A Deployment's ReplicaSet: the Deployment's scale.
        let (key, replicas) = match controller_of(&owner) {
            Some((k, dn, du)) if k == "Deployment" => {
                let d = client.cached(resource("apps", "v1", "deployments"), Some(ns), &dn)?;
                (
                    du,
                    d.value(resource("apps", "v1", "deployments"))
                        .pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(1),
                )
            }
            _ => (uid, owner.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)),
        };
        seen.insert(key, replicas);
    }
    Some(seen.values().sum())
}

async fn sync(client: &Client, queue: &Queue, key: &str) -> Result<(), Failure> {
    let (budgets, pods) = (resource("policy", "v1", "poddisruptionbudgets"), resource("", "v1", "pods"));
    let (ns, name) = split_key(key);
    let Some(o) = client.cached(budgets, ns, name) else { return Ok(()) };
    let pdb = o.value(budgets);
    let ns = ns.unwrap_or("");
    let selector = LabelSelector::of_value(pdb.pointer("/spec/selector").unwrap_or(&Value::Null));
    let selected: Vec<Value> = client
        .cached_list(pods, Some(ns))
        .iter()
        .map(|p| p.json(pods))
        .filter(|p| selector.as_ref().is_some_and(|s| s.matches(p.pointer("/metadata/labels"))))
        .filter(|p| !matches!(p.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed")))
        .map(|p| (*p).clone())
        .collect();
    let healthy = selected
        .iter()
        .filter(|p| ready_since(p).is_some() && p.pointer("/metadata/deletionTimestamp").is_none())
        .count() as i64;
    let (min, max) = (pdb.pointer("/spec/minAvailable"), pdb.pointer("/spec/maxUnavailable"));
    let needs_scale = max.is_some() || min.is_some_and(Value::is_string);
    let expected = if needs_scale { controllers_scale(client, ns, &selected) } else { Some(selected.len() as i64) };
    let Some(expected) = expected else {
        let status = json!({"observedGeneration": pdb.pointer("/metadata/generation"), "disruptionsAllowed": 0,
            "currentHealthy": healthy, "desiredHealthy": 0, "expectedPods": 0,
            "conditions": [{"type": "DisruptionAllowed", "status": "False", "reason": "SyncFailed",
                            "message": "found no controllers for pods selected by the budget",
                            "lastTransitionTime": meta::now(), "observedGeneration": pdb.pointer("/metadata/generation")}]});
        return client.put_status(budgets, &pdb, status).await;
    };
    let desired = match (min, max) {
        (Some(m), _) => super::scaled(m, expected, true).unwrap_or(0),
        (None, Some(m)) => (expected - super::scaled(m, expected, true).unwrap_or(0)).max(0),
        (None, None) => 0,
    };
    // Evictions the API recorded: kept until the pod goes or they time out.
    let mut disrupted = serde_json::Map::new();
    for (pod, at) in pdb.pointer("/status/disruptedPods").and_then(Value::as_object).into_iter().flatten() {
        let live =
            selected.iter().any(|p| meta::get(p, "name") == pod && p.pointer("/metadata/deletionTimestamp").is_none());
        let age = at.as_str().and_then(crate::table::age_secs).unwrap_or(0);
        if live && age < DELETION_TIMEOUT {
            disrupted.insert(pod.clone(), at.clone());
            queue.add_after(key, Duration::from_secs((DELETION_TIMEOUT - age).max(1) as u64));
        }
    }
    let allowed = (healthy - desired - disrupted.len() as i64).max(0);
    let generation = pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1));
    let (st, reason) = if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
    let old = pdb
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionAllowed").cloned());
    let since = match old {
        Some(c) if c["status"] == st => c["lastTransitionTime"].clone(),
        _ => json!(meta::now()),
    };
    let mut status = json!({
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{"type": "DisruptionAllowed", "status": st, "reason": reason, "message": "",
                        "lastTransitionTime": since, "observedGeneration": generation}],
    });
    if !disrupted.is_empty() {
        status["disruptedPods"] = Value::Object(disrupted);
    }
    client.put_status(budgets, &pdb, status).await
}
