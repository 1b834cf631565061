//! Simulated kubelets (each with its kube-proxy, `proxy`), like kwok's but in process: each registers a Node (capacity, allocatable,
//! addresses, a podCIDR, a zone), renews its node Lease every 10 s and posts its status as a
//! kubelet does, and runs the pods bound to it: Pending → Running with container statuses, pod
//! IPs from its podCIDR and Ready conditions; a pod being deleted goes when its grace period
//! ends; a container whose command ends (`true`, `false`, `sleep 5`, `sh -c "exit 3"`) exits
//! with the code it would give after a short simulated run, and restarts as its pod's
//! restartPolicy says (with kubelet's CrashLoopBackOff).
//!
//! A node stops heartbeating while it carries the annotation `keel.dev/heartbeat=stopped` (its
//! kubelet then neither renews its Lease nor posts status nor touches its pods, as a dead
//! kubelet), and resumes when the annotation goes. A Node deleted through the API stays deleted:
//! its kubelet stops.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use parking_lot::Mutex;
use serde_json::{json, Value};
use sha2::Digest;
use tokio::sync::Notify;

use super::client::{resource, Client};
use super::informer::{self, key_of, split_key, Change};
use super::record::Recorder;
use super::{Failure, Queue};
use crate::bindings::set_condition;
use crate::meta;
use crate::rest::{Api, Selectors};

/// The annotation that stops a simulated node's heartbeat while it says `stopped`.
pub const HEARTBEAT: &str = "keel.dev/heartbeat";
/// The node Lease's duration (kubelet's `nodeLeaseDurationSeconds`).
pub const LEASE_SECONDS: u64 = 40;
/// How often the Lease is renewed (a quarter of its duration, as kubelet does).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// How often status is posted when nothing changed (kubelet's `nodeStatusReportFrequency`).
pub const STATUS_REPORT: Duration = Duration::from_secs(300);
/// How long a simulated container with an ending command runs at least.
pub const SHORT_RUN: Duration = Duration::from_secs(1);
/// kubelet's crash-loop back-off: 10 s doubling up to 5 min.
const BACKOFF: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Zones simulated nodes are spread over (`topology.kubernetes.io/zone`), round robin.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// The name of simulated node `i` (from 1).
pub fn node_name(i: usize) -> String {
    format!("node-{i}")
}

/// Node `i`'s podCIDR: a /24 of 10.128.0.0/9.
fn pod_cidr(i: usize) -> [u8; 3] {
    [10, 128 + ((i >> 8) & 0x7f) as u8, (i & 0xff) as u8]
}

/// Node `i`'s InternalIP, in 172.16.0.0/12.
fn node_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(172, 16 + ((i >> 16) & 0x0f) as u8, ((i >> 8) & 0xff) as u8, (i & 0xff) as u8)
}

/// Starts `n` simulated kubelets, `node-1` … `node-<n>`; their tasks.
pub fn start(api: &Api, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    (1..=n)
        .map(|i| {
            let name = node_name(i);
            let client = Client::new(api.clone(), &format!("system:node:{name}"));
            let proxier = super::proxy::Proxier::new(&name, &node_ip(i).to_string());
            api.proxies.write().insert(name.clone(), proxier.clone());
            let proxies = api.proxies.clone();
            let proxy = proxier.run(client.as_user("system:kube-proxy"));
            tokio::spawn(async move {
                tokio::select! {
                    _ = Kubelet::new(client, i).run() => {}
                    _ = proxy => {}
                }
                // A node gone (deleted through the API) takes its kube-proxy with it.
                proxies.write().remove(&name);
            })
        })
        .collect()
}

/// A pod this kubelet runs: when it started and at which address.
#[derive(Clone)]
struct Running {
    uid: String,
    ip: Ipv4Addr,
    started: Timestamp,
    killing: bool,
}

struct Kubelet {
    client: Client,
    name: String,
    index: usize,
    recorder: Recorder,
    /// The node carries `keel.dev/heartbeat=stopped`.
    paused: AtomicBool,
    resumed: Notify,
    gone: Notify,
    pods: Mutex<HashMap<String, Running>>,
    /// Host numbers of the podCIDR in use.
    used: Mutex<BTreeSet<u8>>,
    queue: Queue,
    boot_id: String,
}

