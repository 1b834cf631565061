//! The EndpointSlice and Endpoints controllers (kube's `endpointslice` and `endpoint`): for each
//! Service with a selector, the pods it selects that have an address become endpoints — ready
//! from the pod's Ready condition, serving, terminating while the pod is being deleted, with
//! their node, zone and pod — and the Service's ports resolve against each pod (a named
//! `targetPort` by the pod's container port of that name). EndpointSlices hold at most 100
//! endpoints each, one set of slices per resolved port list, labelled with the service name and
//! `endpointslice-controller.k8s.io`, owned by the Service; the Endpoints object of the same
//! name lists ready and not-ready addresses by port list (kube's subsets).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::informer::{self, key_of, split_key, Change};
use super::{Failure, Queue};
use crate::meta;
use crate::rest::Selectors;

/// The most endpoints a slice holds (kube's `--max-endpoints-per-slice` default).
pub const MAX_PER_SLICE: usize = 100;
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
pub const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
pub const CONTROLLER: &str = "endpointslice-controller.k8s.io";
/// The manager of the slices mirrored from Endpoints.
pub const MIRROR: &str = "endpointslicemirroring-controller.k8s.io";
pub const SKIP_MIRROR: &str = "endpointslice.kubernetes.io/skip-mirror";

/// Which objects a controller keeps: EndpointSlices or Endpoints for Services with selectors,
/// or EndpointSlices mirrored from the Endpoints of Services without (kube's
/// `endpointslicemirroring`: each subset's addresses, ready or not, under its ports).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Slices,
    Endpoints,
    Mirror,
}

struct Controller {
    client: Client,
    queue: Queue,
    kind: Kind,
}

pub async fn run_slices(client: Client) {
    run(client, Kind::Slices).await
}

pub async fn run_endpoints(client: Client) {
    run(client, Kind::Endpoints).await
}

pub async fn run_mirror(client: Client) {
    run(client, Kind::Mirror).await
}

async fn run(client: Client, kind: Kind) {
    let c = Arc::new(Controller { client, queue: Queue::new(), kind });
    let (services, pods) = (resource("", "v1", "services"), resource("", "v1", "pods"));
    let me = c.clone();
    let svc_watch = informer::run(c.client.cache(services).clone(), Selectors::everything(), move |ch| {
        me.queue.add(key_of(ch.object()))
    });
    let mut tasks: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> = vec![Box::pin(svc_watch)];
    if kind != Kind::Mirror {
        let me = c.clone();
        tasks.push(Box::pin(informer::run(c.client.cache(pods).clone(), Selectors::everything(), move |ch| {
            me.pod_changed(ch)
        })));
    }
    // What the controller wrote, changed by someone else, is put back.
    let (slices, endpoints) = (resource("discovery.k8s.io", "v1", "endpointslices"), resource("", "v1", "endpoints"));
    let watched: &[&'static crate::resources::Resource] = match kind {
        Kind::Slices => &[slices],
        Kind::Endpoints => &[endpoints],
        Kind::Mirror => &[slices, endpoints],
    };
    for &owned in watched {
        let me = c.clone();
        tasks.push(Box::pin(informer::run(c.client.cache(owned).clone(), Selectors::everything(), move |ch| {
            let v = ch.object().json(owned);
            let service = if owned.kind == "EndpointSlice" {
                v.pointer(&format!("/metadata/labels/{}", SERVICE_NAME.replace('/', "~1")))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            } else {
                Some(meta::get(&v, "name").to_string())
            };
            if let Some(s) = service {
                me.queue.add(format!("{}/{s}", ch.object().namespace));
            }
        })));
    }
    let me = c.clone();
    let name = match kind {
        Kind::Slices => "endpointslice-controller",
        Kind::Endpoints => "endpoints-controller",
        Kind::Mirror => "endpointslice-mirroring-controller",
    };
    tasks.push(Box::pin(c.queue.clone().work(name, 5, move |key| {
        let me = me.clone();
        async move { me.sync(&key).await }
    })));
    super::together(tasks).await;
}

