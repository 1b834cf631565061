//! The Deployment controller (kube's `deployment` package): a Deployment owns ReplicaSets, one
//! per pod template it has had (named `<deployment>-<pod-template-hash>`, the hash also a label
//! of the template and the selector), and moves replicas from the old ones to the new one:
//! RollingUpdate within `maxSurge` and `maxUnavailable` (unhealthy old pods go first), Recreate
//! by scaling the old ones to zero and waiting for their pods to go before the new one starts.
//! Revisions count up in `deployment.kubernetes.io/revision` (an old template coming back takes
//! a new revision: `kubectl rollout undo`); a paused Deployment only scales; old ReplicaSets
//! past `revisionHistoryLimit` are deleted once a rollout completes. Status and the Available
//! and Progressing conditions are kube's, with its reasons and messages, so `kubectl rollout
//! status` follows a rollout as it follows kube's.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::informer::{self, key_of, split_key, Change};
use super::record::Recorder;
use super::replicaset::controller_of;
use super::{Failure, Queue};
use crate::meta;
use crate::rest::Selectors;
use crate::selector::LabelSelector;

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX: &str = "deployment.kubernetes.io/max-replicas";
pub const HASH: &str = "pod-template-hash";

struct Controller {
    client: Client,
    recorder: Recorder,
    queue: Queue,
}

pub async fn run(client: Client) {
    let recorder = Recorder::new(client.clone(), "deployment-controller", None);
    let c = Arc::new(Controller { client, recorder, queue: Queue::new() });
    let (deployments, replicasets, pods) =
        (resource("apps", "v1", "deployments"), resource("apps", "v1", "replicasets"), resource("", "v1", "pods"));
    let me = c.clone();
    let owners = informer::run(c.client.cache(deployments).clone(), Selectors::everything(), move |ch| {
        me.queue.add(key_of(ch.object()))
    });
    let me = c.clone();
    let sets = informer::run(c.client.cache(replicasets).clone(), Selectors::everything(), move |ch| {
        let v = ch.object().value(replicasets);
        me.enqueue_owner(&v, ch.object().namespace.clone());
    });
    // Recreate waits for old pods to go.
    let me = c.clone();
    let pod_watch = informer::run(c.client.cache(pods).clone(), Selectors::everything(), move |ch| {
        if let Change::Deleted(o) = &ch {
            let v = o.value(pods);
            if let Some((kind, name, _)) = controller_of(&v) {
                if kind == "ReplicaSet" {
                    if let Some(rs) = me.client.cached(replicasets, Some(&o.namespace), &name) {
                        me.enqueue_owner(&rs.value(replicasets), o.namespace.clone());
                    }
                }
            }
        }
    });
    let me = c.clone();
    let workers = c.queue.clone().work("deployment-controller", 5, move |key| {
        let me = me.clone();
        async move { me.sync(&key).await }
    });
    super::together(vec![Box::pin(owners), Box::pin(sets), Box::pin(pod_watch), Box::pin(workers)]).await;
}

fn int(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(0)
}

fn replicas(rs: &Value) -> i64 {
    int(rs.pointer("/spec/replicas"))
}

fn revision(rs: &Value) -> i64 {
    let a = rs.pointer("/metadata/annotations").and_then(|a| a.get(REVISION));
    a.and_then(Value::as_str).and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// `maxSurge` and `maxUnavailable` as numbers (kube's `ResolveFenceposts`: never both zero).
fn fenceposts(d: &Value) -> (i64, i64) {
    let want = int(d.pointer("/spec/replicas"));
    let rolling = d.pointer("/spec/strategy/rollingUpdate");
    let of = |f: &str, round_up: bool| rolling.and_then(|r| r.get(f)).and_then(|v| super::scaled(v, want, round_up));
    let (surge, unavailable) = (of("maxSurge", true).unwrap_or(0), of("maxUnavailable", false).unwrap_or(0));
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable)
}

