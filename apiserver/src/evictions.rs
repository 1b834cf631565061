//! A pod's `eviction` subresource, kubectl drain's way to remove a pod (kube's `EvictionREST`):
//! `POST …/pods/<name>/eviction` with a policy/v1 Eviction deletes the pod with the eviction's
//! DeleteOptions, unless a PodDisruptionBudget that selects it has no disruption left (429, the
//! budget named in a `DisruptionBudget` cause). A pod that is Pending, finished or already being
//! deleted is deleted whatever the budgets say; a budget's allowance is spent as kube spends it
//! (`disruptionsAllowed` down by one, the pod in `disruptedPods`). A pod that is deleted gets the
//! `DisruptionTarget` condition first.

use http::StatusCode;
use serde_json::{json, Value};

use crate::bindings::{body_named, created, set_condition, PodRequest};
use crate::deletion::Options;
use crate::meta;
use crate::resources::{self, Resource};
use crate::rest::{self, Answer, Api, Query};
use crate::status::{self, Cause, GroupResource, Status};

/// kube's `MaxDisruptedPodSize`.
const MAX_DISRUPTED_PODS: usize = 2000;

const VIOLATES: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

fn too_many(retry_after: i32, why: String) -> Status {
    let mut s = status::too_many_requests(VIOLATES, retry_after);
    if let Some(d) = s.details.as_mut() {
        d.causes.push(Cause { reason: "DisruptionBudget", message: why, field: String::new() });
    }
    s
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

/// kube's `canIgnorePDB`.
fn ignores_budgets(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || !meta::get(pod, "deletionTimestamp").is_empty()
}

fn ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Ready")
            && c.get("status").and_then(Value::as_str) == Some("True")
    })
}

/// `POST …/pods/<name>/eviction`.
pub async fn evict(req: PodRequest<'_>, query: &Query, mut dry_run: bool) -> Answer {
    let PodRequest { api, r, namespace, name, headers, body } = req;
    let eviction = body_named(headers, body, "policy/v1", "Eviction", name)?;
    let options = eviction.get("deleteOptions").filter(|o| o.is_object());
    if options.and_then(|o| o.get("dryRun")).and_then(Value::as_array).is_some_and(|d| !d.is_empty()) {
        dry_run = true;
    }
    let opts = Options::of(options, query)?;
    let k = rest::key(api, r, namespace, name);
    let pod = rest::shown(r, &rest::read(api, r, &k, name).await?)?;
    if !ignores_budgets(&pod) {
        let budgets = budgets_of(api, namespace, &pod).await?;
        match budgets.as_slice() {
            [] => {}
            [_, _, ..] => {
                let s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                    "code": 500});
                return Ok((StatusCode::CREATED, s));
            }
            [budget] => {
                let unhealthy_allowed =
                    budget.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) == Some("AlwaysAllow");
                if !unhealthy_allowed || ready(&pod) {
                    spend(api, namespace, budget, name, &pod, dry_run).await?;
                }
            }
        }
    }
    let opts = if dry_run { opts } else { mark_disrupted(api, r, &k, name, opts).await? };
    rest::delete(api, r, namespace, name, dry_run, &opts).await?;
    Ok((StatusCode::CREATED, created()))
}

/// The budgets in the pod's namespace whose (non-empty) selectors select it.
async fn budgets_of(api: &Api, namespace: Option<&str>, pod: &Value) -> Result<Vec<Value>, Status> {
    let pdbs = resources::find("policy", "v1", "poddisruptionbudgets").expect("a served resource");
    let (_, list) = rest::list(api, pdbs, namespace, &Query::new()).await?;
    let labels = pod.pointer("/metadata/labels");
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| {
            let s = b.pointer("/spec/selector").filter(|s| s.is_object());
            let empty = s.is_none_or(|s| {
                s.get("matchLabels").and_then(Value::as_object).is_none_or(|m| m.is_empty())
                    && s.get("matchExpressions").and_then(Value::as_array).is_none_or(Vec::is_empty)
            });
            !empty && s.is_some_and(|s| crate::workloads::selects(s, labels))
        })
        .cloned()
        .collect())
}

