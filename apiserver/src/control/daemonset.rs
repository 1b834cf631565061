//! The DaemonSet controller (kube's `daemon` package): one pod on every node the DaemonSet's
//! pods fit (its node selector and affinity; taints its pods tolerate, with the tolerations kube
//! adds to every daemon pod), placed by the scheduler through required node affinity on the
//! node's name, as kube does since daemon pods are scheduled by the default scheduler. Updates
//! roll (RollingUpdate: at most `maxUnavailable` old pods down at a time; OnDelete: only pods
//! deleted are made anew) across ControllerRevisions; status is kube's
//! (`desiredNumberScheduled`, `currentNumberScheduled`, `numberReady`, `numberAvailable`,
//! `updatedNumberScheduled`, `numberMisscheduled`, `numberUnavailable`), which
//! `kubectl rollout status` follows.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use serde_json::{json, Value};

use super::client::{resource, Client};
use super::expectations::Expectations;
use super::informer::{self, key_of, split_key};
use super::record::Recorder;
use super::replicaset::{available, controller_of, ready_since};
use super::revisions;
use super::{Failure, Queue};
use crate::meta;
use crate::rest::Selectors;

/// The tolerations kube's DaemonSet controller adds to its pods (`AddOrUpdateDaemonPodTolerations`).
const DAEMON_TOLERATIONS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];

struct Controller {
    client: Client,
    recorder: Recorder,
    queue: Queue,
    expectations: Arc<Expectations>,
}

pub async fn run(client: Client) {
    let recorder = Recorder::new(client.clone(), "daemonset-controller", None);
    let c = Arc::new(Controller { client, recorder, queue: Queue::new(), expectations: Arc::default() });
    let (sets, nodes) = (resource("apps", "v1", "daemonsets"), resource("", "v1", "nodes"));
    let me = c.clone();
    let ds_watch = informer::run(c.client.cache(sets).clone(), Selectors::everything(), move |ch| {
        me.queue.add(key_of(ch.object()))
    });
    let pod_watch =
        super::expectations::owned_pods(c.client.clone(), "DaemonSet", c.queue.clone(), c.expectations.clone());
    // Every node change may add or remove daemon pods.
    let me = c.clone();
    let node_watch = informer::run(c.client.cache(nodes).clone(), Selectors::everything(), move |_| {
        for ds in me.client.cached_list(sets, None) {
            me.queue.add(key_of(&ds));
        }
    });
    let me = c.clone();
    let workers = c.queue.clone().work("daemonset-controller", 2, move |key| {
        let me = me.clone();
        async move { me.sync(&key).await }
    });
    super::together(vec![Box::pin(ds_watch), Box::pin(pod_watch), Box::pin(node_watch), Box::pin(workers)]).await;
}

/// The DaemonSet's pod template with kube's daemon tolerations added.
fn with_daemon_tolerations(template: &Value) -> Value {
    let mut t = template.clone();
    let list = t["spec"].as_object_mut().map(|s| s.entry("tolerations").or_insert_with(|| json!([])).clone());
    let mut list: Vec<Value> = list.and_then(|l| l.as_array().cloned()).unwrap_or_default();
    for (key, effect) in DAEMON_TOLERATIONS {
        if !list.iter().any(|x| x["key"] == *key && x["effect"] == *effect) {
            list.push(json!({"key": key, "operator": "Exists", "effect": effect}));
        }
    }
    t["spec"]["tolerations"] = Value::Array(list);
    t
}

