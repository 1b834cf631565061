//! The ReplicaSet and ReplicationController controllers (kube's `replicaset` package, which
//! serves both): each keeps `spec.replicas` active pods that its selector selects and that it
//! controls, adopting orphans its selector selects and releasing pods it no longer selects;
//! creates in slow-start batches (1, 2, 4, … as kube's `slowStartBatch`), deletes the least
//! settled pods first, and reports kube's status (`replicas`, `fullyLabeledReplicas`,
//! `readyReplicas`, `availableReplicas`, `observedGeneration`, the `ReplicaFailure` condition).
//! Expectations (kube's `ControllerExpectations`) keep a sync from acting again on what the
//! watch cache does not show yet.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::expectations::Expectations;
use super::informer::{self, key_of, split_key, Change};
use super::record::Recorder;
use super::{Failure, Queue};
use crate::meta;
use crate::resources::Resource;
use crate::rest::Selectors;
use crate::selector::LabelSelector;

/// The most pods one sync creates or deletes (kube's `BurstReplicas`).
const BURST: usize = 500;

/// Which of the two kinds a controller manages.
#[derive(Clone, Copy)]
pub struct Flavor {
    pub group: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub api_version: &'static str,
    pub name: &'static str,
}

pub const REPLICA_SETS: Flavor = Flavor {
    group: "apps",
    plural: "replicasets",
    kind: "ReplicaSet",
    api_version: "apps/v1",
    name: "replicaset-controller",
};
pub const REPLICATION_CONTROLLERS: Flavor = Flavor {
    group: "",
    plural: "replicationcontrollers",
    kind: "ReplicationController",
    api_version: "v1",
    name: "replication-controller",
};

impl Flavor {
    fn resource(&self) -> &'static Resource {
        resource(self.group, "v1", self.plural)
    }

    /// The owner's selector as a `metav1.LabelSelector` (a ReplicationController's is a map).
    fn selector(&self, owner: &Value) -> Value {
        let s = owner.pointer("/spec/selector").cloned().unwrap_or(Value::Null);
        match self.kind {
            "ReplicationController" => json!({"matchLabels": s}),
            _ => s,
        }
    }
}

pub struct Controller {
    flavor: Flavor,
    client: Client,
    recorder: Recorder,
    queue: Queue,
    expectations: Expectations,
}

pub async fn run(client: Client) {
    run_flavor(client, REPLICA_SETS).await
}

pub async fn run_rc(client: Client) {
    run_flavor(client, REPLICATION_CONTROLLERS).await
}

async fn run_flavor(client: Client, flavor: Flavor) {
    let recorder = Recorder::new(client.clone(), flavor.name, None);
    let c =
        Arc::new(Controller { flavor, client, recorder, queue: Queue::new(), expectations: Expectations::default() });
    let me = c.clone();
    let owners = informer::run(c.client.cache(flavor.resource()).clone(), Selectors::everything(), move |ch| {
        if let Change::Deleted(o) = &ch {
            me.expectations.forget(&key_of(o));
        }
        me.queue.add(key_of(ch.object()))
    });
    let me = c.clone();
    let pods = informer::run(c.client.cache(resource("", "v1", "pods")).clone(), Selectors::everything(), move |ch| {
        me.pod_changed(ch)
    });
    let me = c.clone();
    let workers = c.queue.clone().work(flavor.name, 5, move |key| {
        let me = me.clone();
        async move { me.sync(&key).await }
    });
    super::together(vec![Box::pin(owners), Box::pin(pods), Box::pin(workers)]).await;
}

/// The controller reference of an object, if any: (kind, name, uid).
pub fn controller_of(v: &Value) -> Option<(String, String, String)> {
    let refs = v.pointer("/metadata/ownerReferences")?.as_array()?;
    let r = refs.iter().find(|r| r.get("controller") == Some(&json!(true)))?;
    let text = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    Some((text("kind"), text("name"), text("uid")))
}

