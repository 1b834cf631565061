//! The scheduler (kube-scheduler's default profile, in process): pods without a node whose
//! `schedulerName` is `default-scheduler` are placed one at a time. Each node is filtered as
//! kube's plugins filter, in their order, the first refusal counting (NodeUnschedulable,
//! NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, PodTopologySpread,
//! InterPodAffinity); the nodes left are scored (least allocated and balanced allocation with
//! kube's non-zero request defaults, preferred node affinity, PreferNoSchedule taints, preferred
//! pod affinity, soft topology spread and kube's system default spread by hostname and zone;
//! images are free everywhere, so image locality scores all nodes alike) and the pod is bound to
//! the best through `pods/binding`, ties broken at random. The pod is assumed on its node at once,
//! so the next decision counts it before the watch cache shows the binding.
//!
//! A pod that fits nowhere gets kube's `FailedScheduling` event and `PodScheduled=False`
//! (`Unschedulable`) with kube's message, and is retried when the cluster changes (a node added
//! or changed, a pod leaving a node) or after five minutes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm, Taint, Toleration};
use parking_lot::Mutex;
use rand::Rng;
use serde_json::json;

use super::client::{resource, Client};
use super::informer::{self, key_of, split_key, Change};
use super::record::Recorder;
use super::{milli, Failure, Queue};
use crate::rest::Selectors;
use crate::selector::LabelSelector;

/// The scheduler name this scheduler answers to.
pub const NAME: &str = "default-scheduler";
/// How long an unschedulable pod waits at most before it is tried again
/// (`podMaxInUnschedulablePodsDuration`).
const UNSCHEDULABLE_MAX: Duration = Duration::from_secs(300);
/// kube's requests for scoring a container that asks for none.
const DEFAULT_MILLI_CPU: i64 = 100;
const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;
const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// What a pod asks of a node: milli-CPU, memory, ephemeral storage (bytes), and the same CPU and
/// memory with kube's non-zero defaults for scoring.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Requests {
    cpu: i64,
    memory: i64,
    storage: i64,
    scored_cpu: i64,
    scored_memory: i64,
}

impl Requests {
    fn add(&mut self, o: &Requests, sign: i64) {
        self.cpu += sign * o.cpu;
        self.memory += sign * o.memory;
        self.storage += sign * o.storage;
        self.scored_cpu += sign * o.scored_cpu;
        self.scored_memory += sign * o.scored_memory;
    }
}

/// A pod as the scheduler keeps it.
struct PodInfo {
    pod: Arc<Pod>,
    namespace: String,
    labels: BTreeMap<String, String>,
    requests: Requests,
    /// (protocol, hostIP, hostPort) of its host ports.
    ports: Vec<(String, String, i32)>,
    owner: Option<String>,
}

impl PodInfo {
    fn of(pod: Arc<Pod>) -> PodInfo {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let requests = requests(&pod);
        let ports = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                let port = p.host_port.filter(|p| *p > 0)?;
                let ip = p.host_ip.clone().filter(|i| !i.is_empty()).unwrap_or_else(|| "0.0.0.0".into());
                Some((p.protocol.clone().unwrap_or_else(|| "TCP".into()), ip, port))
            })
            .collect();
        let owner =
            pod.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true)).map(|o| o.uid.clone());
        PodInfo { pod, namespace, labels, requests, ports, owner }
    }
}

/// What a pod requests: the larger of its containers' sum and each init container, plus its
/// overhead (kube's `PodRequests`); a container without requests takes its limits.
fn requests(pod: &Pod) -> Requests {
    let Some(spec) = &pod.spec else { return Requests::default() };
    let of = |c: &k8s_openapi::api::core::v1::Container| {
        let res = c.resources.as_ref();
        let get = |name: &str| {
            res.and_then(|r| r.requests.as_ref().and_then(|m| m.get(name)).or_else(|| r.limits.as_ref()?.get(name)))
                .and_then(|q| milli(&q.0))
        };
        let (cpu, memory) = (get("cpu"), get("memory").map(|m| m / 1000));
        Requests {
            cpu: cpu.unwrap_or(0),
            memory: memory.unwrap_or(0),
            storage: get("ephemeral-storage").map_or(0, |s| s / 1000),
            scored_cpu: cpu.unwrap_or(DEFAULT_MILLI_CPU),
            scored_memory: memory.unwrap_or(DEFAULT_MEMORY),
        }
    };
    let mut sum = Requests::default();
    for c in &spec.containers {
        sum.add(&of(c), 1);
    }
    for c in spec.init_containers.iter().flatten() {
        let i = of(c);
        sum.cpu = sum.cpu.max(i.cpu);
        sum.memory = sum.memory.max(i.memory);
        sum.storage = sum.storage.max(i.storage);
    }
    for (name, q) in spec.overhead.iter().flatten() {
        let v = milli(&q.0).unwrap_or(0);
        match name.as_str() {
            "cpu" => {
                sum.cpu += v;
                sum.scored_cpu += v;
            }
            "memory" => {
                sum.memory += v / 1000;
                sum.scored_memory += v / 1000;
            }
            _ => {}
        }
    }
    sum
}