/// Whether the DaemonSet's pods should run on `node` (kube's `NodeShouldRunDaemonPod`): its node
/// selector and required affinity hold, and every NoSchedule/NoExecute taint is tolerated.
fn should_run(template: &Value, node: &Node) -> bool {
    let Ok(pod) = serde_json::from_value::<Pod>(json!({"metadata": {}, "spec": template.get("spec")})) else {
        return false;
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let tolerations: Vec<Toleration> = spec.tolerations.clone().unwrap_or_default();
    let taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let tolerated = taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| super::scheduler::tolerates(&tolerations, t));
    tolerated && super::scheduler::fits_node_affinity(&pod, node)
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<(), Failure> {
        let (sets, pods, nodes) =
            (resource("apps", "v1", "daemonsets"), resource("", "v1", "pods"), resource("", "v1", "nodes"));
        let (ns, name) = split_key(key);
        let Some(o) = self.client.cached(sets, ns, name) else {
            self.expectations.forget(key);
            return Ok(());
        };
        let ds = o.value(sets);
        if ds.pointer("/metadata/deletionTimestamp").is_some() || !self.expectations.met(key) {
            return Ok(());
        }
        let uid = meta::get(&ds, "uid").to_string();
        let mine: Vec<Value> = self
            .client
            .cached_list(pods, ns)
            .iter()
            .map(|p| p.json(pods))
            .filter(|p| controller_of(p).is_some_and(|(_, _, u)| u == uid))
            .filter(|p| !matches!(p.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed")))
            .map(|p| (*p).clone())
            .collect();
        let in_use: Vec<String> = mine.iter().map(|p| revisions::hash_of_pod(p).to_string()).collect();
        let (hash, _) = revisions::current(&self.client, &ds, "DaemonSet", "apps/v1", &in_use).await?;
        let template = with_daemon_tolerations(ds.pointer("/spec/template").unwrap_or(&Value::Null));
        // Pods by the node they are for (their required affinity, or where they run).
        let mut by_node: HashMap<String, Vec<&Value>> = HashMap::new();
        for p in &mine {
            let node = p.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_string).or_else(|| {
                p.pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            });
            by_node.entry(node.unwrap_or_default()).or_default().push(p);
        }
        let all_nodes: Vec<Arc<Node>> =
            self.client.cached_list(nodes, None).iter().filter_map(|n| n.decoded::<Node>()).collect();
        let (mut create, mut delete) = (Vec::new(), Vec::new());
        let (mut desired, mut scheduled, mut misscheduled) = (0, 0, 0);
        for n in &all_nodes {
            let node_name = n.metadata.name.clone().unwrap_or_default();
            let here: Vec<&Value> = by_node.remove(&node_name).unwrap_or_default();
            let live: Vec<&Value> =
                here.iter().copied().filter(|p| p.pointer("/metadata/deletionTimestamp").is_none()).collect();
            if should_run(&template, n) {
                desired += 1;
                if !live.is_empty() {
                    scheduled += 1;
                }
                if here.is_empty() {
                    create.push(node_name);
                } else if live.len() > 1 {
                    // Duplicates: the oldest stays.
                    let mut extra = live.clone();
                    extra.sort_by_key(|p| meta::get(p, "creationTimestamp").to_string());
                    delete.extend(extra.into_iter().skip(1));
                }
            } else if !live.is_empty() {
                misscheduled += 1;
                delete.extend(live);
            }
        }
        // Pods for nodes that are gone.
        delete.extend(by_node.into_values().flatten().filter(|p| p.pointer("/metadata/deletionTimestamp").is_none()));
        // Rolling update: old pods go, at most maxUnavailable unavailable at a time.
        let rolling = ds.pointer("/spec/updateStrategy/type").and_then(Value::as_str) != Some("OnDelete");
        let min_ready = ds.pointer("/spec/minReadySeconds").and_then(Value::as_i64).unwrap_or(0);
        if rolling && create.is_empty() && delete.is_empty() {
            let max_unavailable = match ds.pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable") {
                Some(v) if v.as_str().is_some_and(|s| s.ends_with('%')) => {
                    super::scaled(v, desired, false).unwrap_or(0).max(1)
                }
                Some(v) => v.as_i64().unwrap_or(1).max(1),
                None => 1,
            };
            let live: Vec<&Value> =
                mine.iter().filter(|p| p.pointer("/metadata/deletionTimestamp").is_none()).collect();
            let unavailable = live.iter().filter(|p| !available(p, min_ready)).count() as i64
                + mine.iter().filter(|p| p.pointer("/metadata/deletionTimestamp").is_some()).count() as i64;
            let mut budget = max_unavailable - unavailable;
            // Old pods that are not available go first, then available ones within the budget.
            let mut old: Vec<&Value> = live.iter().copied().filter(|p| revisions::hash_of_pod(p) != hash).collect();
            old.sort_by_key(|p| available(p, min_ready));
            for p in old {
                if !available(p, min_ready) {
                    delete.push(p);
                } else if budget > 0 {
                    delete.push(p);
                    budget -= 1;
                }
            }
        }
        self.expectations.expect(key, create.len() as i64, delete.len() as i64);
        for node in &create {
            if let Err(e) = self.create_pod(&ds, &template, &hash, node).await {
                self.expectations.forget(key);
                return Err(e);
            }
        }
        for p in &delete {
            match self.client.delete(pods, Some(meta::get(p, "namespace")), meta::get(p, "name"), &json!({})).await {
                Ok(_) => {
                    let message = format!("Deleted pod: {}", meta::get(p, "name"));
                    self.recorder.event(&ds, "DaemonSet", "Normal", "SuccessfulDelete", message);
                }
                Err(e) if e.is("NotFound") => self.expectations.lower(key, 0, 1),
                Err(e) => {
                    self.expectations.forget(key);
                    return Err(e);
                }
            }
        }
        let placed: Vec<&Value> = mine.iter().filter(|p| p.pointer("/metadata/deletionTimestamp").is_none()).collect();
        let ready = placed.iter().filter(|p| ready_since(p).is_some()).count() as i64;
        let avail = placed.iter().filter(|p| available(p, min_ready)).count() as i64;
        let updated = placed.iter().filter(|p| revisions::hash_of_pod(p) == hash).count() as i64;
        let mut status = json!({
            "currentNumberScheduled": scheduled,
            "numberMisscheduled": misscheduled,
            "desiredNumberScheduled": desired,
            "numberReady": ready,
            "observedGeneration": ds.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            "updatedNumberScheduled": updated,
            "numberAvailable": avail,
            "numberUnavailable": (desired - avail).max(0),
        });
        if let Some(m) = status.as_object_mut() {
            m.retain(|k, v| {
                !(v == &json!(0)
                    && matches!(k.as_str(), "updatedNumberScheduled" | "numberAvailable" | "numberUnavailable"))
            });
        }
        if let Some(c) = ds.pointer("/status/collisionCount") {
            status["collisionCount"] = c.clone();
        }
        self.client.put_status(sets, &ds, status).await
    }

    async fn create_pod(&self, ds: &Value, template: &Value, hash: &str, node: &str) -> Result<(), Failure> {
        let pods = resource("", "v1", "pods");
        let (ns, name) = (meta::get(ds, "namespace"), meta::get(ds, "name"));
        let mut t = template.clone();
        let mut metadata = t.get("metadata").cloned().unwrap_or_else(|| json!({}));
        metadata["generateName"] = json!(format!("{name}-"));
        metadata["namespace"] = json!(ns);
        metadata["labels"][revisions::HASH] = json!(hash);
        metadata["labels"]["pod-template-generation"] =
            json!(ds.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1).to_string());
        metadata["ownerReferences"] =
            json!([super::controller_ref("apps/v1", "DaemonSet", name, meta::get(ds, "uid"))]);
        // The scheduler places it on its node, as kube's daemon pods are placed.
        t["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        });
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": t.get("spec")});
        match self.client.create(pods, Some(ns), &pod).await {
            Ok(made) => {
                let message = format!("Created pod: {}", meta::get(&made, "name"));
                self.recorder.event(ds, "DaemonSet", "Normal", "SuccessfulCreate", message);
                Ok(())
            }
            Err(e) => {
                self.recorder.event(
                    ds,
                    "DaemonSet",
                    "Warning",
                    "FailedCreate",
                    format!("Error creating: {}", e.message),
                );
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daemon_pods_go_where_they_fit_and_tolerate() {
        let node = |taints: Value, labels: Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}, "spec": {"taints": taints}}))
                .unwrap()
        };
        let t = with_daemon_tolerations(&json!({"spec": {"containers": [{"name": "c", "image": "i"}]}}));
        assert!(should_run(&t, &node(json!([]), json!({}))));
        assert!(should_run(
            &t,
            &node(json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]), json!({}))
        ));
        assert!(!should_run(
            &t,
            &node(json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]), json!({}))
        ));
        assert!(should_run(&t, &node(json!([{"key": "soft", "effect": "PreferNoSchedule"}]), json!({}))));
        let picky = with_daemon_tolerations(&json!({"spec": {"nodeSelector": {"disk": "ssd"}, "containers": []}}));
        assert!(!should_run(&picky, &node(json!([]), json!({}))));
        assert!(should_run(&picky, &node(json!([]), json!({"disk": "ssd"}))));
    }
}