/// Whether a pod counts as active (kube's `IsPodActive`).
fn active(p: &Value) -> bool {
    let phase = p.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
    phase != "Succeeded" && phase != "Failed" && p.pointer("/metadata/deletionTimestamp").is_none()
}

/// Whether a pod is ready (its Ready condition is True), and since when.
pub fn ready_since(p: &Value) -> Option<String> {
    let cs = p.pointer("/status/conditions")?.as_array()?;
    let c = cs.iter().find(|c| c["type"] == "Ready" && c["status"] == "True")?;
    Some(c.get("lastTransitionTime").and_then(Value::as_str).unwrap_or("").to_string())
}

/// Whether a pod is available: ready for at least `min_ready` seconds.
pub fn available(p: &Value, min_ready: i64) -> bool {
    match ready_since(p) {
        None => false,
        Some(_) if min_ready <= 0 => true,
        Some(t) => crate::table::age_secs(&t).is_some_and(|age| age >= min_ready),
    }
}

impl Controller {
    fn pod_changed(&self, ch: Change) {
        let pods = resource("", "v1", "pods");
        let v = ch.object().json(pods);
        let ns = ch.object().namespace.clone();
        let deleted = matches!(ch, Change::Deleted(_));
        let now_deleting = v.pointer("/metadata/deletionTimestamp").is_some()
            && ch.old().is_some_and(|o| o.value(pods).pointer("/metadata/deletionTimestamp").is_none());
        let mut owners = Vec::new();
        if let Some((kind, name, _)) = controller_of(&v) {
            if kind == self.flavor.kind {
                owners.push(format!("{ns}/{name}"));
            }
        } else if !deleted {
            // An orphan: every owner whose selector selects it may adopt it.
            for o in self.client.cached_list(self.flavor.resource(), Some(&ns)) {
                let ov = o.json(self.flavor.resource());
                if crate::workloads::selects(&self.flavor.selector(&ov), v.pointer("/metadata/labels")) {
                    owners.push(key_of(&o));
                }
            }
        }
        // A pod whose labels changed may also leave its old owner's selection.
        if let Some(old) = ch.old() {
            if let Some((kind, name, _)) = controller_of(&old.json(pods)) {
                if kind == self.flavor.kind && !owners.contains(&format!("{ns}/{name}")) {
                    owners.push(format!("{ns}/{name}"));
                }
            }
        }
        for owner in owners {
            if controller_of(&v).is_some_and(|(k, _, _)| k == self.flavor.kind) {
                self.expectations.observe(&owner, &ch, now_deleting);
            }
            self.queue.add(owner);
        }
    }