/// A node and the pods on it.
struct NodeInfo {
    node: Arc<Node>,
    pods: HashMap<String, Arc<PodInfo>>,
    requested: Requests,
}

impl NodeInfo {
    fn label(&self, k: &str) -> Option<&str> {
        self.node.metadata.labels.as_ref()?.get(k).map(String::as_str)
    }

    fn allocatable(&self, name: &str) -> i64 {
        let q = self.node.status.as_ref().and_then(|s| s.allocatable.as_ref()).and_then(|a| a.get(name));
        q.and_then(|q| milli(&q.0)).unwrap_or(0)
    }
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, NodeInfo>,
    /// Where each pod on a node is.
    placed: HashMap<String, String>,
    /// Pods that fit nowhere, waiting for the cluster to change.
    unschedulable: HashSet<String>,
    /// Namespaces' labels (for affinity terms' namespace selectors).
    namespaces: HashMap<String, BTreeMap<String, String>>,
}

impl State {
    fn place(&mut self, key: &str, info: PodInfo, node: &str) {
        self.unplace(key);
        let Some(n) = self.nodes.get_mut(node) else {
            // A node the scheduler has not seen yet: remembered once it comes.
            self.placed.insert(key.to_string(), node.to_string());
            return;
        };
        n.requested.add(&info.requests, 1);
        n.pods.insert(key.to_string(), Arc::new(info));
        self.placed.insert(key.to_string(), node.to_string());
    }

    fn unplace(&mut self, key: &str) -> bool {
        let Some(node) = self.placed.remove(key) else { return false };
        if let Some(n) = self.nodes.get_mut(&node) {
            if let Some(p) = n.pods.remove(key) {
                n.requested.add(&p.requests, -1);
            }
        }
        true
    }
}

struct Scheduler {
    client: Client,
    recorder: Recorder,
    state: Mutex<State>,
    queue: Queue,
}

/// Runs the scheduler until the task is aborted.
pub async fn run(client: Client) {
    let recorder = Recorder::new(client.clone(), NAME, None);
    let s = Arc::new(Scheduler { client, recorder, state: Mutex::default(), queue: Queue::new() });
    let (pods, nodes, namespaces) =
        (resource("", "v1", "pods"), resource("", "v1", "nodes"), resource("", "v1", "namespaces"));
    let me = s.clone();
    let ns_watch = informer::run(s.client.cache(namespaces).clone(), Selectors::everything(), move |c| {
        let labels = c.object().value(namespaces).pointer("/metadata/labels").cloned();
        let labels: BTreeMap<String, String> = labels.and_then(|l| serde_json::from_value(l).ok()).unwrap_or_default();
        let name = key_of(c.object());
        let mut st = me.state.lock();
        match c {
            Change::Deleted(_) => st.namespaces.remove(&name),
            _ => st.namespaces.insert(name, labels),
        };
    });
    let me = s.clone();
    let node_watch = informer::run(s.client.cache(nodes).clone(), Selectors::everything(), move |c| me.node_changed(c));
    let me = s.clone();
    let pod_watch = informer::run(s.client.cache(pods).clone(), Selectors::everything(), move |c| me.pod_changed(c));
    let me = s.clone();
    let flush = async move {
        loop {
            tokio::time::sleep(UNSCHEDULABLE_MAX).await;
            me.retry_unschedulable();
        }
    };
    let me = s.clone();
    let workers = s.queue.clone().work("scheduler", 1, move |key| {
        let me = me.clone();
        async move { me.schedule(&key).await }
    });
    super::together(vec![
        Box::pin(ns_watch),
        Box::pin(node_watch),
        Box::pin(pod_watch),
        Box::pin(flush),
        Box::pin(workers),
    ])
    .await;
}

fn terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

impl Scheduler {
    fn retry_unschedulable(&self) {
        let waiting: Vec<String> = self.state.lock().unschedulable.drain().collect();
        for k in waiting {
            self.queue.add(k);
        }
    }

