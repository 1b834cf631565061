//! The control plane inside keel-apiserver: controllers, the scheduler and simulated kubelets,
//! each an observe-compare-act loop that reads through informers on the watch caches
//! (`informer`), keeps a work queue with rate-limited retries (`queue`) and writes through the
//! full request path under its own identity (`client`). The controllers of kube-controller-manager
//! and kube-scheduler run only where this process leads their Lease (`leader`), so several
//! apiservers on one store run each once; simulated kubelets (`kubelet`) run where
//! `--simulated-nodes` starts them.

pub mod aggregation;
pub mod client;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod expectations;
pub mod gc;
pub mod informer;
pub mod job;
pub mod kubelet;
pub mod leader;
pub mod namespace;
pub mod nodelifecycle;
pub mod podgc;
pub mod proxy;
pub mod queue;
pub mod quota;
pub mod record;
pub mod replicaset;
pub mod revisions;
pub mod scheduler;
pub mod serviceaccount;
pub mod statefulset;
pub mod tokens;
pub mod ttl;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use client::{Client, Failure};
pub use queue::Queue;

use serde_json::{json, Value};

use crate::meta;
use crate::resources::Resource;
use crate::rest::Api;

/// Who runs a controller: the lease it runs under and the identity it writes as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    ControllerManager,
    Scheduler,
}

impl Binary {
    fn lease(self) -> &'static str {
        match self {
            Binary::ControllerManager => "kube-controller-manager",
            Binary::Scheduler => "kube-scheduler",
        }
    }

    fn user(self) -> &'static str {
        match self {
            Binary::ControllerManager => "system:kube-controller-manager",
            Binary::Scheduler => "system:kube-scheduler",
        }
    }
}

type Run = fn(Client, &Settings) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the controllers are configured with (kube-controller-manager's flags of those names).
#[derive(Clone)]
pub struct Settings {
    /// `--node-monitor-grace-period`.
    pub node_monitor_grace_period: std::time::Duration,
    /// The service account signing key (`--service-account-signing-key-file`, or the one made
    /// in the data directory) and the CA tokens carry.
    pub signer: Option<Arc<tokens::Signer>>,
}

/// One controller: kube-controller-manager's name for it and the older alias `--controllers`
/// also takes.
pub struct Controller {
    pub name: &'static str,
    pub alias: &'static str,
    pub binary: Binary,
    run: Run,
}

/// Every controller keel runs, in kube-controller-manager's names; `kube-scheduler` is keel's
/// name for the scheduler, which kube runs as its own binary.
pub const CONTROLLERS: &[Controller] = &[
    Controller {
        name: "deployment-controller",
        alias: "deployment",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(deployment::run(c)),
    },
    Controller {
        name: "replicaset-controller",
        alias: "replicaset",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(replicaset::run(c)),
    },
    Controller {
        name: "replicationcontroller-controller",
        alias: "replicationcontroller",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(replicaset::run_rc(c)),
    },
    Controller {
        name: "daemonset-controller",
        alias: "daemonset",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(daemonset::run(c)),
    },
    Controller {
        name: "statefulset-controller",
        alias: "statefulset",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(statefulset::run(c)),
    },
    Controller {
        name: "job-controller",
        alias: "job",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(job::run(c)),
    },
    Controller {
        name: "cronjob-controller",
        alias: "cronjob",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(cronjob::run(c)),
    },
    Controller {
        name: "ttl-after-finished-controller",
        alias: "ttl-after-finished",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(ttl::run(c)),
    },
    Controller {
        name: "garbage-collector-controller",
        alias: "garbagecollector",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(gc::run(c)),
    },
    Controller {
        name: "endpointslice-controller",
        alias: "endpointslice",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(endpoints::run_slices(c)),
    },
    Controller {
        name: "endpoints-controller",
        alias: "endpoint",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(endpoints::run_endpoints(c)),
    },
    Controller {
        name: "endpointslice-mirroring-controller",
        alias: "endpointslicemirroring",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(endpoints::run_mirror(c)),
    },
    Controller {
        name: "namespace-controller",
        alias: "namespace",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(namespace::run(c)),
    },
    Controller {
        name: "serviceaccount-controller",
        alias: "serviceaccount",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(serviceaccount::run(c)),
    },
    Controller {
        name: "serviceaccount-token-controller",
        alias: "serviceaccount-token",
        binary: Binary::ControllerManager,
        run: |c, s| Box::pin(tokens::run(c, s.signer.clone())),
    },
    Controller {
        name: "node-lifecycle-controller",
        alias: "nodelifecycle",
        binary: Binary::ControllerManager,
        run: |c, s| Box::pin(nodelifecycle::run(c, s.node_monitor_grace_period)),
    },
    Controller {
        name: "pod-garbage-collector-controller",
        alias: "podgc",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(podgc::run(c)),
    },
    Controller {
        name: "disruption-controller",
        alias: "disruption",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(disruption::run(c)),
    },
    Controller {
        name: "resourcequota-controller",
        alias: "resourcequota",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(quota::run(c)),
    },
    Controller {
        name: "clusterrole-aggregation-controller",
        alias: "clusterrole-aggregation",
        binary: Binary::ControllerManager,
        run: |c, _| Box::pin(aggregation::run(c)),
    },
    Controller {
        name: "kube-scheduler",
        alias: "scheduler",
        binary: Binary::Scheduler,
        run: |c, _| Box::pin(scheduler::run(c)),
    },
];

/// The controllers `--controllers` enables, as kube-controller-manager reads the flag: `*`
/// enables every controller on by default, `name` one, `-name` disables one; a name it does not
/// know is an error.
pub fn enabled(flag: &[String]) -> Result<Vec<&'static Controller>, String> {
    // `--controllers=` (nothing named) runs none.
    let flag: Vec<&String> = flag.iter().filter(|f| !f.is_empty()).collect();
    for f in &flag {
        let name = f.strip_prefix('-').unwrap_or(f);
        if name != "*" && !CONTROLLERS.iter().any(|c| c.name == name || c.alias == name) {
            return Err(format!("{f:?} is not in the list of known controllers"));
        }
    }
    let said = |c: &Controller, n: &str| n == c.name || n == c.alias;
    Ok(CONTROLLERS
        .iter()
        .filter(|c| {
            if flag.iter().any(|f| f.strip_prefix('-').is_some_and(|n| said(c, n))) {
                return false;
            }
            flag.iter().any(|f| *f == "*" || said(c, f))
        })
        .collect())
}

