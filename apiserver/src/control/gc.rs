//! The garbage collector (kube's `garbagecollector`): a graph of every object's owner
//! references, fed by informers on every resource's cache. An object whose owners are all gone
//! is deleted (Background); one with some owners gone loses the references to them; an owner
//! deleted in the foreground (`foregroundDeletion` finalizer) has its dependents deleted and
//! keeps its finalizer until no dependent blocks it (`blockOwnerDeletion`); an owner deleted
//! with `orphan` has the references to it removed from its dependents, then its finalizer.
//! An owner missing from the graph is looked up in the store before its dependents are touched
//! (the caches of two resources need not be at the same revision).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};

use super::client::Client;
use super::informer::{self, Change};
use super::{Failure, Queue};
use crate::deletion::{FOREGROUND, ORPHAN};
use crate::meta;
use crate::resources::Resource;
use crate::rest::{Selectors, Target};

#[derive(Clone, Debug)]
struct OwnerRef {
    uid: String,
    api_version: String,
    kind: String,
    name: String,
    block: bool,
}

#[derive(Clone)]
struct Item {
    r: &'static Resource,
    namespace: Option<String>,
    name: String,
    rev: String,
    owners: Vec<OwnerRef>,
    deleting: bool,
    finalizers: Vec<String>,
}

#[derive(Default)]
struct Graph {
    items: HashMap<String, Item>,
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    fn remove(&mut self, uid: &str) -> Option<Item> {
        let old = self.items.remove(uid)?;
        for o in &old.owners {
            if let Some(d) = self.dependents.get_mut(&o.uid) {
                d.remove(uid);
                if d.is_empty() {
                    self.dependents.remove(&o.uid);
                }
            }
        }
        Some(old)
    }

    fn insert(&mut self, uid: String, item: Item) {
        self.remove(&uid);
        for o in &item.owners {
            self.dependents.entry(o.uid.clone()).or_default().insert(uid.clone());
        }
        self.items.insert(uid, item);
    }

    fn dependents_of(&self, uid: &str) -> Vec<(String, Item)> {
        self.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|d| Some((d.clone(), self.items.get(d)?.clone())))
            .collect()
    }
}

struct Collector {
    client: Client,
    graph: Mutex<Graph>,
    queue: Queue,
}