    fn node_changed(&self, c: Change) {
        let name = key_of(c.object());
        {
            let mut st = self.state.lock();
            match &c {
                Change::Deleted(_) => {
                    st.nodes.remove(&name);
                }
                _ => {
                    let Some(node) = c.object().decoded::<Node>() else { return };
                    match st.nodes.get_mut(&name) {
                        Some(n) => n.node = node,
                        None => {
                            let mut n = NodeInfo { node, pods: HashMap::new(), requested: Requests::default() };
                            // Pods bound to it before it was seen.
                            let waiting: Vec<String> =
                                st.placed.iter().filter(|(_, v)| **v == name).map(|(k, _)| k.clone()).collect();
                            for k in waiting {
                                let (ns, pod) = split_key(&k);
                                if let Some(o) = self.client.cached(resource("", "v1", "pods"), ns, pod) {
                                    if let Some(p) = o.decoded::<Pod>() {
                                        let info = PodInfo::of(p);
                                        n.requested.add(&info.requests, 1);
                                        n.pods.insert(k, Arc::new(info));
                                    }
                                }
                            }
                            st.nodes.insert(name, n);
                        }
                    }
                }
            }
        }
        if !matches!(c, Change::Deleted(_)) {
            self.retry_unschedulable();
        }
    }

    fn pod_changed(&self, c: Change) {
        let key = key_of(c.object());
        let Some(pod) = c.object().decoded::<Pod>() else { return };
        let gone = matches!(c, Change::Deleted(_)) || terminal(&pod);
        if gone {
            let was_placed = {
                let mut st = self.state.lock();
                st.unschedulable.remove(&key);
                st.unplace(&key)
            };
            if was_placed {
                self.retry_unschedulable();
            }
            return;
        }
        match node_of(&pod) {
            Some(node) => {
                let node = node.to_string();
                let info = PodInfo::of(pod);
                let mut st = self.state.lock();
                st.unschedulable.remove(&key);
                st.place(&key, info, &node);
            }
            None => {
                // Its status changing (the scheduler's own PodScheduled condition) is no reason to
                // try it again; a change of what it asks for is.
                if let Some(old) = c.old().and_then(|o| o.decoded::<Pod>()) {
                    let same = old.spec == pod.spec && old.metadata.labels == pod.metadata.labels;
                    if same && self.state.lock().unschedulable.contains(&key) {
                        return;
                    }
                }
                let ours = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or(NAME) == NAME;
                if ours && pod.metadata.deletion_timestamp.is_none() {
                    self.queue.add(key);
                }
            }
        }
    }