    async fn sync(&self, key: &str) -> Result<(), Failure> {
        let r = self.flavor.resource();
        let pods = resource("", "v1", "pods");
        let (ns, name) = split_key(key);
        let Some(o) = self.client.cached(r, ns, name) else {
            self.expectations.forget(key);
            return Ok(());
        };
        let owner = o.value(r);
        let uid = meta::get(&owner, "uid").to_string();
        let selector = self.flavor.selector(&owner);
        let parsed = LabelSelector::of_value(&selector);
        let deleting = owner.pointer("/metadata/deletionTimestamp").is_some();
        // Claim: pods it controls that it still selects, and orphans it selects (adopted).
        let mut mine = Vec::new();
        for p in self.client.cached_list(pods, ns) {
            let pv = p.json(pods);
            if !active(&pv) {
                continue;
            }
            let selected = parsed.as_ref().is_some_and(|s| s.matches(pv.pointer("/metadata/labels")));
            match controller_of(&pv) {
                Some((_, _, owner_uid)) if owner_uid == uid => {
                    if selected {
                        mine.push(pv);
                    } else if !deleting {
                        super::release(&self.client, pods, &pv, &[&uid]).await?;
                    }
                }
                None if selected && !deleting => {
                    let owner_ref = super::controller_ref(self.flavor.api_version, self.flavor.kind, name, &uid);
                    if super::adopt(&self.client, pods, &pv, owner_ref).await? {
                        mine.push(pv);
                    }
                }
                _ => {}
            }
        }
        let met = self.expectations.met(key);
        let mut failure = None;
        if met && !deleting {
            let want = owner.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1).max(0) as usize;
            if let Err(e) = self.manage(key, &owner, &mine, want).await {
                failure = Some(e);
            }
        }
        self.update_status(key, &owner, &mine, failure.as_ref()).await?;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Creates or deletes pods until `want` are active.
    async fn manage(&self, key: &str, owner: &Value, mine: &[Arc<Value>], want: usize) -> Result<(), Failure> {
        let pods = resource("", "v1", "pods");
        let ns = meta::get(owner, "namespace").to_string();
        if mine.len() < want {
            let n = (want - mine.len()).min(BURST);
            self.expectations.expect(key, n as i64, 0);
            let template = owner.pointer("/spec/template").cloned().unwrap_or(Value::Null);
            let mut made = 0usize;
            let mut batch = 1usize;
            while made < n {
                let size = batch.min(n - made);
                let mut creating = Vec::new();
                for _ in 0..size {
                    creating.push(self.create_pod(&ns, owner, &template));
                }
                let results = futures::future::join_all(creating).await;
                let failed = results.iter().filter(|r| r.is_err()).count();
                made += size;
                if failed > 0 {
                    // Those never made, and the batches not tried, are not expected.
                    self.expectations.lower(key, (failed + n - made) as i64, 0);
                    return Err(results.into_iter().find_map(Result::err).expect("a failure"));
                }
                batch *= 2;
            }
        } else if mine.len() > want {
            let n = (mine.len() - want).min(BURST);
            let mut ranked: Vec<&Value> = mine.iter().map(|p| p.as_ref()).collect();
            ranked.sort_by_key(|p| rank(p));
            self.expectations.expect(key, 0, n as i64);
            let deletes = ranked.into_iter().take(n).map(|p| {
                let name = meta::get(p, "name").to_string();
                let ns = ns.clone();
                async move {
                    match self.client.delete(pods, Some(&ns), &name, &json!({})).await {
                        Ok(_) => {
                            self.recorder.event(
                                owner,
                                self.flavor.kind,
                                "Normal",
                                "SuccessfulDelete",
                                format!("Deleted pod: {name}"),
                            );
                            Ok(())
                        }
                        Err(e) if e.is("NotFound") => {
                            self.expectations.lower(key, 0, 1);
                            Ok(())
                        }
                        Err(e) => {
                            self.expectations.lower(key, 0, 1);
                            Err(e)
                        }
                    }
                }
            });
            for r in futures::future::join_all(deletes).await {
                r?;
            }
        }
        Ok(())
    }

