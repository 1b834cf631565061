//! Leader election on a coordination.k8s.io Lease, as client-go's `leaderelection` does it for
//! kube-controller-manager and kube-scheduler: a candidate takes the lease when it is free or its
//! holder stopped renewing it for `LEASE_DURATION` (measured on this side's clock, from when the
//! holder's record last changed, so clocks need not agree), renews it every `RETRY_PERIOD`, and
//! stops leading when it could not renew for `RENEW_DEADLINE`. Only the leader runs the
//! controllers the lease guards.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::client::{resource, Client};
use crate::meta;
use crate::rest::Target;

/// kube-controller-manager's defaults (`--leader-elect-lease-duration` etc.).
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// The namespace the control plane's leases live in.
pub const NAMESPACE: &str = "kube-system";

/// A `metav1.MicroTime` for now.
pub fn micro_now() -> String {
    k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The holder identity of this process for a lease: kube's `<hostname>_<uuid>`.
pub fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    format!("{}_{}", if host.is_empty() { "keel" } else { host }, meta::uid())
}

/// One candidate for one lease.
pub struct Candidate {
    client: Client,
    lease: &'static str,
    identity: String,
    /// The holder's record as last seen (holder, renewTime, resourceVersion) and when it was
    /// first seen so.
    observed: Option<(Value, Instant)>,
    /// When this candidate last took or renewed the lease.
    renewed: Option<Instant>,
}

impl Candidate {
    pub fn new(client: Client, lease: &'static str, identity: String) -> Candidate {
        Candidate { client, lease, identity, observed: None, renewed: None }
    }

    /// Campaigns until the task is aborted; `leading` says whether this candidate leads.
    pub async fn run(mut self, leading: watch::Sender<bool>) {
        loop {
            let now = Instant::now();
            match self.try_acquire_or_renew().await {
                Ok(true) => self.renewed = Some(now),
                Ok(false) => self.renewed = None,
                Err(e) => tracing::debug!(lease = self.lease, error = %e, "renewing the lease failed"),
            }
            let leads = self.renewed.is_some_and(|r| r.elapsed() < RENEW_DEADLINE);
            if *leading.borrow() != leads {
                tracing::info!(lease = self.lease, identity = self.identity, leads, "leadership changed");
                leading.send_replace(leads);
            }
            tokio::time::sleep(RETRY_PERIOD).await;
        }
    }

    /// One round: Ok(true) if this candidate holds the lease after it, Ok(false) if another
    /// does.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, super::Failure> {
        let leases = resource("coordination.k8s.io", "v1", "leases");
        let target = Target::Object { namespace: Some(NAMESPACE.into()), name: self.lease.into(), sub: None };
        let now = micro_now();
        let current = match self.client.call(leases, http::Method::GET, target, &[], None).await {
            Ok(v) => v,
            Err(e) if e.is("NotFound") => {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.lease, "namespace": NAMESPACE},
                    "spec": {
                        "holderIdentity": self.identity,
                        "leaseDurationSeconds": LEASE_DURATION.as_secs(),
                        "acquireTime": now,
                        "renewTime": now,
                        "leaseTransitions": 0,
                    },
                });
                return match self.client.create(leases, Some(NAMESPACE), &lease).await {
                    Ok(_) => Ok(true),
                    Err(e) if e.is("AlreadyExists") => Ok(false),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        let spec = current.get("spec").cloned().unwrap_or(Value::Null);
        let holder = spec.get("holderIdentity").and_then(Value::as_str).unwrap_or("");
        let record = json!([holder, spec.get("renewTime"), meta::get(&current, "resourceVersion")]);
        let first_seen = match &self.observed {
            Some((r, at)) if *r == record => *at,
            _ => Instant::now(),
        };
        self.observed = Some((record, first_seen));
        let duration =
            spec.get("leaseDurationSeconds").and_then(Value::as_u64).map_or(LEASE_DURATION, Duration::from_secs);
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() && first_seen.elapsed() < duration {
            return Ok(false);
        }
        let mut lease = current;
        let transitions = spec.get("leaseTransitions").and_then(Value::as_i64).unwrap_or(0);
        let s = &mut lease["spec"];
        s["holderIdentity"] = json!(self.identity);
        s["leaseDurationSeconds"] = json!(LEASE_DURATION.as_secs());
        s["renewTime"] = json!(now);
        if !ours {
            s["acquireTime"] = json!(now);
            s["leaseTransitions"] = json!(transitions + i64::from(!holder.is_empty()));
        }
        match self.client.update(leases, Some(NAMESPACE), self.lease, None, &lease).await {
            Ok(_) => Ok(true),
            Err(e) if e.is("Conflict") => Ok(false),
            Err(e) => Err(e),
        }
    }
}