/// kube's `checkAndDecrement`: one disruption of `budget` taken for the pod, or why not.
async fn spend(
    api: &Api,
    namespace: Option<&str>,
    budget: &Value,
    pod_name: &str,
    pod: &Value,
    dry_run: bool,
) -> Result<(), Status> {
    let name = meta::get(budget, "name");
    let int = |p: &str| budget.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    // A pod that is not ready does not count as healthy: while the budget is met, it may go.
    if !ready(pod)
        && int("/status/currentHealthy") >= int("/status/desiredHealthy")
        && int("/status/desiredHealthy") > 0
    {
        return Ok(());
    }
    if int("/status/observedGeneration") < int("/metadata/generation") {
        return Err(too_many(10, format!("The disruption budget {name} is still being processed by the server.")));
    }
    let pdb = GroupResource { group: "policy", resource: "poddisruptionbudget" };
    let allowed = int("/status/disruptionsAllowed");
    if allowed < 0 {
        return Err(status::forbidden(pdb, name, "pdb disruptions allowed is negative"));
    }
    let disrupted = budget.pointer("/status/disruptedPods").and_then(Value::as_object).map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(status::forbidden(
            pdb,
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(too_many(
            0,
            format!(
                "The disruption budget {name} needs {} healthy pods and has {} currently",
                int("/status/desiredHealthy"),
                int("/status/currentHealthy")
            ),
        ));
    }
    if dry_run {
        return Ok(());
    }
    let pdbs = resources::find("policy", "v1", "poddisruptionbudgets").expect("a served resource");
    let mut b = budget.clone();
    b["status"]["disruptionsAllowed"] = json!(allowed - 1);
    if allowed == 1 {
        // kube's UpdateDisruptionAllowedCondition: no disruption left.
        let conditions = b["status"].get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut kept: Vec<Value> = conditions
            .iter()
            .filter(|c| c.get("type").and_then(Value::as_str) != Some("DisruptionAllowed"))
            .cloned()
            .collect();
        let old = conditions.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionAllowed"));
        let since = match old {
            Some(c) if c.get("status").and_then(Value::as_str) == Some("False") => c["lastTransitionTime"].clone(),
            _ => json!(meta::now()),
        };
        kept.push(
            json!({"type": "DisruptionAllowed", "status": "False", "observedGeneration": int("/metadata/generation"),
            "lastTransitionTime": since, "reason": "InsufficientPods", "message": ""}),
        );
        b["status"]["conditions"] = Value::Array(kept);
    }
    if !b["status"]["disruptedPods"].is_object() {
        b["status"]["disruptedPods"] = json!({});
    }
    b["status"]["disruptedPods"][pod_name] = json!(meta::now());
    let rev: i64 = meta::get(budget, "resourceVersion").parse().unwrap_or(0);
    let k = rest::key(api, pdbs, namespace, name);
    rest::write_over(api, pdbs, &k, name, b, rev, false).await.map(|_| ())
}

/// Adds the `DisruptionTarget` condition to the pod about to be deleted (kube's
/// `addConditionAndDeletePod`, through the status), honouring the delete's preconditions; the
/// options to delete it with (a resourceVersion precondition moves past this write, as kube's).
async fn mark_disrupted(api: &Api, r: &Resource, k: &str, name: &str, mut opts: Options) -> Result<Options, Status> {
    let old = rest::read(api, r, k, name).await?;
    let mut pod = rest::shown(r, &old)?;
    rest::preconditions(&opts, r, name, &pod, old.rev)?;
    set_condition(&mut pod, "DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting");
    let (_, written) = rest::write_over(api, r, k, name, pod, old.rev, false).await?;
    if opts.resource_version.is_some() {
        opts.resource_version = Some(meta::get(&written, "resourceVersion").to_string());
    }
    Ok(opts)
}