/// Starts the enabled controllers, each binary's under its leader election; the tasks.
pub fn start(api: &Api, controllers: Vec<&'static Controller>, settings: Settings) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for binary in [Binary::ControllerManager, Binary::Scheduler] {
        let mine: Vec<_> = controllers.iter().copied().filter(|c| c.binary == binary).collect();
        if mine.is_empty() {
            continue;
        }
        let client = Client::new(api.clone(), binary.user());
        let settings = settings.clone();
        let (leading, mut leads) = tokio::sync::watch::channel(false);
        let candidate = leader::Candidate::new(client.clone(), binary.lease(), leader::identity());
        tasks.push(tokio::spawn(candidate.run(leading)));
        tasks.push(tokio::spawn(async move {
            loop {
                if leads.wait_for(|l| *l).await.is_err() {
                    return;
                }
                let mut running = tokio::task::JoinSet::new();
                for c in &mine {
                    let client = match account(c.name) {
                        Some(sa) => client.as_user(&format!("system:serviceaccount:kube-system:{sa}")),
                        None => client.clone(),
                    };
                    running.spawn((c.run)(client, &settings));
                }
                let _ = leads.wait_for(|l| !*l).await;
                running.abort_all();
                while running.join_next().await.is_some() {}
            }
        }));
    }
    tasks
}

/// The service account a controller writes as (kube-controller-manager's
/// `--use-service-account-credentials`, each bound to its `system:controller:<account>` role);
/// None for those that use the binary's own identity.
fn account(controller: &str) -> Option<&'static str> {
    Some(match controller {
        "deployment-controller" => "deployment-controller",
        "replicaset-controller" => "replicaset-controller",
        "replicationcontroller-controller" => "replication-controller",
        "daemonset-controller" => "daemon-set-controller",
        "statefulset-controller" => "statefulset-controller",
        "job-controller" => "job-controller",
        "cronjob-controller" => "cronjob-controller",
        "ttl-after-finished-controller" => "ttl-after-finished-controller",
        "garbage-collector-controller" => "generic-garbage-collector",
        "endpointslice-controller" => "endpointslice-controller",
        "endpoints-controller" => "endpoint-controller",
        "endpointslice-mirroring-controller" => "endpointslicemirroring-controller",
        "namespace-controller" => "namespace-controller",
        "serviceaccount-controller" => "service-account-controller",
        "node-lifecycle-controller" => "node-controller",
        "pod-garbage-collector-controller" => "pod-garbage-collector",
        "disruption-controller" => "disruption-controller",
        "resourcequota-controller" => "resourcequota-controller",
        "clusterrole-aggregation-controller" => "clusterrole-aggregation-controller",
        _ => return None,
    })
}

/// Runs `informers` (each an informer task) and `workers` together until the task is aborted.
pub async fn together(tasks: Vec<Pin<Box<dyn Future<Output = ()> + Send>>>) {
    let mut set = tokio::task::JoinSet::new();
    for t in tasks {
        set.spawn(t);
    }
    while set.join_next().await.is_some() {}
}

/// A resource quantity in thousandths, rounded up (kube's `MilliValue`): `100m` is 100, `2` is
/// 2000, `1Ki` is 1_024_000. None if it is not a quantity.
pub fn milli(text: &str) -> Option<i64> {
    let s = text.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let scale: f64 = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    let v = (n * scale * 1000.0).ceil();
    (v.is_finite() && v.abs() < 9.2e18).then_some(v as i64)
}