/// A Service's selector as labels it needs (None: no selector, no managed endpoints).
fn selector(svc: &Value) -> Option<BTreeMap<String, String>> {
    let s: BTreeMap<String, String> = serde_json::from_value(svc.pointer("/spec/selector")?.clone()).ok()?;
    (!s.is_empty()).then_some(s)
}

fn selects(sel: &BTreeMap<String, String>, pod: &Value) -> bool {
    sel.iter().all(|(k, v)| pod.pointer("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str) == Some(v))
}

impl Controller {
    fn pod_changed(&self, ch: Change) {
        let (services, pods) = (resource("", "v1", "services"), resource("", "v1", "pods"));
        let ns = ch.object().namespace.clone();
        let now = ch.object().json(pods);
        let before = ch.old().map(|o| o.json(pods));
        for s in self.client.cached_list(services, Some(&ns)) {
            let sv = s.json(services);
            let Some(sel) = selector(&sv) else { continue };
            if selects(&sel, &now) || before.as_ref().is_some_and(|b| selects(&sel, b)) {
                self.queue.add(key_of(&s));
            }
        }
    }

    async fn sync(&self, key: &str) -> Result<(), Failure> {
        let services = resource("", "v1", "services");
        let (ns, name) = split_key(key);
        let svc = self.client.cached(services, ns, name).map(|o| o.value(services));
        let wanted = svc.as_ref().and_then(|s| selector(s).map(|sel| (s, sel)));
        match self.kind {
            Kind::Slices => {
                let groups = wanted.map(|(s, sel)| endpoints(&self.client, s, &sel));
                self.sync_slices(ns.unwrap_or(""), name, CONTROLLER, groups).await
            }
            Kind::Mirror => {
                let r = resource("", "v1", "endpoints");
                let eps = self.client.cached(r, ns, name).map(|o| o.json(r));
                let mirrored = match (&svc, eps) {
                    (Some(s), Some(e))
                        if selector(s).is_none()
                            && e.pointer(&format!("/metadata/labels/{}", SKIP_MIRROR.replace('/', "~1")))
                                != Some(&json!("true")) =>
                    {
                        Some(mirror(&e))
                    }
                    _ => None,
                };
                self.sync_slices(ns.unwrap_or(""), name, MIRROR, mirrored).await
            }
            Kind::Endpoints => {
                let Some((s, sel)) = wanted else {
                    return self.remove_endpoints(ns.unwrap_or(""), name, svc.is_none()).await;
                };
                self.sync_endpoints(s, endpoints(&self.client, s, &sel)).await
            }
        }
    }

    async fn sync_slices(&self, ns: &str, service: &str, manager: &str, wanted: Option<Groups>) -> Result<(), Failure> {
        let slices = resource("discovery.k8s.io", "v1", "endpointslices");
        let services = resource("", "v1", "services");
        let mut existing: Vec<Value> = self
            .client
            .cached_list(slices, Some(ns))
            .iter()
            .map(|o| o.value(slices))
            .filter(|v| {
                let label = |k: &str| v.pointer("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str);
                label(SERVICE_NAME) == Some(service) && label(MANAGED_BY) == Some(manager)
            })
            .collect();
        existing.sort_by(|a, b| meta::get(a, "name").cmp(meta::get(b, "name")));
        let Some(groups) = wanted else {
            // No Service (or no selector): its slices go (the collector removes them with the
            // Service; a selector removed leaves them to this controller).
            for s in existing {
                self.delete(slices, ns, &s).await?;
            }
            return Ok(());
        };
        let Some(svc) = self.client.cached(services, Some(ns), service).map(|o| o.value(services)) else {
            return Ok(());
        };
        let mut desired: Vec<(Value, Vec<Value>)> = Vec::new();
        for (_, (ports, eps)) in groups {
            for chunk in eps.chunks(MAX_PER_SLICE) {
                desired.push((ports.clone(), chunk.to_vec()));
            }
        }
        if desired.is_empty() {
            // A Service with no endpoints keeps one empty slice, as kube's does.
            desired.push((json!([]), Vec::new()));
        }
        let mut reused = HashSet::new();
        for (ports, eps) in desired {
            // Reuse a slice with these ports, else any left over.
            let pick = existing
                .iter()
                .position(|s| {
                    !reused.contains(meta::get(s, "name")) && s.get("ports").cloned().unwrap_or(json!([])) == ports
                })
                .or_else(|| existing.iter().position(|s| !reused.contains(meta::get(s, "name"))));
            let mut slice = match pick {
                Some(i) => existing[i].clone(),
                None => json!({
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "generateName": format!("{service}-"),
                        "namespace": ns,
                        "ownerReferences": [super::controller_ref("v1", "Service", service, meta::get(&svc, "uid"))],
                    },
                    "addressType": "IPv4",
                }),
            };
            let mut labels = svc.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({}));
            labels[SERVICE_NAME] = json!(service);
            labels[MANAGED_BY] = json!(manager);
            let before = slice.clone();
            slice["metadata"]["labels"] = labels;
            slice["endpoints"] = if eps.is_empty() { Value::Null } else { Value::Array(eps) };
            slice["ports"] = if ports.as_array().is_some_and(|p| p.is_empty()) { Value::Null } else { ports };
            strip_nulls(&mut slice);
            match pick {
                Some(_) => {
                    reused.insert(meta::get(&slice, "name").to_string());
                    if before != slice {
                        self.client.update(slices, Some(ns), meta::get(&slice, "name"), None, &slice).await?;
                    }
                }
                None => {
                    self.client.create(slices, Some(ns), &slice).await?;
                }
            }
        }
        for s in existing.iter().filter(|s| !reused.contains(meta::get(s, "name"))) {
            self.delete(slices, ns, s).await?;
        }
        Ok(())
    }

    async fn delete(&self, r: &'static crate::resources::Resource, ns: &str, v: &Value) -> Result<(), Failure> {
        let options = json!({"preconditions": {"uid": meta::get(v, "uid")}});
        match self.client.delete(r, Some(ns), meta::get(v, "name"), &options).await {
            Err(e) if !e.is("NotFound") && e.code != 409 => Err(e),
            _ => Ok(()),
        }
    }

    async fn remove_endpoints(&self, ns: &str, name: &str, service_gone: bool) -> Result<(), Failure> {
        let r = resource("", "v1", "endpoints");
        // Endpoints of a selector-less Service are its owner's to write; of a deleted one, gone.
        if !service_gone {
            return Ok(());
        }
        match self.client.cached(r, Some(ns), name) {
            Some(o) => self.delete(r, ns, &o.value(r)).await,
            None => Ok(()),
        }
    }

    async fn sync_endpoints(&self, svc: &Value, groups: Groups) -> Result<(), Failure> {
        let r = resource("", "v1", "endpoints");
        let (ns, name) = (meta::get(svc, "namespace"), meta::get(svc, "name"));
        let mut subsets = Vec::new();
        for (_, (ports, eps)) in groups {
            let (mut ready, mut not_ready) = (Vec::new(), Vec::new());
            for e in eps {
                if e.pointer("/conditions/terminating") == Some(&json!(true)) {
                    continue;
                }
                let mut a = json!({"ip": e["addresses"][0], "targetRef": e["targetRef"]});
                if let Some(n) = e.get("nodeName") {
                    a["nodeName"] = n.clone();
                }
                if e.pointer("/conditions/ready") == Some(&json!(true)) {
                    ready.push(a);
                } else {
                    not_ready.push(a);
                }
            }
            if ready.is_empty() && not_ready.is_empty() {
                continue;
            }
            let ports: Vec<Value> = ports
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    let mut out = json!({"port": p["port"], "protocol": p["protocol"]});
                    if let Some(n) = p.get("name").filter(|n| n.as_str().is_some_and(|s| !s.is_empty())) {
                        out["name"] = n.clone();
                    }
                    out
                })
                .collect();
            let mut subset = json!({"ports": ports});
            if !ready.is_empty() {
                subset["addresses"] = Value::Array(ready);
            }
            if !not_ready.is_empty() {
                subset["notReadyAddresses"] = Value::Array(not_ready);
            }
            subsets.push(subset);
        }
        let existing = self.client.cached(r, Some(ns), name).map(|o| o.value(r));
        let mut labels = svc.pointer("/metadata/labels").cloned().unwrap_or_else(|| json!({}));
        labels["endpointslice.kubernetes.io/skip-mirror"] = json!("true");
        let mut want = existing.clone().unwrap_or_else(
            || json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": ns}}),
        );
        want["metadata"]["labels"] = labels;
        want["subsets"] = if subsets.is_empty() { Value::Null } else { Value::Array(subsets) };
        strip_nulls(&mut want);
        match existing {
            Some(e) if e == want => Ok(()),
            Some(_) => self.client.update(r, Some(ns), name, None, &want).await.map(|_| ()),
            None => match self.client.create(r, Some(ns), &want).await {
                Err(e) if !e.is("AlreadyExists") => Err(e),
                _ => Ok(()),
            },
        }
    }
}

