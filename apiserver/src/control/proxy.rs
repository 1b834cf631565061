//! Simulated kube-proxy, one per simulated node: the node's service table, kept from Services and
//! EndpointSlices through informers on the watch caches as kube-proxy keeps its rules — for each
//! Service port, its ClusterIP:port (and NodePort on the node's address, and load-balancer
//! ingress IPs) → the ready endpoints' address:port (serving terminating ones when none is
//! ready, as kube-proxy falls back), only this node's endpoints where a traffic policy is
//! `Local`. Ask a node where traffic would go with
//! `kubectl get --raw /api/v1/nodes/<node>/proxy/services[/<namespace>/<name>]` (the node proxy
//! path, which reaches the simulated node in process).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde_json::Value;

use super::client::{resource, Client};
use super::informer::{self, key_of, Change};
use crate::rest::Selectors;

/// One rule: traffic to `frontend` goes to one of `backends`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// `ClusterIP`, `NodePort` or `LoadBalancer`.
    pub kind: &'static str,
    /// `ip:port/protocol`.
    pub frontend: String,
    /// The Service port's name.
    pub port_name: String,
    /// `ip:port` of each endpoint traffic may go to, sorted.
    pub backends: Vec<String>,
}

/// One node's kube-proxy.
#[derive(Default)]
pub struct Proxier {
    pub node: String,
    pub node_ip: String,
    services: Mutex<HashMap<String, Value>>,
    /// Slices by their key: the Service they belong to (`namespace/name`) and the slice.
    slices: Mutex<HashMap<String, (String, Value)>>,
    /// The table, by Service (`namespace/name`).
    table: RwLock<BTreeMap<String, Vec<Rule>>>,
}

/// The simulated nodes of this process, by name.
pub type Proxies = Arc<RwLock<HashMap<String, Arc<Proxier>>>>;

impl Proxier {
    pub fn new(node: &str, node_ip: &str) -> Arc<Proxier> {
        Arc::new(Proxier { node: node.into(), node_ip: node_ip.into(), ..Default::default() })
    }

    /// The rules of every Service, or of one (`namespace/name`).
    pub fn rules(&self, service: Option<&str>) -> BTreeMap<String, Vec<Rule>> {
        let t = self.table.read();
        match service {
            Some(s) => t.get(s).map(|r| BTreeMap::from([(s.to_string(), r.clone())])).unwrap_or_default(),
            None => t.clone(),
        }
    }

    /// Keeps the table until the task is aborted.
    pub async fn run(self: Arc<Self>, client: Client) {
        let (services, slices) = (resource("", "v1", "services"), resource("discovery.k8s.io", "v1", "endpointslices"));
        let me = self.clone();
        let svc_watch = informer::run(client.cache(services).clone(), Selectors::everything(), move |ch| {
            let key = key_of(ch.object());
            match ch {
                Change::Deleted(_) => me.services.lock().remove(&key),
                c => me.services.lock().insert(key.clone(), c.object().value(services)),
            };
            me.recompute(&key);
        });
        let me = self.clone();
        let slice_watch = informer::run(client.cache(slices).clone(), Selectors::everything(), move |ch| {
            let key = key_of(ch.object());
            let v = ch.object().value(slices);
            let label = v.pointer("/metadata/labels/kubernetes.io~1service-name").and_then(Value::as_str);
            let service = label.map(|s| format!("{}/{s}", ch.object().namespace));
            let before = match ch {
                Change::Deleted(_) => me.slices.lock().remove(&key),
                _ => match &service {
                    Some(s) => me.slices.lock().insert(key, (s.clone(), v)),
                    None => me.slices.lock().remove(&key),
                },
            };
            if let Some((s, _)) = before {
                if Some(&s) != service.as_ref() {
                    me.recompute(&s);
                }
            }
            if let Some(s) = service {
                me.recompute(&s);
            }
        });
        super::together(vec![Box::pin(svc_watch), Box::pin(slice_watch)]).await;
    }

    /// Rebuilds the rules of one Service.
    fn recompute(&self, service: &str) {
        let svc = self.services.lock().get(service).cloned();
        let rules = match svc {
            Some(svc) => {
                let slices: Vec<Value> =
                    self.slices.lock().values().filter(|(s, _)| s == service).map(|(_, v)| v.clone()).collect();
                rules(&svc, &slices, &self.node, &self.node_ip)
            }
            None => Vec::new(),
        };
        let mut t = self.table.write();
        if rules.is_empty() {
            t.remove(service);
        } else {
            t.insert(service.to_string(), rules);
        }
    }
}