    async fn create_pod(&self, ns: &str, owner: &Value, template: &Value) -> Result<(), Failure> {
        let pods = resource("", "v1", "pods");
        let name = meta::get(owner, "name");
        let mut metadata = template.get("metadata").cloned().unwrap_or_else(|| json!({}));
        metadata["generateName"] = json!(format!("{name}-"));
        metadata["namespace"] = json!(ns);
        metadata["ownerReferences"] =
            json!([super::controller_ref(self.flavor.api_version, self.flavor.kind, name, meta::get(owner, "uid"))]);
        if let Value::Object(m) = &mut metadata {
            m.remove("name");
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec")});
        match self.client.create(pods, Some(ns), &pod).await {
            Ok(made) => {
                let message = format!("Created pod: {}", meta::get(&made, "name"));
                self.recorder.event(owner, self.flavor.kind, "Normal", "SuccessfulCreate", message);
                Ok(())
            }
            Err(e) => {
                let message = format!("Error creating: {}", e.message);
                self.recorder.event(owner, self.flavor.kind, "Warning", "FailedCreate", message);
                Err(e)
            }
        }
    }

    async fn update_status(
        &self,
        key: &str,
        owner: &Value,
        mine: &[Arc<Value>],
        failure: Option<&Failure>,
    ) -> Result<(), Failure> {
        let r = self.flavor.resource();
        let template_labels = owner.pointer("/spec/template/metadata/labels").and_then(Value::as_object);
        let min_ready = owner.pointer("/spec/minReadySeconds").and_then(Value::as_i64).unwrap_or(0);
        let fully = mine
            .iter()
            .filter(|p| {
                template_labels
                    .into_iter()
                    .flatten()
                    .all(|(k, v)| p.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
            })
            .count();
        let ready = mine.iter().filter(|p| ready_since(p).is_some()).count();
        let avail = mine.iter().filter(|p| available(p, min_ready)).count();
        let mut status = json!({
            "replicas": mine.len(),
            "fullyLabeledReplicas": fully,
            "readyReplicas": ready,
            "availableReplicas": avail,
            "observedGeneration": owner.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        });
        // kube's omitempty: zero counts are left out, but replicas.
        for f in ["fullyLabeledReplicas", "readyReplicas", "availableReplicas"] {
            if status[f] == json!(0) {
                status.as_object_mut().expect("an object").remove(f);
            }
        }
        let old_conditions = owner.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut conditions: Vec<Value> =
            old_conditions.iter().filter(|c| c["type"] != "ReplicaFailure").cloned().collect();
        if let Some(e) = failure {
            let reason = "FailedCreate";
            let kept =
                old_conditions.iter().find(|c| c["type"] == "ReplicaFailure" && c["message"] == json!(e.message));
            conditions.push(kept.cloned().unwrap_or_else(|| {
                json!({"type": "ReplicaFailure", "status": "True", "lastTransitionTime": meta::now(), "reason": reason, "message": e.message})
            }));
        }
        if !conditions.is_empty() {
            status["conditions"] = Value::Array(conditions);
        }
        // Pods still settling: look again when they may have become available.
        if min_ready > 0 && avail < ready {
            self.queue.add_after(key, Duration::from_secs(min_ready as u64));
        }
        self.client.put_status(r, owner, status).await
    }
}

/// How soon a pod goes when there are too many (kube's `ActivePods` order): unassigned before
/// assigned, Pending before Unknown before Running, not ready before ready, then the newest.
fn rank(p: &Value) -> (u8, u8, u8, std::cmp::Reverse<String>) {
    let assigned = p.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    let phase = match p.pointer("/status/phase").and_then(Value::as_str) {
        Some("Pending") | None => 0,
        Some("Unknown") => 1,
        _ => 2,
    };
    let created = p.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or("").to_string();
    (u8::from(assigned), phase, u8::from(ready_since(p).is_some()), std::cmp::Reverse(created))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surplus_pods_go_unsettled_first() {
        let p = |name: &str, node: &str, phase: &str, ready: bool, created: &str| {
            let mut v = json!({"metadata": {"name": name, "creationTimestamp": created},
                               "spec": {"nodeName": node}, "status": {"phase": phase}});
            if ready {
                v["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
            }
            v
        };
        let mut pods = [
            p("running-old", "n", "Running", true, "2026-01-01T00:00:00Z"),
            p("running-new", "n", "Running", true, "2026-01-02T00:00:00Z"),
            p("unready", "n", "Running", false, "2026-01-01T00:00:00Z"),
            p("pending", "n", "Pending", false, "2026-01-01T00:00:00Z"),
            p("unassigned", "", "Pending", false, "2026-01-01T00:00:00Z"),
        ];
        pods.sort_by_key(rank);
        let names: Vec<&str> = pods.iter().map(|p| meta::get(p, "name")).collect();
        assert_eq!(names, ["unassigned", "pending", "unready", "running-new", "running-old"]);
    }

    #[test]
    fn controller_references_are_found() {
        let v = json!({"metadata": {"ownerReferences": [
            {"kind": "Other", "name": "x", "uid": "1"},
            {"kind": "ReplicaSet", "name": "rs", "uid": "2", "controller": true}]}});
        assert_eq!(controller_of(&v), Some(("ReplicaSet".into(), "rs".into(), "2".into())));
        assert!(!available(&json!({}), 0));
        assert!(available(&json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}), 0));
    }
}