/// A pod template's hash as kube writes it: FNV-1a of the template (and the collision count),
/// its decimal digits in kube's safe alphabet.
pub fn template_hash(template: &Value, collisions: i64) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(&serde_json::to_vec(template).unwrap_or_default());
    if collisions > 0 {
        feed(collisions.to_string().as_bytes());
    }
    const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string().bytes().map(|c| SAFE[usize::from(c) % SAFE.len()] as char).collect()
}

/// A ReplicaSet's template without the hash label, to compare with its Deployment's.
fn unhashed(rs: &Value) -> Value {
    let mut t = rs.pointer("/spec/template").cloned().unwrap_or(Value::Null);
    if let Some(labels) = t.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.remove(HASH);
    }
    t
}

/// Whether two templates are the same as kube's semantic equality sees them: an empty or
/// absent field (null, `{}`, `[]`) is no field.
pub fn same_template(a: &Value, b: &Value) -> bool {
    fn pruned(v: &Value) -> Option<Value> {
        match v {
            Value::Null => None,
            Value::Object(m) => {
                let m: serde_json::Map<String, Value> =
                    m.iter().filter_map(|(k, x)| Some((k.clone(), pruned(x)?))).collect();
                (!m.is_empty()).then_some(Value::Object(m))
            }
            Value::Array(a) if a.is_empty() => None,
            Value::Array(a) => Some(Value::Array(a.iter().map(|x| pruned(x).unwrap_or(Value::Null)).collect())),
            other => Some(other.clone()),
        }
    }
    pruned(a) == pruned(b)
}

fn condition(d: &Value, kind: &str) -> Option<Value> {
    d.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == kind).cloned()
}

impl Controller {
    fn enqueue_owner(&self, rs: &Value, ns: String) {
        if let Some((kind, name, _)) = controller_of(rs) {
            if kind == "Deployment" {
                self.queue.add(format!("{ns}/{name}"));
            }
            return;
        }
        // An orphan: a Deployment selecting it may adopt it.
        let deployments = resource("apps", "v1", "deployments");
        for d in self.client.cached_list(deployments, Some(&ns)) {
            let dv = d.value(deployments);
            let sel = dv.pointer("/spec/selector").cloned().unwrap_or(Value::Null);
            if crate::workloads::selects(&sel, rs.pointer("/metadata/labels")) {
                self.queue.add(key_of(&d));
            }
        }
    }