fn strip_nulls(v: &mut Value) {
    if let Value::Object(m) = v {
        m.retain(|_, x| !x.is_null());
    }
}

/// Endpoints grouped by their resolved port list.
type Groups = BTreeMap<String, (Value, Vec<Value>)>;

/// The endpoints of the pods `sel` selects in the Service's namespace, grouped by resolved ports.
fn endpoints(client: &Client, svc: &Value, sel: &BTreeMap<String, String>) -> Groups {
    let (pods, nodes) = (resource("", "v1", "pods"), resource("", "v1", "nodes"));
    let ns = meta::get(svc, "namespace");
    let publish = svc.pointer("/spec/publishNotReadyAddresses") == Some(&json!(true));
    let mut groups: Groups = BTreeMap::new();
    for p in client.cached_list(pods, Some(ns)) {
        let pod = p.json(pods);
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
        let ip = pod.pointer("/status/podIP").and_then(Value::as_str).unwrap_or("");
        if !selects(sel, &pod) || ip.is_empty() || phase == "Succeeded" || phase == "Failed" {
            continue;
        }
        let ready = publish || super::replicaset::ready_since(&pod).is_some();
        let terminating = pod.pointer("/metadata/deletionTimestamp").is_some();
        let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        let mut e = json!({
            "addresses": [ip],
            "conditions": {"ready": ready && !terminating, "serving": ready, "terminating": terminating},
            "targetRef": {"kind": "Pod", "namespace": ns, "name": meta::get(&pod, "name"), "uid": meta::get(&pod, "uid")},
        });
        if !node.is_empty() {
            e["nodeName"] = json!(node);
            let zone = client.cached(nodes, None, node).and_then(|n| {
                n.value(nodes).pointer("/metadata/labels").and_then(|l| l.get("topology.kubernetes.io/zone")).cloned()
            });
            if let Some(z) = zone {
                e["zone"] = z;
            }
        }
        let ports = resolve_ports(svc, &pod);
        let group = groups.entry(ports.to_string()).or_insert_with(|| (ports, Vec::new()));
        group.1.push(e);
    }
    for (_, eps) in groups.values_mut() {
        eps.sort_by(|a, b| a["addresses"][0].as_str().cmp(&b["addresses"][0].as_str()));
    }
    groups
}