    async fn schedule(self: &Arc<Self>, key: &str) -> Result<(), Failure> {
        let pods = resource("", "v1", "pods");
        let (ns, name) = split_key(key);
        let Some(o) = self.client.cached(pods, ns, name) else { return Ok(()) };
        let Some(pod) = o.decoded::<Pod>() else { return Ok(()) };
        if node_of(&pod).is_some() || pod.metadata.deletion_timestamp.is_some() || terminal(&pod) {
            return Ok(());
        }
        if self.state.lock().placed.contains_key(key) {
            // Assumed on a node; its binding is on its way.
            return Ok(());
        }
        let decision = {
            let st = self.state.lock();
            decide(&st, &pod)
        };
        match decision {
            Ok(node) => {
                self.state.lock().place(key, PodInfo::of(pod.clone()), &node);
                let binding = json!({
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                });
                // The binding goes on its own while the next pod is decided (kube's binding
                // cycle): the pod counts on its node from now on.
                let (me, key, name, ns) = (self.clone(), key.to_string(), name.to_string(), ns.map(str::to_string));
                tokio::spawn(async move {
                    match me.client.post_sub(pods, ns.as_deref(), &name, "binding", &binding).await {
                        Ok(_) => {
                            let v = o.value(pods);
                            let message = format!("Successfully assigned {}/{name} to {node}", ns.unwrap_or_default());
                            me.recorder.event(&v, "Pod", "Normal", "Scheduled", message);
                        }
                        Err(e) => {
                            me.state.lock().unplace(&key);
                            // Gone, or bound by someone else meanwhile: nothing left to do.
                            if !(e.is("NotFound") || e.code == 409) {
                                tracing::info!(pod = key, error = %e, "binding failed; retrying");
                                me.queue.retry(&key);
                            }
                        }
                    }
                });
                Ok(())
            }
            Err(message) => {
                self.state.lock().unschedulable.insert(key.to_string());
                let v = o.value(pods);
                self.recorder.event(&v, "Pod", "Warning", "FailedScheduling", message.clone());
                let held = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| {
                    cs.iter().find(|c| c.type_ == "PodScheduled").map(|c| {
                        (c.status.clone(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default())
                    })
                });
                if held != Some(("False".into(), "Unschedulable".into(), message.clone())) {
                    let mut updated = v;
                    crate::bindings::set_condition(&mut updated, "PodScheduled", "False", "Unschedulable", &message);
                    match self.client.update(pods, ns, name, Some("status"), &updated).await {
                        Ok(_) => {}
                        Err(e) if e.is("NotFound") => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
        }
    }
}

/// Why a node is refused (one of kube's filter plugins' reasons), and whether preempting pods
/// on it could help.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Refusal {
    reasons: Vec<String>,
    resolvable: bool,
}

fn refuse(reason: impl Into<String>) -> Refusal {
    Refusal { reasons: vec![reason.into()], resolvable: false }
}

/// The node `pod` goes to, or kube's FitError message.
fn decide(st: &State, pod: &Pod) -> Result<String, String> {
    let total = st.nodes.len();
    if total == 0 {
        return Err("no nodes available to schedule pods".into());
    }
    let info = PodInfo::of(Arc::new(pod.clone()));
    let prep = Prep::of(st, &info);
    let mut fits = Vec::new();
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    let mut resolvable = 0;
    for (name, n) in &st.nodes {
        match filter(&prep, n) {
            Ok(()) => fits.push(name.as_str()),
            Err(r) => {
                resolvable += usize::from(r.resolvable);
                for reason in r.reasons {
                    *refusals.entry(reason).or_default() += 1;
                }
            }
        }
    }
    if fits.is_empty() {
        // kube's FitError: "<count> <reason>" strings sorted as strings, then the preemption
        // plugin's verdict likewise.
        let histogram = |m: &BTreeMap<String, usize>| {
            let mut lines: Vec<String> = m.iter().filter(|(_, n)| **n > 0).map(|(r, n)| format!("{n} {r}")).collect();
            lines.sort();
            lines.join(", ")
        };
        let preemption = BTreeMap::from([
            ("No preemption victims found for incoming pod".to_string(), resolvable),
            ("Preemption is not helpful for scheduling".to_string(), total - resolvable),
        ]);
        return Err(format!(
            "0/{total} nodes are available: {}. preemption: 0/{total} nodes are available: {}.",
            histogram(&refusals),
            histogram(&preemption)
        ));
    }
    let scores: Vec<(i64, &str)> = fits.iter().map(|n| (score(&prep, &st.nodes[*n]), *n)).collect();
    let best = scores.iter().map(|(s, _)| *s).max().unwrap_or(0);
    let top: Vec<&str> = scores.iter().filter(|(s, _)| *s == best).map(|(_, n)| *n).collect();
    Ok(top[rand::rng().random_range(0..top.len())].to_string())
}

/// Whether any of `tolerations` tolerates taint `t` (kube's `ToleratesTaint`).
pub fn tolerates(tolerations: &[Toleration], t: &Taint) -> bool {
    tolerations.iter().any(|tol| {
        let effect = tol.effect.as_deref().unwrap_or("");
        if !effect.is_empty() && effect != t.effect {
            return false;
        }
        let key = tol.key.as_deref().unwrap_or("");
        match tol.operator.as_deref().unwrap_or("Equal") {
            "Exists" => key.is_empty() || key == t.key,
            _ => key == t.key && tol.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or(""),
        }
    })
}

/// Whether the node passes the pod's nodeSelector and required node affinity.
fn node_affinity_holds(pod: &Pod, n: &NodeInfo) -> bool {
    fits_node_affinity(pod, &n.node)
}

/// Whether `node` passes the pod's nodeSelector and required node affinity (kube's NodeAffinity
/// filter, which the DaemonSet controller also asks).
pub fn fits_node_affinity(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = &pod.spec else { return true };
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    if let Some(sel) = &spec.node_selector {
        if sel.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return false;
        }
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    match required {
        None => true,
        Some(r) => r.node_selector_terms.iter().any(|t| term_matches(t, node)),
    }
}

fn term_matches(t: &k8s_openapi::api::core::v1::NodeSelectorTerm, node: &Node) -> bool {
    let (exprs, fields) =
        (t.match_expressions.as_deref().unwrap_or_default(), t.match_fields.as_deref().unwrap_or_default());
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let by_labels = LabelSelector::of_node_requirements(exprs).is_some_and(|s| s.matches_map(labels));
    let name: BTreeMap<String, String> =
        [("metadata.name".to_string(), node.metadata.name.clone().unwrap_or_default())].into();
    by_labels && LabelSelector::of_node_requirements(fields).is_some_and(|s| s.matches_map(&name))
}

/// Kube's filters in order; the first that refuses the node decides.
fn filter(prep: &Prep, n: &NodeInfo) -> Result<(), Refusal> {
    let (pod, spec) = (prep.pod, &prep.spec);
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let node_spec = n.node.spec.as_ref();
    // NodeUnschedulable.
    if node_spec.and_then(|s| s.unschedulable) == Some(true) {
        let t =
            Taint { key: "node.kubernetes.io/unschedulable".into(), effect: "NoSchedule".into(), ..Default::default() };
        if !tolerates(tolerations, &t) {
            return Err(refuse("node(s) were unschedulable"));
        }
    }
    // NodeName.
    if let Some(wanted) = spec.node_name.as_deref().filter(|s| !s.is_empty()) {
        if Some(wanted) != n.node.metadata.name.as_deref() {
            return Err(refuse("node(s) didn't match the requested node name"));
        }
    }
    // TaintToleration.
    for t in node_spec.and_then(|s| s.taints.as_ref()).into_iter().flatten() {
        if (t.effect == "NoSchedule" || t.effect == "NoExecute") && !tolerates(tolerations, t) {
            return Err(refuse(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or("")
            )));
        }
    }
    // NodeAffinity.
    if !node_affinity_holds(&pod.pod, n) {
        return Err(refuse("node(s) didn't match Pod's node affinity/selector"));
    }
    // NodePorts.
    for (proto, ip, port) in &pod.ports {
        let taken =
            n.pods.values().flat_map(|p| p.ports.iter()).any(|(p2, ip2, port2)| {
                p2 == proto && port2 == port && (ip == ip2 || ip == "0.0.0.0" || ip2 == "0.0.0.0")
            });
        if taken {
            return Err(refuse("node(s) didn't have free ports for the requested pod ports"));
        }
    }
    // NodeResourcesFit.
    let mut short = Vec::new();
    if n.pods.len() as i64 + 1 > n.allocatable("pods") / 1000 {
        short.push("Too many pods".to_string());
    }
    let r = &pod.requests;
    let checks = [
        ("cpu", r.cpu, n.requested.cpu, n.allocatable("cpu")),
        ("memory", r.memory, n.requested.memory, n.allocatable("memory") / 1000),
        ("ephemeral-storage", r.storage, n.requested.storage, n.allocatable("ephemeral-storage") / 1000),
    ];
    for (name, want, used, has) in checks {
        if want > 0 && want + used > has {
            short.push(format!("Insufficient {name}"));
        }
    }
    if !short.is_empty() {
        return Err(Refusal { reasons: short, resolvable: true });
    }
    // PodTopologySpread (hard constraints).
    for c in &prep.hard_spread {
        let Some(domain) = n.label(&c.key) else {
            return Err(refuse("node(s) didn't match pod topology spread constraints (missing required label)"));
        };
        let here = c.counts.get(domain).copied().unwrap_or(0);
        if (here + c.own) as i64 - c.min as i64 > c.max_skew {
            return Err(refuse("node(s) didn't match pod topology spread constraints"));
        }
    }
    // InterPodAffinity: existing pods' anti-affinity, then the pod's affinity and anti-affinity.
    let in_domain = |d: &Domains| n.label(&d.key).is_some_and(|v| d.values.contains(v));
    if prep.forbidden.iter().any(in_domain) {
        return Err(refuse("node(s) didn't satisfy existing pods anti-affinity rules"));
    }
    for (d, first) in &prep.affinity {
        // The first pod of a group that selects itself may go anywhere the topology key exists.
        let first_here = *first && n.label(&d.key).is_some();
        if !in_domain(d) && !first_here {
            return Err(refuse("node(s) didn't match pod affinity rules"));
        }
    }
    if prep.anti.iter().any(in_domain) {
        return Err(refuse("node(s) didn't match pod anti-affinity rules"));
    }
    Ok(())
}

/// Topology domains: values of one node label.
struct Domains {
    key: String,
    values: HashSet<String>,
}

/// A hard topology spread constraint, counted over the cluster.
struct Spread {
    key: String,
    max_skew: i64,
    counts: HashMap<String, usize>,
    min: usize,
    /// Whether the pod itself counts (its constraint selects it).
    own: usize,
}

/// What one decision computes once over the cluster before it looks at each node (kube's
/// PreFilter and PreScore states), so that each node's filters and scores cost little.
struct Prep<'a> {
    pod: &'a PodInfo,
    spec: k8s_openapi::api::core::v1::PodSpec,
    /// Domains where an existing pod's required anti-affinity selects this pod.
    forbidden: Vec<Domains>,
    /// The pod's required affinity terms: domains holding a pod they select, and whether it may
    /// go first (nothing matches yet and it selects itself).
    affinity: Vec<(Domains, bool)>,
    /// The pod's required anti-affinity terms: domains holding a pod they select.
    anti: Vec<Domains>,
    hard_spread: Vec<Spread>,
    /// Soft spread constraints: key and counts per domain.
    soft_spread: Vec<(String, HashMap<String, usize>)>,
    /// Preferred pod (anti-)affinity: signed weight, key, matching pods per domain.
    preferred: Vec<(i64, String, HashMap<String, i64>)>,
    /// Pods of the same controller per node and per zone (kube's default spreading).
    siblings_by_node: HashMap<String, i64>,
    siblings_by_zone: HashMap<String, i64>,
}