    async fn sync(&self, key: &str) -> Result<(), Failure> {
        let (deployments, replicasets) = (resource("apps", "v1", "deployments"), resource("apps", "v1", "replicasets"));
        let (ns, name) = split_key(key);
        let Some(o) = self.client.cached(deployments, ns, name) else { return Ok(()) };
        let d = o.value(deployments);
        let uid = meta::get(&d, "uid").to_string();
        let selector = LabelSelector::of_value(d.pointer("/spec/selector").unwrap_or(&Value::Null));
        let deleting = d.pointer("/metadata/deletionTimestamp").is_some();
        let mut sets = Vec::new();
        for rs in self.client.cached_list(replicasets, ns) {
            let v = rs.value(replicasets);
            let selected = selector.as_ref().is_some_and(|s| s.matches(v.pointer("/metadata/labels")));
            match controller_of(&v) {
                Some((_, _, owner)) if owner == uid => {
                    if selected || deleting {
                        sets.push(v);
                    } else {
                        super::release(&self.client, replicasets, &v, &[&uid]).await?;
                    }
                }
                None if selected && !deleting && v.pointer("/metadata/deletionTimestamp").is_none() => {
                    let owner_ref = super::controller_ref("apps/v1", "Deployment", name, &uid);
                    if super::adopt(&self.client, replicasets, &v, owner_ref).await? {
                        sets.push(v);
                    }
                }
                _ => {}
            }
        }
        if deleting {
            return self.update_status(&d, &sets, None, None).await;
        }
        let template = d.pointer("/spec/template").cloned().unwrap_or(Value::Null);
        let new_at = sets.iter().position(|rs| same_template(&unhashed(rs), &template));
        let paused = d.pointer("/spec/paused") == Some(&json!(true));
        let recreate = d.pointer("/spec/strategy/type").and_then(Value::as_str) == Some("Recreate");
        let want = int(d.pointer("/spec/replicas"));
        let (surge, _) = fenceposts(&d);
        let max_revision = sets.iter().map(revision).max().unwrap_or(0);

        // The new ReplicaSet: found (its revision made the newest), or made.
        let mut progress = None;
        let new = match new_at {
            Some(i) => {
                let rs = sets.remove(i);
                if revision(&rs) < max_revision || revision(&rs) == 0 {
                    let next = (max_revision + 1).to_string();
                    let patch = json!({"metadata": {"annotations": {REVISION: next}}});
                    self.client.merge_patch(replicasets, ns, meta::get(&rs, "name"), None, &patch).await?;
                    progress =
                        Some(("FoundNewReplicaSet", format!("Found new replica set {}", go_q(meta::get(&rs, "name")))));
                }
                Some(rs)
            }
            None if paused => None,
            None => {
                let size = if recreate {
                    0
                } else {
                    let total: i64 = sets.iter().map(replicas).sum();
                    (want + surge - total).clamp(0, want)
                };
                let rs = self.create_new(&d, &template, max_revision + 1, size).await?;
                progress =
                    Some(("NewReplicaSetCreated", format!("Created new replica set {}", go_q(meta::get(&rs, "name")))));
                if size > 0 {
                    self.scaled_event(&d, meta::get(&rs, "name"), 0, size);
                }
                Some(rs)
            }
        };
        let olds = sets;
        self.sync_revision(&d, new.as_ref().map_or(max_revision, revision)).await?;

        let changed = if paused || self.scaling_event(&d, new.as_ref(), &olds) {
            self.scale(&d, new.as_ref(), &olds).await?
        } else if recreate {
            self.recreate(&d, new.as_ref(), &olds).await?
        } else {
            self.rolling(&d, new.as_ref(), &olds).await?
        };
        if changed && progress.is_none() {
            if let Some(rs) = &new {
                progress =
                    Some(("ReplicaSetUpdated", format!("ReplicaSet {} is progressing.", go_q(meta::get(rs, "name")))));
            }
        }
        let complete = new.as_ref().is_some_and(|rs| {
            replicas(rs) == want
                && int(rs.pointer("/status/availableReplicas")) == want
                && olds.iter().all(|o| replicas(o) == 0 && int(o.pointer("/status/replicas")) == 0)
        });
        if complete && !paused {
            self.clean_up(&d, &olds).await?;
        }
        let mut all = olds;
        if let Some(rs) = &new {
            all.push(rs.clone());
        }
        self.update_status(&d, &all, new.as_ref(), progress).await
    }