impl Kubelet {
    fn new(client: Client, index: usize) -> Arc<Kubelet> {
        let name = node_name(index);
        let recorder = Recorder::new(client.clone(), "kubelet", Some(name.clone()));
        Arc::new(Kubelet {
            client,
            name,
            index,
            recorder,
            paused: AtomicBool::new(false),
            resumed: Notify::new(),
            gone: Notify::new(),
            pods: Mutex::default(),
            used: Mutex::default(),
            queue: Queue::new(),
            boot_id: meta::uid(),
        })
    }

    async fn run(self: Arc<Self>) {
        while let Err(e) = self.register().await {
            tracing::info!(node = self.name, error = %e, "registering the node");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let nodes = resource("", "v1", "nodes");
        let pods = resource("", "v1", "pods");
        let me = self.clone();
        let node_watch =
            informer::run(self.client.cache(nodes).clone(), field(nodes, "metadata.name", &self.name), move |c| {
                me.node_changed(c)
            });
        let me = self.clone();
        let pod_watch =
            informer::run(self.client.cache(pods).clone(), field(pods, "spec.nodeName", &self.name), move |c| {
                me.queue.add(key_of(c.object()))
            });
        let me = self.clone();
        let workers = self.queue.clone().work("kubelet", 2, move |key| {
            let me = me.clone();
            async move { me.sync_pod(&key).await }
        });
        let heartbeat = self.clone().heartbeat();
        let gone = self.gone.notified();
        tokio::select! {
            _ = gone => tracing::info!(node = self.name, "the node was deleted: its kubelet stops"),
            _ = super::together(vec![Box::pin(node_watch), Box::pin(pod_watch), Box::pin(workers), Box::pin(heartbeat)]) => {}
        }
    }

    fn node_changed(&self, c: Change) {
        if let Change::Deleted(_) = c {
            self.gone.notify_one();
            return;
        }
        let node = c.object().value(resource("", "v1", "nodes"));
        let stopped =
            node.pointer(&format!("/metadata/annotations/{}", HEARTBEAT.replace('/', "~1"))) == Some(&json!("stopped"));
        let was = self.paused.swap(stopped, Ordering::SeqCst);
        if was && !stopped {
            tracing::info!(node = self.name, "heartbeat resumes");
            self.resumed.notify_one();
            let pods = resource("", "v1", "pods");
            for p in self.client.cached_list(pods, None) {
                if p.field(pods.selectable().iter().position(|f| *f == "spec.nodeName").unwrap_or(0)) == self.name {
                    self.queue.add(key_of(&p));
                }
            }
        } else if !was && stopped {
            tracing::info!(node = self.name, "heartbeat stopped");
        }
    }

    fn node(&self) -> Value {
        let [a, b, c] = pod_cidr(self.index);
        let cidr = format!("{a}.{b}.{c}.0/24");
        let zone = ZONES[(self.index - 1) % ZONES.len()];
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "beta.kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "topology.kubernetes.io/zone": zone,
                    "type": "keel-simulated",
                },
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                },
            },
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": format!("keel://{}", self.name)},
        })
    }

    /// Creates the Node, as kubelet registers: one already there (a restarted process) is kept.
    async fn register(&self) -> Result<(), Failure> {
        let nodes = resource("", "v1", "nodes");
        match self.client.create(nodes, None, &self.node()).await {
            Ok(_) => {}
            Err(e) if e.is("AlreadyExists") => {}
            Err(e) => return Err(e),
        }
        self.post_status().await
    }

    /// Renews the Lease every `RENEW_INTERVAL` and posts status when it changed or every
    /// `STATUS_REPORT`, unless stopped.
    async fn heartbeat(self: Arc<Self>) {
        let mut posted = tokio::time::Instant::now();
        loop {
            if !self.paused.load(Ordering::SeqCst) {
                if let Err(e) = self.renew_lease().await {
                    tracing::debug!(node = self.name, error = %e, "renewing the node lease");
                }
                if posted.elapsed() >= STATUS_REPORT || !self.status_holds() {
                    match self.post_status().await {
                        Ok(()) => posted = tokio::time::Instant::now(),
                        Err(e) => tracing::debug!(node = self.name, error = %e, "posting node status"),
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(RENEW_INTERVAL) => {}
                _ = self.resumed.notified() => {}
            }
        }
    }

    /// Whether the Node's Ready condition says what this kubelet last said (the node lifecycle
    /// controller marks it Unknown when the Lease lapses).
    fn status_holds(&self) -> bool {
        let Some(node) = self.client.cached(resource("", "v1", "nodes"), None, &self.name) else { return false };
        let node = node.value(resource("", "v1", "nodes"));
        let ready = node
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned());
        ready.is_some_and(|c| c["status"] == "True" && c["reason"] == "KubeletReady")
    }

    async fn renew_lease(&self) -> Result<(), Failure> {
        let leases = resource("coordination.k8s.io", "v1", "leases");
        let ns = "kube-node-lease";
        let now = super::leader::micro_now();
        match self.client.cached(leases, Some(ns), &self.name) {
            Some(o) => {
                let mut lease = o.value(leases);
                lease["spec"]["renewTime"] = json!(now);
                lease["spec"]["holderIdentity"] = json!(self.name);
                self.client.update(leases, Some(ns), &self.name, None, &lease).await.map(|_| ())
            }
            None => {
                let node = self.client.cached(resource("", "v1", "nodes"), None, &self.name);
                let uid = node.map(|n| meta::get(&n.value(resource("", "v1", "nodes")), "uid").to_string());
                let owner =
                    json!([{"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": uid.unwrap_or_default()}]);
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": ns, "ownerReferences": owner},
                    "spec": {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
                });
                match self.client.create(leases, Some(ns), &lease).await {
                    Err(e) if !e.is("AlreadyExists") => Err(e),
                    _ => Ok(()),
                }
            }
        }
    }

    async fn post_status(&self) -> Result<(), Failure> {
        let nodes = resource("", "v1", "nodes");
        let now = meta::now();
        let old = self.client.cached(nodes, None, &self.name).map(|n| n.value(nodes)).unwrap_or(Value::Null);
        let condition = |kind: &str, status: &str, reason: &str, message: &str| {
            let before = old
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == kind).cloned());
            let since = match before {
                Some(b) if b["status"] == status => b["lastTransitionTime"].clone(),
                _ => json!(now),
            };
            json!({"type": kind, "status": status, "lastHeartbeatTime": now, "lastTransitionTime": since,
                   "reason": reason, "message": message})
        };
        let capacity = json!({
            "cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "100Gi",
            "hugepages-1Gi": "0", "hugepages-2Mi": "0",
        });
        let id = format!(
            "{:032x}",
            u128::from_be_bytes(sha2::Sha256::digest(self.name.as_bytes())[..16].try_into().expect("16 bytes"))
        );
        let version = crate::discovery::GIT_VERSION.split('+').next().unwrap_or("v1.33.0");
        let status = json!({"status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": node_ip(self.index).to_string()},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": id, "systemUUID": id, "bootID": self.boot_id,
                "kernelVersion": "6.1.0-keel", "osImage": "keel simulated node",
                "containerRuntimeVersion": "keel://0.1.0", "kubeletVersion": version, "kubeProxyVersion": version,
                "operatingSystem": "linux", "architecture": "amd64",
            },
        }});
        self.client.merge_patch(nodes, None, &self.name, Some("status"), &status).await.map(|_| ())
    }

    fn release(&self, key: &str) {
        if let Some(r) = self.pods.lock().remove(key) {
            let [.., host] = r.ip.octets();
            self.used.lock().remove(&host);
        }
    }

    fn allocate(&self) -> Option<Ipv4Addr> {
        let mut used = self.used.lock();
        let host = (2..=254u8).find(|h| !used.contains(h))?;
        used.insert(host);
        let [a, b, c] = pod_cidr(self.index);
        Some(Ipv4Addr::new(a, b, c, host))
    }

    async fn sync_pod(&self, key: &str) -> Result<(), Failure> {
        let pods = resource("", "v1", "pods");
        let (ns, name) = split_key(key);
        let Some(o) = self.client.cached(pods, ns, name) else {
            self.release(key);
            return Ok(());
        };
        if self.paused.load(Ordering::SeqCst) {
            return Ok(());
        }
        let pod = o.value(pods);
        let uid = meta::get(&pod, "uid").to_string();
        if pod.pointer("/spec/nodeName").and_then(Value::as_str) != Some(self.name.as_str()) {
            self.release(key);
            return Ok(());
        }
        let known = self.pods.lock().get(key).cloned();
        let mut running = match known {
            Some(r) if r.uid == uid => Some(r),
            Some(_) => {
                self.release(key);
                None
            }
            None => None,
        };
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
        let terminal = matches!(phase, "Succeeded" | "Failed");
        if let Some(deleting) = pod.pointer("/metadata/deletionTimestamp").and_then(Value::as_str) {
            if let Some(r) = running.as_mut().filter(|r| !r.killing && !terminal) {
                r.killing = true;
                for c in containers(&pod) {
                    let message = format!("Stopping container {}", c["name"].as_str().unwrap_or(""));
                    self.recorder.event(&pod, "Pod", "Normal", "Killing", message);
                }
                self.pods.lock().insert(key.to_string(), r.clone());
            }
            let end: Option<Timestamp> = deleting.parse().ok();
            let left = end.map_or(Duration::ZERO, |e| until(Timestamp::now(), e));
            if running.is_some() && !terminal && !left.is_zero() {
                self.queue.add_after(key, left);
                return Ok(());
            }
            let options = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}});
            return match self.client.delete(pods, ns, name, &options).await {
                Ok(_) => Ok(()),
                Err(e) if e.is("NotFound") || e.code == 409 => Ok(()),
                Err(e) => Err(e),
            };
        }
        let running = match running {
            Some(r) => r,
            None if terminal => return Ok(()),
            None => {
                let adopted = self.adopt(&pod, &uid);
                let r = match adopted {
                    Some(r) => r,
                    None => {
                        let ip = self.allocate().ok_or_else(|| Failure::local("the node's podCIDR is full"))?;
                        for c in containers(&pod) {
                            let (cname, image) = (c["name"].as_str().unwrap_or(""), c["image"].as_str().unwrap_or(""));
                            let pulled = format!(
                                "Container image {} already present on machine",
                                crate::status::go_quote(image)
                            );
                            self.recorder.event(&pod, "Pod", "Normal", "Pulled", pulled);
                            self.recorder.event(
                                &pod,
                                "Pod",
                                "Normal",
                                "Created",
                                format!("Created container: {cname}"),
                            );
                            self.recorder.event(&pod, "Pod", "Normal", "Started", format!("Started container {cname}"));
                        }
                        Running { uid: uid.clone(), ip, started: Timestamp::now(), killing: false }
                    }
                };
                self.pods.lock().insert(key.to_string(), r.clone());
                r
            }
        };
        let (mut next, status) = self.status_of(&pod, &running, Timestamp::now());
        if let Some(n) = next.take() {
            self.queue.add_after(key, n);
        }
        if pod.get("status") == Some(&status) {
            return Ok(());
        }
        let mut updated = pod;
        updated["status"] = status;
        self.client.update(pods, ns, name, Some("status"), &updated).await.map(|_| ())
    }

    /// A pod this kubelet already ran before it restarted: its address and start from its status.
    fn adopt(&self, pod: &Value, uid: &str) -> Option<Running> {
        let ip: Ipv4Addr = pod.pointer("/status/podIP")?.as_str()?.parse().ok()?;
        let started: Timestamp = pod.pointer("/status/startTime")?.as_str()?.parse().ok()?;
        let [a, b, c, host] = ip.octets();
        if [a, b, c] != pod_cidr(self.index) || !self.used.lock().insert(host) {
            return None;
        }
        Some(Running { uid: uid.to_string(), ip, started, killing: false })
    }

    /// The pod's status at `now` and in how long it changes next (a container ending, a back-off
    /// ending).
    fn status_of(&self, pod: &Value, r: &Running, now: Timestamp) -> (Option<Duration>, Value) {
        let policy = pod.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("Always");
        let elapsed = until(r.started, now);
        let at = |d: Duration| stamp(r.started + SignedDuration::try_from(d).unwrap_or_default());
        let mut next: Option<Duration> = None;
        let mut statuses = Vec::new();
        let (mut all_done, mut any_failed, mut unready) = (true, false, Vec::new());
        for c in containers(pod) {
            let cname = c["name"].as_str().unwrap_or("").to_string();
            let state = container_at(elapsed, program(&c, policy), policy);
            if let Some(n) = state.next {
                next = Some(next.map_or(n - elapsed, |x| x.min(n - elapsed)));
            }
            let id = |restart: u32| {
                let h = sha2::Sha256::digest(format!("{}/{cname}/{restart}", r.uid).as_bytes());
                format!("containerd://{}", h.iter().map(|b| format!("{b:02x}")).collect::<String>())
            };
            let terminated = |(code, from, to): (i32, Duration, Duration), restart: u32| {
                json!({"terminated": {
                    "exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" },
                    "startedAt": at(from), "finishedAt": at(to), "containerID": id(restart),
                }})
            };
            let (st, ready, last) = match state.now {
                Phase::Running(from) => (json!({"running": {"startedAt": at(from)}}), true, state.last),
                Phase::Exited(code, from, to) => {
                    any_failed |= code != 0;
                    (terminated((code, from, to), state.restarts), false, None)
                }
                Phase::BackOff(delay) => {
                    let message = format!(
                        "back-off {}s restarting failed container={cname} pod={}_{}({})",
                        delay.as_secs(),
                        meta::get(pod, "name"),
                        meta::get(pod, "namespace"),
                        r.uid
                    );
                    (json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}}), false, state.last)
                }
            };
            all_done &= matches!(state.now, Phase::Exited(..));
            if !ready {
                unready.push(cname.clone());
            }
            let image = c["image"].as_str().unwrap_or("");
            let mut s = json!({
                "name": cname, "image": image, "imageID": image_id(image),
                "ready": ready, "started": ready, "restartCount": state.restarts, "state": st, "lastState": {},
            });
            if let Some(l) = last {
                s["lastState"] = terminated(l, state.restarts.saturating_sub(1));
            }
            if !matches!(state.now, Phase::BackOff(_)) {
                s["containerID"] = json!(id(state.restarts));
            }
            statuses.push(s);
        }
        let phase = match (all_done, any_failed) {
            (true, true) => "Failed",
            (true, false) => "Succeeded",
            _ => "Running",
        };
        let mut v = pod.clone();
        let started = stamp(r.started);
        set_condition(&mut v, "PodReadyToStartContainers", if all_done { "False" } else { "True" }, "", "");
        set_condition(&mut v, "Initialized", "True", "", "");
        let (ready, reason, message) = if all_done {
            ("False", "PodCompleted", String::new())
        } else if unready.is_empty() {
            ("True", "", String::new())
        } else {
            ("False", "ContainersNotReady", format!("containers with unready status: [{}]", unready.join(" ")))
        };
        set_condition(&mut v, "Ready", ready, reason, &message);
        set_condition(&mut v, "ContainersReady", ready, reason, &message);
        let mut status = v["status"].take();
        let ip = r.ip.to_string();
        let host = node_ip(self.index).to_string();
        status["phase"] = json!(phase);
        status["hostIP"] = json!(host);
        status["hostIPs"] = json!([{"ip": host}]);
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
        status["startTime"] = json!(started);
        status["containerStatuses"] = Value::Array(statuses);
        let init: Vec<Value> = pod
            .pointer("/spec/initContainers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let image = c["image"].as_str().unwrap_or("");
                json!({
                    "name": c["name"], "image": image, "imageID": image_id(image), "ready": true, "started": false,
                    "restartCount": 0, "lastState": {},
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}},
                })
            })
            .collect();
        if !init.is_empty() {
            status["initContainerStatuses"] = Value::Array(init);
        }
        // Ready conditions are kept in kube's order.
        if let Some(cs) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            let order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"];
            cs.sort_by_key(|c| order.iter().position(|o| c["type"] == *o).unwrap_or(order.len()));
        }
        (next, status)
    }
}