impl<'a> Prep<'a> {
    fn of(st: &'a State, pod: &'a PodInfo) -> Prep<'a> {
        let spec = pod.pod.spec.clone().unwrap_or_default();
        let all = || st.nodes.values().flat_map(|n| n.pods.values().map(move |p| (n, p)));
        let domains = |key: &str, pick: &dyn Fn(&PodInfo) -> bool| Domains {
            key: key.to_string(),
            values: all().filter(|(_, p)| pick(p)).filter_map(|(n, _)| n.label(key).map(str::to_string)).collect(),
        };
        let mut forbidden = Vec::new();
        for (n, other) in all() {
            for t in required_terms(&other.pod, false) {
                if term_selects(st, t, &other.namespace, pod) {
                    if let Some(v) = n.label(&t.topology_key) {
                        forbidden.push(Domains { key: t.topology_key.clone(), values: HashSet::from([v.to_string()]) });
                    }
                }
            }
        }
        let affinity = required_terms(&pod.pod, true)
            .iter()
            .map(|t| {
                let d = domains(&t.topology_key, &|o| term_selects(st, t, &pod.namespace, o));
                let anywhere = all().any(|(_, o)| term_selects(st, t, &pod.namespace, o));
                (d, !anywhere && term_selects(st, t, &pod.namespace, pod))
            })
            .collect();
        let anti = required_terms(&pod.pod, false)
            .iter()
            .map(|t| domains(&t.topology_key, &|o| term_selects(st, t, &pod.namespace, o)))
            .collect();
        let constraints = spec.topology_spread_constraints.clone().unwrap_or_default();
        let hard_spread = constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
            .map(|c| {
                let counts = spread_counts(st, pod, &c.topology_key, c.label_selector.as_ref());
                Spread {
                    key: c.topology_key.clone(),
                    max_skew: i64::from(c.max_skew),
                    min: counts.values().copied().min().unwrap_or(0),
                    own: usize::from(selects(c.label_selector.as_ref(), &pod.labels)),
                    counts,
                }
            })
            .collect();
        let soft_spread = constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == "ScheduleAnyway")
            .map(|c| (c.topology_key.clone(), spread_counts(st, pod, &c.topology_key, c.label_selector.as_ref())))
            .collect();
        let a = spec.affinity.as_ref();
        let weighted = [
            (
                a.and_then(|a| a.pod_affinity.as_ref())
                    .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref()),
                1,
            ),
            (
                a.and_then(|a| a.pod_anti_affinity.as_ref())
                    .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref()),
                -1,
            ),
        ];
        let mut preferred = Vec::new();
        for (terms, sign) in weighted {
            for w in terms.into_iter().flatten() {
                let t = &w.pod_affinity_term;
                let mut counts: HashMap<String, i64> = HashMap::new();
                for (n, o) in all() {
                    if let Some(v) = n.label(&t.topology_key).filter(|_| term_selects(st, t, &pod.namespace, o)) {
                        *counts.entry(v.to_string()).or_default() += 1;
                    }
                }
                preferred.push((sign * i64::from(w.weight), t.topology_key.clone(), counts));
            }
        }
        let (mut siblings_by_node, mut siblings_by_zone) = (HashMap::new(), HashMap::new());
        if let Some(owner) = &pod.owner {
            for (n, _) in all().filter(|(_, o)| o.owner.as_ref() == Some(owner)) {
                *siblings_by_node.entry(n.label(HOSTNAME).unwrap_or("").to_string()).or_default() += 1;
                *siblings_by_zone.entry(n.label(ZONE).unwrap_or("").to_string()).or_default() += 1;
            }
        }
        Prep {
            pod,
            spec,
            forbidden,
            affinity,
            anti,
            hard_spread,
            soft_spread,
            preferred,
            siblings_by_node,
            siblings_by_zone,
        }
    }
}