    async fn create_new(&self, d: &Value, template: &Value, revision: i64, size: i64) -> Result<Value, Failure> {
        let replicasets = resource("apps", "v1", "replicasets");
        let (ns, dname) = (meta::get(d, "namespace"), meta::get(d, "name"));
        let collisions = int(d.pointer("/status/collisionCount"));
        let hash = template_hash(template, collisions);
        let mut t = template.clone();
        t["metadata"]["labels"][HASH] = json!(hash);
        let mut selector = d.pointer("/spec/selector").cloned().unwrap_or_else(|| json!({}));
        selector["matchLabels"][HASH] = json!(hash);
        let mut labels = t["metadata"]["labels"].clone();
        labels[HASH] = json!(hash);
        let mut annotations: serde_json::Map<String, Value> = d
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(k, _)| *k != REVISION && *k != "kubectl.kubernetes.io/last-applied-configuration")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let (surge, _) = fenceposts(d);
        let want = int(d.pointer("/spec/replicas"));
        annotations.insert(REVISION.into(), json!(revision.to_string()));
        annotations.insert(DESIRED.into(), json!(want.to_string()));
        annotations.insert(MAX.into(), json!((want + surge).to_string()));
        let rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": format!("{dname}-{hash}"),
                "namespace": ns,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [super::controller_ref("apps/v1", "Deployment", dname, meta::get(d, "uid"))],
            },
            "spec": {
                "replicas": size,
                "minReadySeconds": d.pointer("/spec/minReadySeconds").cloned().unwrap_or(json!(0)),
                "selector": selector,
                "template": t,
            },
        });
        match self.client.create(replicasets, Some(ns), &rs).await {
            Ok(made) => Ok(made),
            Err(e) if e.is("AlreadyExists") => {
                // The same name with another template: count the collision and try again with a
                // new hash (kube's `collisionCount`).
                let existing = self.client.cached(replicasets, Some(ns), &format!("{dname}-{hash}"));
                if let Some(x) = existing {
                    let v = x.value(replicasets);
                    if same_template(&unhashed(&v), template)
                        && controller_of(&v).is_some_and(|(_, _, u)| u == meta::get(d, "uid"))
                    {
                        return Ok(v);
                    }
                }
                let mut updated = d.clone();
                updated["status"]["collisionCount"] = json!(collisions + 1);
                let deployments = resource("apps", "v1", "deployments");
                self.client.update(deployments, Some(ns), dname, Some("status"), &updated).await?;
                Err(Failure::local(format!("hash collision for ReplicaSet {dname}-{hash}")))
            }
            Err(e) => Err(e),
        }
    }

    /// The Deployment's revision annotation follows its new ReplicaSet's.
    async fn sync_revision(&self, d: &Value, rev: i64) -> Result<(), Failure> {
        if rev == 0 || revision(d) == rev {
            return Ok(());
        }
        // An update at the version seen, as kube's controller writes it (its role may update a
        // Deployment, not patch it).
        let deployments = resource("apps", "v1", "deployments");
        let mut updated = d.clone();
        updated["metadata"]["annotations"][REVISION] = json!(rev.to_string());
        self.client
            .update(deployments, Some(meta::get(d, "namespace")), meta::get(d, "name"), None, &updated)
            .await
            .map(|_| ())
    }

    fn scaled_event(&self, d: &Value, rs: &str, from: i64, to: i64) {
        let how = if to > from { "up" } else { "down" };
        let message = format!("Scaled {how} replica set {rs} from {from} to {to}");
        self.recorder.event(d, "Deployment", "Normal", "ScalingReplicaSet", message);
    }

    /// Sets a ReplicaSet's size (and the annotations saying what its Deployment wants).
    async fn set_size(&self, d: &Value, rs: &Value, size: i64) -> Result<bool, Failure> {
        let replicasets = resource("apps", "v1", "replicasets");
        let want = int(d.pointer("/spec/replicas"));
        let (surge, _) = fenceposts(d);
        let annotations = rs.pointer("/metadata/annotations");
        let same_notes = annotations.and_then(|a| a.get(DESIRED)) == Some(&json!(want.to_string()))
            && annotations.and_then(|a| a.get(MAX)) == Some(&json!((want + surge).to_string()));
        if replicas(rs) == size && same_notes {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {"annotations": {DESIRED: want.to_string(), MAX: (want + surge).to_string()},
                         "resourceVersion": meta::get(rs, "resourceVersion")},
            "spec": {"replicas": size},
        });
        self.client
            .merge_patch(replicasets, Some(meta::get(rs, "namespace")), meta::get(rs, "name"), None, &patch)
            .await?;
        if replicas(rs) != size {
            self.scaled_event(d, meta::get(rs, "name"), replicas(rs), size);
        }
        Ok(replicas(rs) != size)
    }

    /// Whether the Deployment's size changed since its active ReplicaSets were sized.
    fn scaling_event(&self, d: &Value, new: Option<&Value>, olds: &[Value]) -> bool {
        let want = int(d.pointer("/spec/replicas")).to_string();
        new.into_iter().chain(olds).filter(|rs| replicas(rs) > 0).any(|rs| {
            rs.pointer("/metadata/annotations").and_then(|a| a.get(DESIRED)).and_then(Value::as_str)
                != Some(want.as_str())
        })
    }

    /// kube's `scale`: one active ReplicaSet takes the whole size; otherwise the size change is
    /// spread over the active ones in proportion, the rest to the largest.
    async fn scale(&self, d: &Value, new: Option<&Value>, olds: &[Value]) -> Result<bool, Failure> {
        let want = int(d.pointer("/spec/replicas"));
        let all: Vec<&Value> = new.into_iter().chain(olds).collect();
        let active: Vec<&Value> = all.iter().copied().filter(|rs| replicas(rs) > 0).collect();
        let target = match active.as_slice() {
            [one] => Some(*one),
            [] => new.or_else(|| olds.iter().max_by_key(|rs| revision(rs))),
            _ => None,
        };
        if let Some(rs) = target {
            return self.set_size(d, rs, want).await;
        }
        let (surge, _) = fenceposts(d);
        let total: i64 = active.iter().map(|rs| replicas(rs)).sum();
        let allowed = want + surge;
        let delta = allowed - total;
        let mut sizes: Vec<(i64, &Value)> = active.iter().map(|rs| (replicas(rs), *rs)).collect();
        sizes.sort_by_key(|(n, rs)| (std::cmp::Reverse(*n), std::cmp::Reverse(revision(rs))));
        let mut given = 0;
        let mut out = Vec::new();
        for (n, rs) in &sizes {
            let share = if total > 0 { delta * n / total } else { 0 };
            given += share;
            out.push((*rs, (n + share).max(0)));
        }
        if let Some(first) = out.first_mut() {
            first.1 = (first.1 + delta - given).max(0);
        }
        let mut changed = false;
        for (rs, size) in out {
            changed |= self.set_size(d, rs, size).await?;
        }
        Ok(changed)
    }

    async fn rolling(&self, d: &Value, new: Option<&Value>, olds: &[Value]) -> Result<bool, Failure> {
        let Some(new) = new else { return Ok(false) };
        let want = int(d.pointer("/spec/replicas"));
        let (surge, unavailable) = fenceposts(d);
        let total: i64 = olds.iter().map(replicas).sum::<i64>() + replicas(new);
        // Scale the new ReplicaSet up within the surge.
        let new_size = if replicas(new) >= want {
            want
        } else {
            let room = (want + surge - total).max(0);
            replicas(new) + room.min(want - replicas(new))
        };
        if new_size != replicas(new) {
            self.set_size(d, new, new_size).await?;
            return Ok(true);
        }
        self.set_size(d, new, new_size).await?;
        // Scale old ones down within the unavailability allowed.
        let old_total: i64 = olds.iter().map(replicas).sum();
        if old_total == 0 {
            return Ok(false);
        }
        let min_available = want - unavailable;
        let new_unavailable = replicas(new) - int(new.pointer("/status/availableReplicas"));
        let mut room = total - min_available - new_unavailable;
        if room <= 0 {
            return Ok(false);
        }
        let mut oldest_first: Vec<&Value> = olds.iter().filter(|rs| replicas(rs) > 0).collect();
        oldest_first.sort_by_key(|rs| (revision(rs), meta::get(rs, "creationTimestamp").to_string()));
        let mut sizes: Vec<i64> = oldest_first.iter().map(|rs| replicas(rs)).collect();
        // Unhealthy old pods first: they count against availability anyway.
        for (i, rs) in oldest_first.iter().enumerate() {
            let unhealthy = (sizes[i] - int(rs.pointer("/status/availableReplicas"))).max(0);
            let cut = unhealthy.min(room);
            sizes[i] -= cut;
            room -= cut;
        }
        // Then healthy ones, keeping the minimum available.
        let available: i64 =
            olds.iter().chain(std::iter::once(new)).map(|rs| int(rs.pointer("/status/availableReplicas"))).sum();
        let mut healthy_room = (available - min_available).max(0);
        for (i, rs) in oldest_first.iter().enumerate() {
            let healthy = sizes[i].min(int(rs.pointer("/status/availableReplicas")));
            let cut = healthy.min(healthy_room);
            sizes[i] -= cut;
            healthy_room -= cut;
        }
        let mut changed = false;
        for (rs, size) in oldest_first.iter().zip(sizes) {
            changed |= self.set_size(d, rs, size).await?;
        }
        Ok(changed)
    }

    async fn recreate(&self, d: &Value, new: Option<&Value>, olds: &[Value]) -> Result<bool, Failure> {
        let mut changed = false;
        for rs in olds.iter().filter(|rs| replicas(rs) > 0) {
            changed |= self.set_size(d, rs, 0).await?;
        }
        if changed {
            return Ok(true);
        }
        // Old pods must be gone before the new ones start.
        let pods = resource("", "v1", "pods");
        let old_uids: Vec<&str> = olds.iter().map(|rs| meta::get(rs, "uid")).collect();
        let running = self.client.cached_list(pods, Some(meta::get(d, "namespace"))).iter().any(|p| {
            let v = p.value(pods);
            let phase = v.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
            controller_of(&v).is_some_and(|(_, _, u)| old_uids.contains(&u.as_str()))
                && phase != "Succeeded"
                && phase != "Failed"
        });
        if running {
            return Ok(false);
        }
        match new {
            Some(rs) => self.set_size(d, rs, int(d.pointer("/spec/replicas"))).await,
            None => Ok(false),
        }
    }

    /// Deletes old, empty ReplicaSets past `revisionHistoryLimit`, oldest first.
    async fn clean_up(&self, d: &Value, olds: &[Value]) -> Result<(), Failure> {
        let limit = d.pointer("/spec/revisionHistoryLimit").and_then(Value::as_i64).unwrap_or(10).max(0) as usize;
        let mut empty: Vec<&Value> = olds
            .iter()
            .filter(|rs| {
                replicas(rs) == 0
                    && int(rs.pointer("/status/replicas")) == 0
                    && rs.pointer("/metadata/deletionTimestamp").is_none()
            })
            .collect();
        if empty.len() <= limit {
            return Ok(());
        }
        empty.sort_by_key(|rs| revision(rs));
        let replicasets = resource("apps", "v1", "replicasets");
        for rs in &empty[..empty.len() - limit] {
            let options = json!({"preconditions": {"uid": meta::get(rs, "uid")}});
            match self
                .client
                .delete(replicasets, Some(meta::get(rs, "namespace")), meta::get(rs, "name"), &options)
                .await
            {
                Err(e) if !e.is("NotFound") && e.code != 409 => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    async fn update_status(
        &self,
        d: &Value,
        all: &[Value],
        new: Option<&Value>,
        progress: Option<(&str, String)>,
    ) -> Result<(), Failure> {
        let deployments = resource("apps", "v1", "deployments");
        let want = int(d.pointer("/spec/replicas"));
        let sum = |f: &str| all.iter().map(|rs| int(rs.pointer(&format!("/status/{f}")))).sum::<i64>();
        let (total, ready, available) = (sum("replicas"), sum("readyReplicas"), sum("availableReplicas"));
        let updated = new.map_or(0, |rs| int(rs.pointer("/status/replicas")));
        let (_, max_unavailable) = fenceposts(d);
        let now = meta::now();
        let mut status = json!({"observedGeneration": d.pointer("/metadata/generation").cloned().unwrap_or(json!(1))});
        for (f, v) in [
            ("replicas", total),
            ("updatedReplicas", updated),
            ("readyReplicas", ready),
            ("availableReplicas", available),
            ("unavailableReplicas", (want - available).max(0)),
        ] {
            if v != 0 {
                status[f] = json!(v);
            }
        }
        if let Some(c) = d.pointer("/status/collisionCount") {
            status["collisionCount"] = c.clone();
        }
        let set = |kind: &str, st: &str, reason: &str, message: &str, touched: bool| {
            let old = condition(d, kind);
            let same_status = old.as_ref().is_some_and(|o| o["status"] == st);
            let same = same_status && old.as_ref().is_some_and(|o| o["reason"] == reason && o["message"] == message);
            let keep = |f: &str| old.as_ref().and_then(|o| o.get(f).cloned()).unwrap_or(json!(now));
            json!({
                "type": kind, "status": st,
                "lastUpdateTime": if same && !touched { keep("lastUpdateTime") } else { json!(now) },
                "lastTransitionTime": if same_status { keep("lastTransitionTime") } else { json!(now) },
                "reason": reason, "message": message,
            })
        };
        let available_condition = if available >= want - max_unavailable {
            set("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.", false)
        } else {
            set(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                false,
            )
        };
        let paused = d.pointer("/spec/paused") == Some(&json!(true));
        let old_progress = condition(d, "Progressing");
        let rs_name = new.map(|rs| go_q(meta::get(rs, "name")));
        let complete = updated == want && total == want && available == want;
        let progressing = if paused {
            Some(set("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused", false))
        } else if old_progress.as_ref().is_some_and(|c| c["reason"] == "DeploymentPaused") {
            Some(set("Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed", false))
        } else if let (true, Some(n)) = (complete, &rs_name) {
            Some(set(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                &format!("ReplicaSet {n} has successfully progressed."),
                false,
            ))
        } else if let Some((reason, message)) = &progress {
            Some(set("Progressing", "True", reason, message, true))
        } else {
            // No progress this round: past the deadline, the rollout has timed out.
            let deadline = d.pointer("/spec/progressDeadlineSeconds").and_then(Value::as_i64);
            let last = old_progress.as_ref().and_then(|c| c["lastUpdateTime"].as_str().map(str::to_string));
            let age = last.as_deref().and_then(crate::table::age_secs);
            match (deadline, age, &rs_name, &old_progress) {
                (Some(dl), Some(age), Some(n), Some(c)) if c["reason"] != "NewReplicaSetAvailable" && age > dl => {
                    Some(set(
                        "Progressing",
                        "False",
                        "ProgressDeadlineExceeded",
                        &format!("ReplicaSet {n} has timed out progressing."),
                        false,
                    ))
                }
                (Some(dl), Some(age), _, Some(c))
                    if c["status"] == "True" && c["reason"] != "NewReplicaSetAvailable" =>
                {
                    self.queue.add_after(
                        format!("{}/{}", meta::get(d, "namespace"), meta::get(d, "name")),
                        Duration::from_secs((dl - age + 1).max(1) as u64),
                    );
                    old_progress.clone()
                }
                _ => old_progress.clone(),
            }
        };
        let mut conditions = vec![available_condition];
        if let Some(p) = progressing {
            conditions.push(p);
        }
        // kube keeps Progressing before Available once both exist, in the order they came.
        if let Some(old) = d.pointer("/status/conditions").and_then(Value::as_array) {
            conditions.sort_by_key(|c| old.iter().position(|o| o["type"] == c["type"]).unwrap_or(usize::MAX));
        }
        status["conditions"] = Value::Array(conditions);
        self.client.put_status(deployments, d, status).await
    }
}

fn go_q(s: &str) -> String {
    crate::status::go_quote(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenceposts_round_as_kube_rounds_them() {
        let d = |surge: Value, unavailable: Value| json!({"spec": {"replicas": 10, "strategy": {"rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}});
        assert_eq!(fenceposts(&d(json!("25%"), json!("25%"))), (3, 2));
        assert_eq!(fenceposts(&d(json!(0), json!(0))), (0, 1));
        assert_eq!(fenceposts(&d(json!("1"), json!(2))), (1, 2));
    }

    #[test]
    fn template_hashes_use_kubes_alphabet_and_change_with_collisions() {
        let t =
            json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let h = template_hash(&t, 0);
        assert!(!h.is_empty() && h.bytes().all(|c| b"bcdfghjklmnpqrstvwxz2456789".contains(&c)), "{h}");
        assert_eq!(h, template_hash(&t, 0));
        assert_ne!(h, template_hash(&t, 1));
    }

    #[test]
    fn a_replica_sets_template_compares_without_its_hash() {
        let rs = json!({"spec": {"template": {"metadata": {"labels": {"app": "web", HASH: "abc"}}, "spec": {}}}});
        assert_eq!(unhashed(&rs), json!({"metadata": {"labels": {"app": "web"}}, "spec": {}}));
        let t = |c: Value| json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [c]}});
        assert!(same_template(&unhashed(&rs), &json!({"metadata": {"labels": {"app": "web"}, "annotations": {}}})));
        assert!(same_template(&t(json!({"name": "c", "resources": {}})), &t(json!({"name": "c"}))));
        assert!(!same_template(&t(json!({"name": "c", "image": "a"})), &t(json!({"name": "c", "image": "b"}))));
    }
}