/// An int-or-percent (`maxSurge`, `maxUnavailable`, `minAvailable`) as a number of `total`:
/// a percentage rounded up or down as `round_up` says (kube's
/// `GetScaledValueFromIntOrPercent`), a number as it is; None if it is neither.
pub fn scaled(v: &serde_json::Value, total: i64, round_up: bool) -> Option<i64> {
    match v {
        serde_json::Value::String(s) if s.ends_with('%') => {
            let p: i64 = s.trim_end_matches('%').parse().ok()?;
            Some(if round_up { (p * total + 99) / 100 } else { p * total / 100 })
        }
        serde_json::Value::String(s) => s.parse().ok(),
        other => other.as_i64(),
    }
}

/// The reference a controller sets on what it makes (`controller: true`, blocking the owner's
/// foreground deletion, as kube's controllers set it).
pub fn controller_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Adopts `object` of `r` (an orphan its owner's selector selects): adds `owner_ref`, if the
/// object is still the one seen (uid and resourceVersion); whether it was adopted.
pub async fn adopt(client: &Client, r: &'static Resource, object: &Value, owner_ref: Value) -> Result<bool, Failure> {
    let mut refs = object.pointer("/metadata/ownerReferences").and_then(Value::as_array).cloned().unwrap_or_default();
    refs.push(owner_ref);
    let patch = json!({"metadata": {"ownerReferences": refs, "uid": meta::get(object, "uid"),
                                    "resourceVersion": meta::get(object, "resourceVersion")}});
    let ns = Some(meta::get(object, "namespace")).filter(|n| !n.is_empty());
    match client.merge_patch(r, ns, meta::get(object, "name"), None, &patch).await {
        Ok(_) => Ok(true),
        Err(e) if e.is("NotFound") => Ok(false),
        Err(e) => Err(e),
    }
}

/// Drops `object`'s references to the owners `owner_uids` (an owner that no longer selects it,
/// owners that are gone).
pub async fn release(
    client: &Client,
    r: &'static Resource,
    object: &Value,
    owner_uids: &[&str],
) -> Result<(), Failure> {
    let refs: Vec<Value> = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|o| !owner_uids.contains(&o.get("uid").and_then(Value::as_str).unwrap_or("")))
        .cloned()
        .collect();
    let refs = if refs.is_empty() { Value::Null } else { Value::Array(refs) };
    let patch = json!({"metadata": {"ownerReferences": refs, "resourceVersion": meta::get(object, "resourceVersion")}});
    let ns = Some(meta::get(object, "namespace")).filter(|n| !n.is_empty());
    match client.merge_patch(r, ns, meta::get(object, "name"), None, &patch).await {
        Err(e) if !e.is("NotFound") => Err(e),
        _ => Ok(()),
    }
}

/// Shared between a controller's informer handlers and workers.
pub type Shared<T> = Arc<parking_lot::Mutex<T>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn names(flag: &[&str]) -> Result<Vec<&'static str>, String> {
        let flag: Vec<String> = flag.iter().map(|s| s.to_string()).collect();
        enabled(&flag).map(|cs| cs.iter().map(|c| c.name).collect())
    }

    #[test]
    fn controllers_are_picked_as_kube_controller_manager_picks_them() {
        assert_eq!(names(&["*"]).unwrap().len(), CONTROLLERS.len());
        assert_eq!(names(&["*", "-replicaset"]).unwrap().len(), CONTROLLERS.len() - 1);
        assert!(!names(&["*", "-replicaset-controller"]).unwrap().contains(&"replicaset-controller"));
        assert_eq!(names(&["replicaset-controller"]).unwrap(), vec!["replicaset-controller"]);
        assert!(names(&[]).unwrap().is_empty());
        assert!(names(&[""]).unwrap().is_empty());
        assert_eq!(names(&["nope"]).unwrap_err(), "\"nope\" is not in the list of known controllers");
        assert!(names(&["-nope"]).is_err());
    }

    #[test]
    fn int_or_percent_scales_as_kube_scales_it() {
        assert_eq!(scaled(&serde_json::json!("50%"), 5, true), Some(3));
        assert_eq!(scaled(&serde_json::json!("50%"), 5, false), Some(2));
        assert_eq!(scaled(&serde_json::json!(2), 5, true), Some(2));
        assert_eq!(scaled(&serde_json::json!("2"), 5, true), Some(2));
        assert_eq!(scaled(&serde_json::json!("x%"), 5, true), None);
    }

    #[test]
    fn quantities_read_in_thousandths() {
        assert_eq!(milli("100m"), Some(100));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(milli("1Ki"), Some(1_024_000));
        assert_eq!(milli("1.5"), Some(1500));
        assert_eq!(milli("1e3"), Some(1_000_000));
        assert_eq!(milli("1Gi"), Some(1_073_741_824_000));
        assert_eq!(milli("x"), None);
        assert_eq!(milli("1Q"), None);
    }
}