/// A pod's required affinity (`affinity`) or anti-affinity terms.
fn required_terms(pod: &Pod, affinity: bool) -> &[PodAffinityTerm] {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if affinity {
        a.and_then(|a| a.pod_affinity.as_ref())
            .and_then(|p| p.required_during_scheduling_ignored_during_execution.as_ref())
    } else {
        a.and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|p| p.required_during_scheduling_ignored_during_execution.as_ref())
    };
    terms.map(Vec::as_slice).unwrap_or_default()
}

fn selects(
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    sel.and_then(LabelSelector::of_api).is_some_and(|s| s.matches_map(labels))
}

/// Whether affinity term `t` of a pod in `owner_ns` selects pod `p` (its namespaces: those
/// listed and those its namespace selector picks, or the owner's own).
fn term_selects(st: &State, t: &PodAffinityTerm, owner_ns: &str, p: &PodInfo) -> bool {
    let listed = t.namespaces.as_deref().unwrap_or_default();
    let in_ns = match &t.namespace_selector {
        Some(sel) => {
            listed.contains(&p.namespace)
                || st.namespaces.get(&p.namespace).is_some_and(|labels| selects(Some(sel), labels))
        }
        None if listed.is_empty() => p.namespace == owner_ns,
        None => listed.contains(&p.namespace),
    };
    in_ns && selects(t.label_selector.as_ref(), &p.labels)
}