/// The rules of Service `svc` on node `node` (at `node_ip`) given its EndpointSlices.
pub fn rules(svc: &Value, slices: &[Value], node: &str, node_ip: &str) -> Vec<Rule> {
    let spec = svc.get("spec").cloned().unwrap_or(Value::Null);
    let kind = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP");
    let cluster_ip = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("");
    if kind == "ExternalName" || cluster_ip.is_empty() || cluster_ip == "None" {
        return Vec::new();
    }
    let local = |policy: &str| spec.get(policy).and_then(Value::as_str) == Some("Local");
    let ingress: Vec<String> = svc
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("ip").and_then(Value::as_str).map(str::to_string))
        .collect();
    let mut out = Vec::new();
    for p in spec.get("ports").and_then(Value::as_array).into_iter().flatten() {
        let name = p.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        let backends = |only_here: bool| {
            let mut ready = Vec::new();
            let mut serving = Vec::new();
            for s in slices {
                let Some(sp) = s
                    .get("ports")
                    .and_then(Value::as_array)
                    .and_then(|ps| ps.iter().find(|x| x.get("name").and_then(Value::as_str).unwrap_or("") == name))
                else {
                    continue;
                };
                let Some(target) = sp.get("port").and_then(Value::as_i64) else { continue };
                for e in s.get("endpoints").and_then(Value::as_array).into_iter().flatten() {
                    if only_here && e.get("nodeName").and_then(Value::as_str) != Some(node) {
                        continue;
                    }
                    let Some(ip) = e.pointer("/addresses/0").and_then(Value::as_str) else { continue };
                    let c = |f: &str| e.pointer(&format!("/conditions/{f}")).and_then(Value::as_bool);
                    let to = format!("{ip}:{target}");
                    if c("ready").unwrap_or(true) {
                        ready.push(to);
                    } else if c("serving") == Some(true) && c("terminating") == Some(true) {
                        serving.push(to);
                    }
                }
            }
            let mut chosen = if ready.is_empty() { serving } else { ready };
            chosen.sort();
            chosen.dedup();
            chosen
        };
        let rule = |kind: &'static str, ip: &str, port: i64, only_here: bool| Rule {
            kind,
            frontend: format!("{ip}:{port}/{protocol}"),
            port_name: name.clone(),
            backends: backends(only_here),
        };
        out.push(rule("ClusterIP", cluster_ip, port, local("internalTrafficPolicy")));
        if let Some(np) = p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
            out.push(rule("NodePort", node_ip, np, local("externalTrafficPolicy")));
        }
        for ip in &ingress {
            out.push(rule("LoadBalancer", ip, port, local("externalTrafficPolicy")));
        }
    }
    out
}

/// `GET /api/v1/nodes/<node>/proxy/<path>` for a simulated node: `services` (the node's table)
/// or `services/<namespace>/<name>` (one Service's rules); kube's 503 for a node this process
/// does not simulate (no kubelet to reach), 404 for another path.
pub fn answer(proxies: &Proxies, node: &str, path: &[&str]) -> Result<Value, crate::status::Status> {
    let Some(p) = proxies.read().get(node).cloned() else {
        let message = format!(
            "error trying to reach service: no simulated kubelet for node {} in this process",
            crate::status::go_quote(node)
        );
        return Err(crate::status::Status::failure(503, "ServiceUnavailable", message, None));
    };
    let service = match path {
        ["services"] => None,
        ["services", ns, name] => Some(format!("{ns}/{name}")),
        _ => return Err(crate::status::Status::failure(404, "NotFound", "404 page not found", None)),
    };
    let rules = p.rules(service.as_deref());
    let services: Vec<Value> = rules.into_iter().map(|(s, r)| serde_json::json!({"service": s, "rules": r})).collect();
    Ok(serde_json::json!({"node": p.node, "nodeIP": p.node_ip, "services": services}))
}

/// The backends a Service's traffic would reach from `proxier`'s node for a frontend.
pub fn backends(proxier: &Proxier, service: &str, kind: &str) -> Vec<Vec<String>> {
    proxier.rules(Some(service)).values().flatten().filter(|r| r.kind == kind).map(|r| r.backends.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules_follow_ports_readiness_and_traffic_policies() {
        let svc = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {
            "type": "NodePort", "clusterIP": "10.0.0.9", "externalTrafficPolicy": "Local",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}});
        let slice = json!({"ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": [
            {"addresses": ["10.128.1.2"], "conditions": {"ready": true}, "nodeName": "node-1"},
            {"addresses": ["10.128.2.2"], "conditions": {"ready": true}, "nodeName": "node-2"},
            {"addresses": ["10.128.2.3"], "conditions": {"ready": false, "serving": false}, "nodeName": "node-2"}]});
        let r = rules(&svc, std::slice::from_ref(&slice), "node-1", "172.16.0.1");
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].frontend.as_str(), &r[0].backends[..]),
            ("10.0.0.9:80/TCP", &["10.128.1.2:8080".to_string(), "10.128.2.2:8080".to_string()][..])
        );
        assert_eq!(
            (r[1].frontend.as_str(), &r[1].backends[..]),
            ("172.16.0.1:30080/TCP", &["10.128.1.2:8080".to_string()][..])
        );
        // Terminating but serving endpoints are used only when nothing is ready.
        let draining = json!({"ports": [{"name": "http", "port": 8080}], "endpoints": [
            {"addresses": ["10.128.1.5"], "conditions": {"ready": false, "serving": true, "terminating": true}}]});
        assert_eq!(rules(&svc, &[draining], "node-1", "172.16.0.1")[0].backends, vec!["10.128.1.5:8080".to_string()]);
        let headless = json!({"spec": {"clusterIP": "None", "ports": [{"port": 80}]}});
        assert!(rules(&headless, &[slice], "node-1", "x").is_empty());
    }
}