/// The resources the collector watches: each key space once, events left out (they expire).
fn watched(served: Vec<&'static Resource>) -> Vec<&'static Resource> {
    let mut seen = HashSet::new();
    served.into_iter().filter(|r| r.stored() && r.plural != "events" && seen.insert(r.key_prefix())).collect()
}

/// How often the collector looks for custom resources served since it last looked (kube's
/// collector re-reads discovery periodically for the same reason).
const DISCOVERY_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

pub async fn run(client: Client) {
    let c = Arc::new(Collector { client, graph: Mutex::default(), queue: Queue::new() });
    let mut tasks = tokio::task::JoinSet::new();
    let me = c.clone();
    tasks.spawn(c.queue.clone().work("garbage-collector-controller", 5, move |uid| {
        let me = me.clone();
        async move { me.process(&uid).await }
    }));
    // An informer for each resource served, custom resources joining as they are served.
    let mut informed: HashSet<(&'static str, &'static str, &'static str)> = HashSet::new();
    loop {
        for r in watched(c.client.api.served()) {
            let Some(cache) = c.client.api.caches.of(r) else { continue };
            if !informed.insert((r.group, r.version, r.plural)) {
                continue;
            }
            let me = c.clone();
            tasks.spawn(informer::run(cache, Selectors::everything(), move |ch| me.changed(r, ch)));
        }
        tokio::time::sleep(DISCOVERY_PERIOD).await;
    }
}

fn item_of(r: &'static Resource, v: &Value) -> Item {
    let owners = v
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|o| {
            let text = |f: &str| o.get(f).and_then(Value::as_str).unwrap_or("").to_string();
            OwnerRef {
                uid: text("uid"),
                api_version: text("apiVersion"),
                kind: text("kind"),
                name: text("name"),
                block: o.get("blockOwnerDeletion") == Some(&json!(true)),
            }
        })
        .collect();
    let finalizers = v
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect();
    let ns = meta::get(v, "namespace");
    Item {
        r,
        namespace: (!ns.is_empty()).then(|| ns.to_string()),
        name: meta::get(v, "name").to_string(),
        rev: meta::get(v, "resourceVersion").to_string(),
        owners,
        deleting: v.pointer("/metadata/deletionTimestamp").is_some(),
        finalizers,
    }
}

/// The served resource (of `served`) of an owner reference's apiVersion and kind.
fn resource_of(served: &[&'static Resource], api_version: &str, kind: &str) -> Option<&'static Resource> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    served
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
        .or_else(|| served.iter().find(|r| r.group == group && r.kind == kind))
        .copied()
}

impl Collector {
    fn changed(&self, r: &'static Resource, ch: Change) {
        let v = ch.object().value(r);
        let uid = meta::get(&v, "uid").to_string();
        if uid.is_empty() {
            return;
        }
        let mut g = self.graph.lock();
        if let Change::Deleted(_) = ch {
            if let Some(old) = g.remove(&uid) {
                // Its dependents lost an owner; owners waiting for it may go on.
                for o in &old.owners {
                    self.queue.add(o.uid.clone());
                }
            }
            for d in g.dependents.get(&uid).into_iter().flatten() {
                self.queue.add(d.clone());
            }
            return;
        }
        let item = item_of(r, &v);
        let act =
            !item.owners.is_empty() || item.deleting && item.finalizers.iter().any(|f| f == ORPHAN || f == FOREGROUND);
        g.insert(uid.clone(), item);
        if act {
            self.queue.add(uid);
        }
    }

    /// Whether the owner is gone: not in the graph and not in the store with its uid.
    async fn absent(&self, dependent: &Item, o: &OwnerRef) -> Result<bool, Failure> {
        if self.graph.lock().items.contains_key(&o.uid) {
            return Ok(false);
        }
        let Some(r) = resource_of(&self.client.api.served(), &o.api_version, &o.kind) else { return Ok(true) };
        let namespace = if r.namespaced { dependent.namespace.clone() } else { None };
        let target = Target::Object { namespace, name: o.name.clone(), sub: None };
        match self.client.call(r, http::Method::GET, target, &[], None).await {
            Ok(v) => Ok(meta::get(&v, "uid") != o.uid),
            Err(e) if e.is("NotFound") => Ok(true),
            Err(e) => Err(e),
        }
    }

    async fn process(&self, uid: &str) -> Result<(), Failure> {
        let Some(item) = self.graph.lock().items.get(uid).cloned() else { return Ok(()) };
        if item.deleting && item.finalizers.iter().any(|f| f == ORPHAN) {
            return self.orphan(uid, &item).await;
        }
        if item.deleting && item.finalizers.iter().any(|f| f == FOREGROUND) {
            return self.foreground(uid, &item).await;
        }
        if item.owners.is_empty() {
            return Ok(());
        }
        let (mut gone, mut waiting, mut solid) = (Vec::new(), Vec::new(), Vec::new());
        for o in &item.owners {
            if self.absent(&item, o).await? {
                gone.push(o.uid.clone());
                continue;
            }
            let owner = self.graph.lock().items.get(&o.uid).cloned();
            match owner {
                Some(x) if x.deleting && x.finalizers.iter().any(|f| f == FOREGROUND) => waiting.push(o.uid.clone()),
                _ => solid.push(o.uid.clone()),
            }
        }
        if !solid.is_empty() {
            if !gone.is_empty() {
                // Some owners remain: only the references to the gone ones go.
                return self.drop_refs(&item, &gone).await;
            }
            return Ok(());
        }
        let has_dependents = self.graph.lock().dependents.contains_key(uid);
        let policy = if !waiting.is_empty() && has_dependents { "Foreground" } else { "Background" };
        self.delete(uid, &item, policy).await
    }

    async fn delete(&self, uid: &str, item: &Item, policy: &str) -> Result<(), Failure> {
        let options = json!({"propagationPolicy": policy, "preconditions": {"uid": uid}});
        match self.client.delete(item.r, item.namespace.as_deref(), &item.name, &options).await {
            Err(e) if !e.is("NotFound") && e.code != 409 => Err(e),
            _ => Ok(()),
        }
    }

    /// Removes the references to `owners` from the item.
    async fn drop_refs(&self, item: &Item, owners: &[String]) -> Result<(), Failure> {
        let Some(o) = self.client.cached(item.r, item.namespace.as_deref(), &item.name) else { return Ok(()) };
        let owners: Vec<&str> = owners.iter().map(String::as_str).collect();
        super::release(&self.client, item.r, &o.value(item.r), &owners).await
    }

    async fn remove_finalizer(&self, item: &Item, finalizer: &str) -> Result<(), Failure> {
        let left: Vec<&String> = item.finalizers.iter().filter(|f| *f != finalizer).collect();
        let left = if left.is_empty() { Value::Null } else { json!(left) };
        let patch = json!({"metadata": {"finalizers": left, "resourceVersion": item.rev}});
        match self.client.merge_patch(item.r, item.namespace.as_deref(), &item.name, None, &patch).await {
            Err(e) if !e.is("NotFound") => Err(e),
            _ => Ok(()),
        }
    }

    async fn orphan(&self, uid: &str, item: &Item) -> Result<(), Failure> {
        let deps = self.graph.lock().dependents_of(uid);
        for (_, d) in deps {
            self.drop_refs(&d, &[uid.to_string()]).await?;
        }
        self.remove_finalizer(item, ORPHAN).await
    }

    async fn foreground(&self, uid: &str, item: &Item) -> Result<(), Failure> {
        let deps = self.graph.lock().dependents_of(uid);
        let mut blocking = 0;
        for (duid, d) in &deps {
            if d.owners.iter().any(|o| o.uid == uid && o.block) {
                blocking += 1;
            }
            if !d.deleting {
                let has_dependents = self.graph.lock().dependents.contains_key(duid);
                let policy = if has_dependents { "Foreground" } else { "Background" };
                self.delete(duid, d, policy).await?;
            }
        }
        if blocking == 0 {
            return self.remove_finalizer(item, FOREGROUND).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::RESOURCES;

    #[test]
    fn owners_resolve_to_served_resources_and_key_spaces_are_watched_once() {
        let served: Vec<&'static Resource> = RESOURCES.iter().collect();
        assert_eq!(resource_of(&served, "apps/v1", "ReplicaSet").map(|r| r.plural), Some("replicasets"));
        assert_eq!(resource_of(&served, "v1", "Node").map(|r| r.plural), Some("nodes"));
        assert!(resource_of(&served, "example.com/v1", "Thing").is_none());
        let w = watched(served);
        assert!(w.iter().any(|r| r.plural == "pods") && !w.iter().any(|r| r.plural == "events"));
        let mut prefixes: Vec<String> = w.iter().map(|r| r.key_prefix()).collect();
        let n = prefixes.len();
        prefixes.dedup();
        assert_eq!(prefixes.len(), n);
    }

    #[test]
    fn the_graph_tracks_dependents_by_owner() {
        let r = RESOURCES.iter().find(|r| r.kind == "Pod").unwrap();
        let mut g = Graph::default();
        let pod = json!({"metadata": {"name": "p", "namespace": "d", "uid": "p1",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs1", "blockOwnerDeletion": true}]}});
        g.insert("p1".into(), item_of(r, &pod));
        assert_eq!(g.dependents_of("rs1").len(), 1);
        assert!(g.dependents_of("rs1")[0].1.owners[0].block);
        g.remove("p1");
        assert!(g.dependents.is_empty());
    }
}