fn field(r: &crate::resources::Resource, f: &str, value: &str) -> Selectors {
    let q: crate::rest::Query = [("fieldSelector".to_string(), format!("{f}={value}"))].into_iter().collect();
    Selectors::of(r, &q).expect("a field selector of a selectable field")
}

fn containers(pod: &Value) -> Vec<Value> {
    pod.pointer("/spec/containers").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// An image's digest as a runtime reports it (made from its name).
fn image_id(image: &str) -> String {
    let h = sha2::Sha256::digest(image.as_bytes());
    let repo = image.split(['@']).next().unwrap_or(image);
    let repo = match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    };
    format!("{repo}@sha256:{}", h.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// `t` written as kube writes a `metav1.Time`.
fn stamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// How long from `from` until `to` (zero if `to` is not later).
fn until(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// What a container's command does when run: how long it runs and its exit code; None for a
/// command that runs until stopped (a server, `sleep infinity`, a `while true` loop).
pub fn program(c: &Value, restart_policy: &str) -> Option<(Duration, i32)> {
    let words: Vec<String> = ["command", "args"]
        .iter()
        .flat_map(|f| c.get(*f).and_then(Value::as_array).cloned().unwrap_or_default())
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect();
    let batch = restart_policy != "Always";
    let Some(first) = words.first() else {
        // The image's own entrypoint: a server, or in a pod that ends, a batch step.
        return batch.then_some((SHORT_RUN, 0));
    };
    let base = first.rsplit('/').next().unwrap_or(first);
    if matches!(base, "sh" | "bash" | "ash" | "dash") {
        let script = words.iter().skip_while(|w| !w.starts_with('-') || !w.contains('c')).nth(1);
        return match script {
            Some(s) => script_run(s),
            None => None,
        };
    }
    match simple(&words) {
        Some(r) => r,
        None => batch.then_some((SHORT_RUN, 0)),
    }
}

/// A simple command's run: Some(None) runs forever, Some(Some(..)) ends, None: not one this
/// simulation knows (a program of the image).
fn simple(words: &[String]) -> Option<Option<(Duration, i32)>> {
    let first = words.first()?;
    let base = first.rsplit('/').next().unwrap_or(first);
    match base {
        "true" | "echo" | "printf" | ":" | "date" | "env" | "ls" | "cat" | "hostname" => Some(Some((SHORT_RUN, 0))),
        "false" => Some(Some((SHORT_RUN, 1))),
        "exit" => {
            let code = words.get(1).and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
            Some(Some((SHORT_RUN, code)))
        }
        "sleep" => match words.get(1).map(String::as_str) {
            Some("infinity") | None => Some(None),
            Some(n) => {
                let secs =
                    crate::run::parse_duration(n).ok().or_else(|| n.parse::<f64>().ok().map(Duration::from_secs_f64));
                Some(secs.map(|d| (SHORT_RUN + d, 0)))
            }
        },
        "tail" if words.iter().any(|w| w == "-f") => Some(None),
        _ => None,
    }
}

/// A `sh -c` script's run: its statements one after another (`;`, `&&`, newlines), an endless
/// loop running forever, the last status its exit code.
fn script_run(script: &str) -> Option<(Duration, i32)> {
    let s = script.trim();
    if s.starts_with("while true") || s.starts_with("while :") || s.contains("sleep infinity") {
        return None;
    }
    let mut total = Duration::ZERO;
    let mut code = 0;
    for part in s.split([';', '\n']).flat_map(|p| p.split("&&")) {
        let words: Vec<String> = part.split_whitespace().map(|w| w.trim_matches(['"', '\'']).to_string()).collect();
        if words.is_empty() {
            continue;
        }
        match simple(&words) {
            Some(None) => return None,
            Some(Some((d, c))) => {
                total += d.saturating_sub(SHORT_RUN);
                code = c;
                if words[0] == "exit" || c != 0 && part.contains("&&") {
                    break;
                }
            }
            None => code = 0,
        }
    }
    Some((SHORT_RUN + total, code))
}

/// Where a container's runs stand.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Running since this offset from the pod's start.
    Running(Duration),
    /// Exited for good: code, started, finished.
    Exited(i32, Duration, Duration),
    /// Waiting to restart, after this back-off.
    BackOff(Duration),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct ContainerAt {
    now: Phase,
    restarts: u32,
    /// The run before (code, started, finished).
    last: Option<(i32, Duration, Duration)>,
    /// The offset at which it changes next.
    next: Option<Duration>,
}

/// A container `elapsed` after its pod started, running `run` (None: until stopped) under
/// `policy`.
fn container_at(elapsed: Duration, run: Option<(Duration, i32)>, policy: &str) -> ContainerAt {
    let (mut from, mut restarts, mut last) = (Duration::ZERO, 0u32, None);
    loop {
        let Some((d, code)) = run else {
            return ContainerAt { now: Phase::Running(from), restarts, last, next: None };
        };
        let end = from + d;
        if elapsed < end {
            return ContainerAt { now: Phase::Running(from), restarts, last, next: Some(end) };
        }
        let again = policy == "Always" || policy == "OnFailure" && code != 0;
        if !again {
            return ContainerAt { now: Phase::Exited(code, from, end), restarts, last, next: None };
        }
        let backoff = BACKOFF.saturating_mul(1 << restarts.min(5)).min(MAX_BACKOFF);
        restarts += 1;
        last = Some((code, from, end));
        if elapsed < end + backoff {
            return ContainerAt { now: Phase::BackOff(backoff), restarts, last, next: Some(end + backoff) };
        }
        from = end + backoff;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(command: &[&str]) -> Value {
        json!({"name": "c", "image": "busybox", "command": command})
    }

    #[test]
    fn commands_run_as_they_would() {
        assert_eq!(program(&c(&["true"]), "Never"), Some((SHORT_RUN, 0)));
        assert_eq!(program(&c(&["/bin/false"]), "Never"), Some((SHORT_RUN, 1)));
        assert_eq!(program(&c(&["sleep", "5"]), "Never"), Some((SHORT_RUN + Duration::from_secs(5), 0)));
        assert_eq!(program(&c(&["sleep", "infinity"]), "Never"), None);
        assert_eq!(program(&c(&["sh", "-c", "echo hi; exit 3"]), "Never"), Some((SHORT_RUN, 3)));
        assert_eq!(
            program(&c(&["sh", "-c", "sleep 2 && false"]), "Never"),
            Some((SHORT_RUN + Duration::from_secs(2), 1))
        );
        assert_eq!(program(&c(&["sh", "-c", "while true; do sleep 1; done"]), "Never"), None);
        assert_eq!(program(&c(&["nginx"]), "Always"), None);
        assert_eq!(program(&json!({"name": "c", "image": "nginx"}), "Always"), None);
        assert_eq!(program(&json!({"name": "c", "image": "perl"}), "Never"), Some((SHORT_RUN, 0)));
    }

    #[test]
    fn containers_exit_and_restart_as_their_policy_says() {
        let s = |secs: u64| Duration::from_secs(secs);
        let once = Some((s(1), 1));
        assert_eq!(container_at(s(0), once, "Never").now, Phase::Running(s(0)));
        assert_eq!(container_at(s(2), once, "Never").now, Phase::Exited(1, s(0), s(1)));
        // OnFailure: back-off 10 s, then a second run, then 20 s.
        let a = container_at(s(5), once, "OnFailure");
        assert_eq!((a.now, a.restarts, a.next), (Phase::BackOff(s(10)), 1, Some(s(11))));
        let b = container_at(s(11), once, "OnFailure");
        assert_eq!((b.now, b.restarts, b.last), (Phase::Running(s(11)), 1, Some((1, s(0), s(1)))));
        assert_eq!(container_at(s(13), once, "OnFailure").now, Phase::BackOff(s(20)));
        // A success under OnFailure ends; under Always it restarts.
        assert_eq!(container_at(s(5), Some((s(1), 0)), "OnFailure").now, Phase::Exited(0, s(0), s(1)));
        assert_eq!(container_at(s(5), Some((s(1), 0)), "Always").now, Phase::BackOff(s(10)));
        assert_eq!(container_at(s(100_000), None, "Always").now, Phase::Running(s(0)));
    }

    #[test]
    fn nodes_get_distinct_ranges() {
        assert_eq!(pod_cidr(1), [10, 128, 1]);
        assert_eq!(pod_cidr(300), [10, 129, 44]);
        assert_eq!(node_ip(1), Ipv4Addr::new(172, 16, 0, 1));
        assert_eq!(image_id("nginx:1.25"), format!("nginx@sha256:{:x}", sha2::Sha256::digest(b"nginx:1.25")));
    }
}