/// Pods matching `sel` in the pod's namespace, per domain of `key`, over the nodes that pass the
/// pod's node affinity (kube's `nodeAffinityPolicy: Honor`); every such domain is counted, empty
/// ones as 0.
fn spread_counts(
    st: &State,
    pod: &PodInfo,
    key: &str,
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> HashMap<String, usize> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for n in st.nodes.values().filter(|n| node_affinity_holds(&pod.pod, n)) {
        let Some(domain) = n.label(key) else { continue };
        let here = n.pods.values().filter(|p| p.namespace == pod.namespace && selects(sel, &p.labels)).count();
        *counts.entry(domain.to_string()).or_default() += here;
    }
    counts
}

/// A node's score for the pod: kube's default score plugins with their weights.
fn score(prep: &Prep, n: &NodeInfo) -> i64 {
    let pod = prep.pod;
    let (cap_cpu, cap_mem) = (n.allocatable("cpu").max(1), (n.allocatable("memory") / 1000).max(1));
    let cpu = n.requested.scored_cpu + pod.requests.scored_cpu;
    let mem = n.requested.scored_memory + pod.requests.scored_memory;
    // NodeResourcesFit, LeastAllocated (weight 1).
    let free = |used: i64, cap: i64| ((cap - used).max(0) * 100) / cap;
    let least = (free(cpu, cap_cpu) + free(mem, cap_mem)) / 2;
    // NodeResourcesBalancedAllocation (weight 1): 100 minus the spread of the two fractions.
    let (fc, fm) = ((cpu as f64 / cap_cpu as f64).min(1.0), (mem as f64 / cap_mem as f64).min(1.0));
    let balanced = ((1.0 - (fc - fm).abs() / 2.0) * 100.0) as i64;
    let spec = &prep.spec;
    // NodeAffinity, preferred terms (weight 2).
    let preferred: i64 = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref())
        .map_or(0, |ts| ts.iter().filter(|t| term_matches(&t.preference, &n.node)).map(|t| i64::from(t.weight)).sum());
    let node_affinity = preferred.min(100);
    // TaintToleration: untolerated PreferNoSchedule taints cost (weight 3).
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let intolerable = n.node.spec.as_ref().and_then(|s| s.taints.as_ref()).map_or(0, |ts| {
        ts.iter().filter(|t| t.effect == "PreferNoSchedule" && !tolerates(tolerations, t)).count() as i64
    });
    let taints = 100 - (intolerable * 100).min(100);
    // InterPodAffinity, preferred terms (weight 2).
    let pod_affinity: i64 = prep
        .preferred
        .iter()
        .map(|(w, key, counts)| w * n.label(key).and_then(|v| counts.get(v)).copied().unwrap_or(0))
        .sum::<i64>()
        .clamp(-100, 100);
    // PodTopologySpread (weight 2): the pod's soft constraints, or kube's system defaults (3 per
    // host, 5 per zone) over the pods of its controller.
    let crowd = if spec.topology_spread_constraints.as_ref().is_some_and(|c| !c.is_empty()) {
        prep.soft_spread
            .iter()
            .map(|(key, counts)| n.label(key).and_then(|d| counts.get(d)).copied().unwrap_or(0) as i64)
            .sum()
    } else {
        let here = |m: &HashMap<String, i64>, key: &str| n.label(key).and_then(|v| m.get(v)).copied().unwrap_or(0);
        here(&prep.siblings_by_node, HOSTNAME) * 3 + here(&prep.siblings_by_zone, ZONE) * 2
    };
    let spread = 100 - (crowd * 10).min(100);
    least + balanced + 2 * node_affinity + 3 * taints + 2 * pod_affinity + 2 * spread
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn node(name: &str, zone: &str, extra: Value) -> NodeInfo {
        let mut v = json!({
            "metadata": {"name": name, "labels": {HOSTNAME: name, ZONE: zone}},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "3"}},
        });
        json_patch::merge(&mut v, &extra);
        NodeInfo {
            node: Arc::new(serde_json::from_value(v).unwrap()),
            pods: HashMap::new(),
            requested: Requests::default(),
        }
    }

    fn pod(name: &str, spec: Value) -> Pod {
        let mut v = json!({"metadata": {"name": name, "namespace": "d", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        json_patch::merge(&mut v, &json!({"spec": spec}));
        serde_json::from_value(v).unwrap()
    }

    fn state(nodes: Vec<NodeInfo>) -> State {
        let mut st = State::default();
        for n in nodes {
            st.nodes.insert(n.node.metadata.name.clone().unwrap(), n);
        }
        st
    }

    fn bind(st: &mut State, p: Pod, node: &str) {
        let key = format!("d/{}", p.metadata.name.clone().unwrap());
        st.place(&key, PodInfo::of(Arc::new(p)), node);
    }

    fn cpu(m: &str) -> Value {
        json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": m}}}]})
    }

    #[test]
    fn a_pod_that_fits_nowhere_gets_kubes_message() {
        let mut st = state(vec![
            node("a", "z1", json!({})),
            node("b", "z1", json!({"spec": {"unschedulable": true}})),
            node("c", "z2", json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}})),
        ]);
        bind(&mut st, pod("big", cpu("1500m")), "a");
        assert_eq!(
            decide(&st, &pod("p", cpu("1"))).unwrap_err(),
            "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {k: v}, 1 node(s) were \
             unschedulable. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 \
             Preemption is not helpful for scheduling."
        );
        // Tolerating the taint opens c.
        let tolerant = json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}],
                              "tolerations": [{"key": "k", "operator": "Exists"}]});
        assert_eq!(decide(&st, &pod("p", tolerant)), Ok("c".to_string()));
        assert_eq!(decide(&State::default(), &pod("p", json!({}))).unwrap_err(), "no nodes available to schedule pods");
    }

    #[test]
    fn selectors_affinity_ports_and_pod_counts_filter_nodes() {
        let mut st =
            state(vec![node("a", "z1", json!({"metadata": {"labels": {"disk": "ssd"}}})), node("b", "z2", json!({}))]);
        assert_eq!(decide(&st, &pod("p", json!({"nodeSelector": {"disk": "ssd"}}))), Ok("a".into()));
        let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z2"]}]}]}}}});
        assert_eq!(decide(&st, &pod("p", affinity)), Ok("b".into()));
        let port = |n: &str| {
            pod(
                n,
                json!({"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
            )
        };
        bind(&mut st, port("x"), "a");
        assert_eq!(decide(&st, &port("y")), Ok("b".into()));
        bind(&mut st, port("y"), "b");
        assert_eq!(
            decide(&st, &port("z")).unwrap_err(),
            "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports. preemption: 0/2 \
             nodes are available: 2 Preemption is not helpful for scheduling."
        );
        for i in 0..2 {
            bind(&mut st, pod(&format!("f{i}"), json!({})), "a");
            bind(&mut st, pod(&format!("g{i}"), json!({})), "b");
        }
        assert!(decide(&st, &pod("p", json!({}))).unwrap_err().contains("2 Too many pods"));
    }

    #[test]
    fn pod_anti_affinity_and_spread_keep_pods_apart() {
        let mut st = state(vec![node("a", "z1", json!({})), node("b", "z1", json!({})), node("c", "z2", json!({}))]);
        let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE}]}}});
        bind(&mut st, pod("w0", json!({})), "a");
        assert_eq!(decide(&st, &pod("w1", anti.clone())), Ok("c".into()));
        bind(&mut st, pod("w2", json!({})), "c");
        assert!(decide(&st, &pod("w1", anti)).unwrap_err().contains("3 node(s) didn't match pod anti-affinity rules"));
        let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": HOSTNAME,
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
        assert_eq!(decide(&st, &pod("s", spread)), Ok("b".into()));
        let affinity = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}]}}});
        let mut lone = pod("db0", affinity.clone());
        lone.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
        // The first of its group goes anywhere; the next follows it.
        assert!(decide(&st, &lone).is_ok());
        bind(&mut st, lone.clone(), "b");
        lone.metadata.name = Some("db1".into());
        assert_eq!(decide(&st, &lone), Ok("b".into()));
    }

    #[test]
    fn scoring_spreads_a_controllers_pods_and_prefers_free_nodes() {
        let mut st = state(vec![node("a", "z1", json!({})), node("b", "z2", json!({}))]);
        let owned = |n: &str| {
            let mut p = pod(n, json!({}));
            p.metadata.owner_references = Some(vec![serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u1", "controller": true}))
            .unwrap()]);
            p
        };
        bind(&mut st, owned("r0"), "a");
        assert_eq!(decide(&st, &owned("r1")), Ok("b".into()));
        bind(&mut st, pod("heavy", cpu("1500m")), "b");
        assert_eq!(decide(&st, &pod("p", cpu("100m"))), Ok("a".into()));
    }

    #[test]
    fn requests_take_the_larger_of_containers_and_init_containers() {
        let p = pod(
            "p",
            json!({
                "containers": [{"name": "a", "image": "i", "resources": {"requests": {"cpu": "100m", "memory": "1Mi"}}},
                               {"name": "b", "image": "i", "resources": {"limits": {"cpu": "200m"}}}],
                "initContainers": [{"name": "i", "image": "i", "resources": {"requests": {"cpu": "500m"}}}],
            }),
        );
        let r = requests(&p);
        assert_eq!((r.cpu, r.memory, r.scored_memory), (500, 1024 * 1024, 1024 * 1024 + DEFAULT_MEMORY));
    }
}
