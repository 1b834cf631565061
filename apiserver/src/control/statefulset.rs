//! The StatefulSet controller (kube's `statefulset` package): pods with stable names
//! `<set>-<ordinal>` (from `spec.ordinals.start`), hostnames and the governing Service as their
//! subdomain, each with its PersistentVolumeClaims `<claim>-<set>-<ordinal>` made from
//! `volumeClaimTemplates` before it. OrderedReady makes pods one at a time in ordinal order, each
//! once the ones before it run and are ready, and removes them from the highest ordinal down;
//! Parallel makes and removes them all at once. Updates roll from the highest ordinal down to
//! `partition`, one pod at a time, each once the others are ready (OnDelete: only pods deleted
//! come back new), across ControllerRevisions; failed pods are made again. Status is kube's
//! (`currentRevision`, `updateRevision`, ready/current/updated/available counts).

use std::collections::HashMap;
use std::sync::Arc;

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

pub const POD_NAME: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX: &str = "apps.kubernetes.io/pod-index";

struct Controller {
    client: Client,
    recorder: Recorder,
    queue: Queue,
    expectations: Arc<Expectations>,
}

pub async fn run(client: Client) {
    let recorder = Recorder::new(client.clone(), "statefulset-controller", None);
    let c = Arc::new(Controller { client, recorder, queue: Queue::new(), expectations: Arc::default() });
    let sets = resource("apps", "v1", "statefulsets");
    let me = c.clone();
    let sts_watch = informer::run(c.client.cache(sets).clone(), Selectors::everything(), move |ch| {
        me.queue.add(key_of(ch.object()))
    });
    let pod_watch =
        super::expectations::owned_pods(c.client.clone(), "StatefulSet", c.queue.clone(), c.expectations.clone());
    let me = c.clone();
    let workers = c.queue.clone().work("statefulset-controller", 2, move |key| {
        let me = me.clone();
        async move { me.sync(&key).await }
    });
    super::together(vec![Box::pin(sts_watch), Box::pin(pod_watch), Box::pin(workers)]).await;
}

fn ordinal_of(set: &str, pod: &Value) -> Option<i64> {
    meta::get(pod, "name").strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}

fn running_and_ready(p: &Value) -> bool {
    p.pointer("/status/phase").and_then(Value::as_str) == Some("Running") && ready_since(p).is_some()
}