/// The endpoints of an Endpoints object's subsets, grouped by their ports (kube's mirroring).
fn mirror(eps: &Value) -> Groups {
    let mut groups: Groups = BTreeMap::new();
    for subset in eps.get("subsets").and_then(Value::as_array).into_iter().flatten() {
        let ports: Vec<Value> = subset
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| {
                let mut out = json!({"name": p.get("name").and_then(Value::as_str).unwrap_or(""), "port": p["port"],
                                     "protocol": p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")});
                if let Some(a) = p.get("appProtocol") {
                    out["appProtocol"] = a.clone();
                }
                out
            })
            .collect();
        let ports = Value::Array(ports);
        let group = groups.entry(ports.to_string()).or_insert_with(|| (ports.clone(), Vec::new()));
        for (field, ready) in [("addresses", true), ("notReadyAddresses", false)] {
            for a in subset.get(field).and_then(Value::as_array).into_iter().flatten() {
                let mut e = json!({"addresses": [a["ip"]], "conditions": {"ready": ready}});
                for f in ["nodeName", "targetRef", "hostname"] {
                    if let Some(x) = a.get(f) {
                        e[f] = x.clone();
                    }
                }
                group.1.push(e);
            }
        }
    }
    groups
}

/// The Service's ports as they land on `pod` (kube's `FindPort`): a numeric targetPort as it
/// is, a named one by the pod's container port of that name (a port that does not resolve is
/// left out).
pub fn resolve_ports(svc: &Value, pod: &Value) -> Value {
    let mut out = Vec::new();
    for p in svc.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten() {
        let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        let port = match p.get("targetPort") {
            Some(Value::Number(n)) => n.as_i64(),
            Some(Value::String(name)) => name.parse::<i64>().ok().or_else(|| {
                let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
                containers
                    .into_iter()
                    .flatten()
                    .flat_map(|c| c.get("ports").and_then(Value::as_array).into_iter().flatten())
                    .find_map(|cp| {
                        (cp.get("name").and_then(Value::as_str) == Some(name)
                            && cp.get("protocol").and_then(Value::as_str).unwrap_or("TCP") == protocol)
                            .then(|| cp.get("containerPort").and_then(Value::as_i64))
                            .flatten()
                    })
            }),
            _ => p.get("port").and_then(Value::as_i64),
        };
        let Some(port) = port else { continue };
        let mut e =
            json!({"name": p.get("name").and_then(Value::as_str).unwrap_or(""), "port": port, "protocol": protocol});
        if let Some(a) = p.get("appProtocol") {
            e["appProtocol"] = a.clone();
        }
        out.push(e);
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_mirrored_by_their_ports() {
        let eps = json!({"subsets": [{"addresses": [{"ip": "10.9.0.1", "nodeName": "n"}], "notReadyAddresses": [{"ip": "10.9.0.2"}],
                                      "ports": [{"name": "db", "port": 5432}]}]});
        let groups = mirror(&eps);
        let (ports, eps) = groups.values().next().unwrap();
        assert_eq!(ports, &json!([{"name": "db", "port": 5432, "protocol": "TCP"}]));
        assert_eq!(eps[0], json!({"addresses": ["10.9.0.1"], "conditions": {"ready": true}, "nodeName": "n"}));
        assert_eq!(eps[1]["conditions"]["ready"], json!(false));
    }

    #[test]
    fn named_target_ports_resolve_per_pod() {
        let svc = json!({"spec": {"ports": [
            {"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"},
            {"name": "admin", "port": 9000, "targetPort": 9001, "protocol": "TCP"},
            {"name": "dns", "port": 53, "targetPort": "dns", "protocol": "UDP"}]}});
        let pod = json!({"spec": {"containers": [{"name": "c", "ports": [
            {"name": "web", "containerPort": 8080}, {"name": "dns", "containerPort": 5353, "protocol": "TCP"}]}]}});
        assert_eq!(
            resolve_ports(&svc, &pod),
            json!([{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "admin", "port": 9001, "protocol": "TCP"}])
        );
    }
}