fn deleting(p: &Value) -> bool {
    p.pointer("/metadata/deletionTimestamp").is_some()
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<(), Failure> {
        let (sets, pods) = (resource("apps", "v1", "statefulsets"), resource("", "v1", "pods"));
        let (ns, name) = split_key(key);
        let Some(o) = self.client.cached(sets, ns, name) else {
            self.expectations.forget(key);
            return Ok(());
        };
        let sts = o.value(sets);
        if deleting(&sts) || !self.expectations.met(key) {
            return Ok(());
        }
        let uid = meta::get(&sts, "uid").to_string();
        let mine: Vec<Value> = self
            .client
            .cached_list(pods, ns)
            .iter()
            .map(|p| p.json(pods))
            .filter(|p| controller_of(p).is_some_and(|(_, _, u)| u == uid))
            .map(|p| (*p).clone())
            .collect();
        let in_use: Vec<String> = mine.iter().map(|p| revisions::hash_of_pod(p).to_string()).collect();
        let (update, _) = revisions::current(&self.client, &sts, "StatefulSet", "apps/v1", &in_use).await?;
        let replicas = sts.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1).max(0);
        let start = sts.pointer("/spec/ordinals/start").and_then(Value::as_i64).unwrap_or(0);
        let parallel = sts.pointer("/spec/podManagementPolicy").and_then(Value::as_str) == Some("Parallel");
        let by_ordinal: HashMap<i64, &Value> = mine.iter().filter_map(|p| Some((ordinal_of(name, p)?, p))).collect();
        let wanted = start..start + replicas;
        let min_ready = sts.pointer("/spec/minReadySeconds").and_then(Value::as_i64).unwrap_or(0);

        // Failed pods go, to be made again.
        let failed =
            mine.iter().find(|p| p.pointer("/status/phase").and_then(Value::as_str) == Some("Failed") && !deleting(p));
        if let Some(p) = failed {
            return self.delete_pod(key, &sts, p).await;
        }
        // Make the missing ones: in order, each after the ones before it are ready (OrderedReady).
        for i in wanted.clone() {
            match by_ordinal.get(&i) {
                None => {
                    self.create_pod(key, &sts, i, &update).await?;
                    if !parallel {
                        return self.write_status(&sts, &mine, &update, min_ready).await;
                    }
                }
                Some(p) if !parallel && (!running_and_ready(p) || deleting(p)) => {
                    return self.write_status(&sts, &mine, &update, min_ready).await;
                }
                _ => {}
            }
        }
        // Remove those past the size: from the highest ordinal, one at a time (OrderedReady).
        let mut surplus: Vec<(&i64, &&Value)> = by_ordinal.iter().filter(|(i, _)| !wanted.contains(i)).collect();
        surplus.sort_by_key(|(i, _)| std::cmp::Reverse(**i));
        for (_, p) in surplus {
            if deleting(p) {
                if !parallel {
                    return self.write_status(&sts, &mine, &update, min_ready).await;
                }
                continue;
            }
            self.delete_pod(key, &sts, p).await?;
            if !parallel {
                return self.write_status(&sts, &mine, &update, min_ready).await;
            }
        }
        // Roll updates: the highest old pod at or past the partition goes once all are ready.
        let rolling = sts.pointer("/spec/updateStrategy/type").and_then(Value::as_str) != Some("OnDelete");
        let partition =
            sts.pointer("/spec/updateStrategy/rollingUpdate/partition").and_then(Value::as_i64).unwrap_or(0);
        let all_ready =
            wanted.clone().all(|i| by_ordinal.get(&i).is_some_and(|p| running_and_ready(p) && !deleting(p)));
        if rolling && all_ready {
            let old = wanted
                .clone()
                .rev()
                .filter(|i| *i - start >= partition)
                .filter_map(|i| by_ordinal.get(&i))
                .find(|p| revisions::hash_of_pod(p) != update);
            if let Some(p) = old {
                self.delete_pod(key, &sts, p).await?;
            }
        }
        self.write_status(&sts, &mine, &update, min_ready).await
    }

    async fn create_pod(&self, key: &str, sts: &Value, ordinal: i64, hash: &str) -> Result<(), Failure> {
        let (pods, claims) = (resource("", "v1", "pods"), resource("", "v1", "persistentvolumeclaims"));
        let (ns, set) = (meta::get(sts, "namespace"), meta::get(sts, "name"));
        let pod_name = format!("{set}-{ordinal}");
        let mut t = sts.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
        // Its claims first, named for the pod.
        for c in sts.pointer("/spec/volumeClaimTemplates").and_then(Value::as_array).into_iter().flatten() {
            let claim_name = format!("{}-{pod_name}", meta::get(c, "name"));
            let mut claim = c.clone();
            claim["apiVersion"] = json!("v1");
            claim["kind"] = json!("PersistentVolumeClaim");
            claim["metadata"]["name"] = json!(claim_name);
            claim["metadata"]["namespace"] = json!(ns);
            let labels = sts.pointer("/spec/selector/matchLabels").cloned().unwrap_or_else(|| json!({}));
            claim["metadata"]["labels"] = labels;
            if let Value::Object(m) = &mut claim {
                m.remove("status");
            }
            match self.client.create(claims, Some(ns), &claim).await {
                Ok(_) => {
                    let message = format!("create Claim {claim_name} Pod {pod_name} in StatefulSet {set} success");
                    self.recorder.event(sts, "StatefulSet", "Normal", "SuccessfulCreate", message);
                }
                Err(e) if e.is("AlreadyExists") => {}
                Err(e) => return Err(e),
            }
            let volumes = t["spec"].as_object_mut().map(|s| s.entry("volumes").or_insert_with(|| json!([])));
            if let Some(Value::Array(vs)) = volumes {
                vs.retain(|v| v["name"] != c.pointer("/metadata/name").cloned().unwrap_or(Value::Null));
                vs.push(json!({"name": meta::get(c, "name"), "persistentVolumeClaim": {"claimName": claim_name}}));
            }
        }
        let mut metadata = t.get("metadata").cloned().unwrap_or_else(|| json!({}));
        metadata["name"] = json!(pod_name);
        metadata["namespace"] = json!(ns);
        metadata["labels"][revisions::HASH] = json!(hash);
        metadata["labels"][POD_NAME] = json!(pod_name);
        metadata["labels"][POD_INDEX] = json!(ordinal.to_string());
        metadata["ownerReferences"] =
            json!([super::controller_ref("apps/v1", "StatefulSet", set, meta::get(sts, "uid"))]);
        t["spec"]["hostname"] = json!(pod_name);
        if let Some(service) = sts.pointer("/spec/serviceName").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            t["spec"]["subdomain"] = json!(service);
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": t.get("spec")});
        self.expectations.expect(key, 1, 0);
        match self.client.create(pods, Some(ns), &pod).await {
            Ok(_) => {
                let message = format!("create Pod {pod_name} in StatefulSet {set} successful");
                self.recorder.event(sts, "StatefulSet", "Normal", "SuccessfulCreate", message);
                Ok(())
            }
            Err(e) => {
                self.expectations.forget(key);
                if e.is("AlreadyExists") {
                    return Ok(());
                }
                let message = format!("create Pod {pod_name} in StatefulSet {set} failed error: {}", e.message);
                self.recorder.event(sts, "StatefulSet", "Warning", "FailedCreate", message);
                Err(e)
            }
        }
    }

    async fn delete_pod(&self, key: &str, sts: &Value, p: &Value) -> Result<(), Failure> {
        let pods = resource("", "v1", "pods");
        let (ns, pod) = (meta::get(p, "namespace"), meta::get(p, "name"));
        self.expectations.expect(key, 0, 1);
        match self.client.delete(pods, Some(ns), pod, &json!({"preconditions": {"uid": meta::get(p, "uid")}})).await {
            Ok(_) => {
                let message = format!("delete Pod {pod} in StatefulSet {} successful", meta::get(sts, "name"));
                self.recorder.event(sts, "StatefulSet", "Normal", "SuccessfulDelete", message);
                Ok(())
            }
            Err(e) => {
                self.expectations.forget(key);
                if e.is("NotFound") || e.code == 409 {
                    return Ok(());
                }
                Err(e)
            }
        }
    }

    async fn write_status(&self, sts: &Value, mine: &[Value], update: &str, min_ready: i64) -> Result<(), Failure> {
        let live: Vec<&Value> = mine.iter().filter(|p| !deleting(p)).collect();
        let current_revision = sts.pointer("/status/currentRevision").and_then(Value::as_str).map(str::to_string);
        let replicas = sts.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
        let updated = live.iter().filter(|p| revisions::hash_of_pod(p) == update).count() as i64;
        let name = meta::get(sts, "name");
        let update_revision = format!("{name}-{update}");
        // The current revision becomes the update revision once every pod runs it.
        let current = match current_revision {
            Some(c) if !(updated == replicas && live.len() as i64 == replicas) => c,
            _ => update_revision.clone(),
        };
        let current_hash = current.strip_prefix(&format!("{name}-")).unwrap_or("").to_string();
        let mut status = json!({
            "observedGeneration": sts.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            "replicas": live.len(),
            "readyReplicas": live.iter().filter(|p| ready_since(p).is_some()).count(),
            "currentReplicas": live.iter().filter(|p| revisions::hash_of_pod(p) == current_hash).count(),
            "updatedReplicas": updated,
            "availableReplicas": live.iter().filter(|p| available(p, min_ready)).count(),
            "currentRevision": current,
            "updateRevision": update_revision,
            "collisionCount": sts.pointer("/status/collisionCount").cloned().unwrap_or(json!(0)),
        });
        if let Some(m) = status.as_object_mut() {
            m.retain(|k, v| {
                !(v == &json!(0) && matches!(k.as_str(), "readyReplicas" | "currentReplicas" | "updatedReplicas"))
            });
        }
        self.client.put_status(resource("apps", "v1", "statefulsets"), sts, status).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_come_from_pod_names() {
        assert_eq!(ordinal_of("web", &json!({"metadata": {"name": "web-3"}})), Some(3));
        assert_eq!(ordinal_of("web", &json!({"metadata": {"name": "web-x"}})), None);
        assert_eq!(ordinal_of("web", &json!({"metadata": {"name": "webby-1"}})), None);
    }
}
