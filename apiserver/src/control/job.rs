//! The Job controller (kube's `job` package): runs pods until `completions` succeed (or, with no
//! completions, until one succeeds and none is left running), at most `parallelism` at a time;
//! Indexed jobs give each pod its index (annotation, label, hostname, `JOB_COMPLETION_INDEX`)
//! and track `completedIndexes`. Finished pods are counted exactly once, as kube counts them:
//! each pod carries the `batch.kubernetes.io/job-tracking` finalizer; a finished pod goes into
//! `status.uncountedTerminatedPods`, loses its finalizer, then moves into `succeeded` or
//! `failed`. A failed pod is replaced after kube's back-off (10 s doubling, at most 6 min);
//! past `backoffLimit` failures (restarts count under OnFailure) the Job fails
//! (BackoffLimitExceeded), past `activeDeadlineSeconds` too (DeadlineExceeded), with kube's
//! interim `FailureTarget` and `SuccessCriteriaMet` conditions before `Failed` and `Complete`.
//! A suspended Job deletes its running pods.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::expectations::Expectations;
use super::informer::{self, key_of, split_key};
use super::record::Recorder;
use super::replicaset::{controller_of, ready_since};
use super::{Failure, Queue};
use crate::meta;
use crate::rest::Selectors;

pub const TRACKING: &str = "batch.kubernetes.io/job-tracking";
pub const INDEX: &str = "batch.kubernetes.io/job-completion-index";
const BACKOFF: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(360);

struct Controller {
    client: Client,
    recorder: Recorder,
    queue: Queue,
    expectations: Arc<Expectations>,
}

pub async fn run(client: Client) {
    let recorder = Recorder::new(client.clone(), "job-controller", None);
    let c = Arc::new(Controller { client, recorder, queue: Queue::new(), expectations: Arc::default() });
    let jobs = resource("batch", "v1", "jobs");
    let me = c.clone();
    let job_watch = informer::run(c.client.cache(jobs).clone(), Selectors::everything(), move |ch| {
        me.queue.add(key_of(ch.object()))
    });
    let pod_watch = super::expectations::owned_pods(c.client.clone(), "Job", c.queue.clone(), c.expectations.clone());
    let me = c.clone();
    let workers = c.queue.clone().work("job-controller", 5, move |key| {
        let me = me.clone();
        async move { me.sync(&key).await }
    });
    super::together(vec![Box::pin(job_watch), Box::pin(pod_watch), Box::pin(workers)]).await;
}

fn int(v: Option<&Value>) -> i64 {
    v.and_then(Value::as_i64).unwrap_or(0)
}

fn phase(p: &Value) -> &str {
    p.pointer("/status/phase").and_then(Value::as_str).unwrap_or("")
}

fn has_tracking(p: &Value) -> bool {
    p.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| f.contains(&json!(TRACKING)))
}

fn index_of(p: &Value) -> Option<i64> {
    let a = p.pointer("/metadata/annotations").and_then(|a| a.get(INDEX));
    a.and_then(Value::as_str).and_then(|i| i.parse().ok())
}

fn condition_true(job: &Value, kind: &str) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

/// `completedIndexes` as kube writes it: sorted ranges, `0-2,4`.
pub fn ranges(indexes: &BTreeSet<i64>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(i64, i64)> = None;
    for &i in indexes {
        run = match run {
            Some((a, b)) if i == b + 1 => Some((a, i)),
            Some((a, b)) => {
                out.push(if a == b { a.to_string() } else { format!("{a}-{b}") });
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some((a, b)) = run {
        out.push(if a == b { a.to_string() } else { format!("{a}-{b}") });
    }
    out.join(",")
}

/// The indexes of `completedIndexes`.
pub fn parse_ranges(s: &str) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i64>(), b.parse::<i64>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<i64>().ok()),
        }
    }
    out
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<(), Failure> {
        let (jobs, pods) = (resource("batch", "v1", "jobs"), resource("", "v1", "pods"));
        let (ns, name) = split_key(key);
        let Some(o) = self.client.cached(jobs, ns, name) else {
            self.expectations.forget(key);
            return Ok(());
        };
        if !self.expectations.met(key) {
            // Pods it made or deleted are not in the cache yet: their events bring it back.
            return Ok(());
        }
        let job = o.value(jobs);
        let uid = meta::get(&job, "uid").to_string();
        let mine: Vec<Value> = self
            .client
            .cached_list(pods, ns)
            .iter()
            .map(|p| p.json(pods))
            .filter(|p| controller_of(p).is_some_and(|(_, _, u)| u == uid))
            .map(|p| (*p).clone())
            .collect();
        let mut status = job.get("status").cloned().unwrap_or_else(|| json!({}));
        let uncounted = status.get("uncountedTerminatedPods").cloned().unwrap_or_else(|| json!({}));
        let listed = |f: &str| -> Vec<String> {
            uncounted
                .get(f)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|u| u.as_str().map(str::to_string))
                .collect()
        };
        let (mut u_ok, mut u_failed) = (listed("succeeded"), listed("failed"));
        let finished = condition_true(&job, "Complete") || condition_true(&job, "Failed");

        // 1. Finished pods still tracked go into the uncounted lists.
        let mut newly = false;
        for p in mine.iter().filter(|p| has_tracking(p)) {
            let pu = meta::get(p, "uid").to_string();
            let gone_running =
                p.pointer("/metadata/deletionTimestamp").is_some() && !matches!(phase(p), "Succeeded" | "Failed");
            let ok = match phase(p) {
                "Succeeded" => true,
                "Failed" => false,
                _ if gone_running => false,
                _ => continue,
            };
            if !u_ok.contains(&pu) && !u_failed.contains(&pu) {
                if ok {
                    u_ok.push(pu);
                } else {
                    u_failed.push(pu);
                }
                newly = true;
            }
        }
        if newly {
            status["uncountedTerminatedPods"] = json!({"succeeded": u_ok, "failed": u_failed});
            strip_empty_uncounted(&mut status);
            return self.write_status(&job, status).await;
        }
        // 2. Counted pods lose their finalizer.
        let mut untracked = false;
        for p in mine.iter().filter(|p| has_tracking(p)) {
            let pu = meta::get(p, "uid");
            if u_ok.iter().chain(&u_failed).any(|u| u == pu) || (finished && matches!(phase(p), "Succeeded" | "Failed"))
            {
                self.untrack(p).await?;
                untracked = true;
            }
        }
        if untracked {
            // The pods' changes bring the Job back once the cache shows them.
            return Ok(());
        }
        // 3. Uncounted pods without their finalizer (or gone) move into the counters.
        let tracked: BTreeSet<&str> = mine.iter().filter(|p| has_tracking(p)).map(|p| meta::get(p, "uid")).collect();
        let done_ok: Vec<String> = u_ok.iter().filter(|u| !tracked.contains(u.as_str())).cloned().collect();
        let done_failed: Vec<String> = u_failed.iter().filter(|u| !tracked.contains(u.as_str())).cloned().collect();
        let mut completed = parse_ranges(status.get("completedIndexes").and_then(Value::as_str).unwrap_or(""));
        let indexed = job.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
        if !done_ok.is_empty() || !done_failed.is_empty() {
            status["succeeded"] = json!(int(status.get("succeeded")) + done_ok.len() as i64);
            status["failed"] = json!(int(status.get("failed")) + done_failed.len() as i64);
            if indexed {
                for p in mine.iter().filter(|p| done_ok.iter().any(|u| u == meta::get(p, "uid"))) {
                    completed.extend(index_of(p));
                }
                status["completedIndexes"] = json!(ranges(&completed));
            }
            u_ok.retain(|u| !done_ok.contains(u));
            u_failed.retain(|u| !done_failed.contains(u));
            status["uncountedTerminatedPods"] = json!({"succeeded": u_ok, "failed": u_failed});
            strip_empty_uncounted(&mut status);
            return self.write_status(&job, status).await;
        }
        if finished {
            return Ok(());
        }

        // 4. Decide.
        let active: Vec<&Value> = mine
            .iter()
            .filter(|p| {
                !matches!(phase(p), "Succeeded" | "Failed") && p.pointer("/metadata/deletionTimestamp").is_none()
            })
            .collect();
        let terminating = mine
            .iter()
            .filter(|p| {
                p.pointer("/metadata/deletionTimestamp").is_some() && !matches!(phase(p), "Succeeded" | "Failed")
            })
            .count();
        // Pods finished but not yet counted count already (kube's uncounted pods).
        let succeeded = int(status.get("succeeded")) + u_ok.len() as i64;
        for p in mine.iter().filter(|p| u_ok.iter().any(|u| u == meta::get(p, "uid"))) {
            completed.extend(index_of(p));
        }
        let on_failure = job.pointer("/spec/template/spec/restartPolicy").and_then(Value::as_str) == Some("OnFailure");
        let restarts: i64 = if on_failure {
            active
                .iter()
                .flat_map(|p| {
                    p.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default()
                })
                .map(|c| int(c.get("restartCount")))
                .sum()
        } else {
            0
        };
        let failed = int(status.get("failed")) + u_failed.len() as i64 + restarts;
        let completions = job.pointer("/spec/completions").and_then(Value::as_i64);
        let parallelism = int(job.pointer("/spec/parallelism"));
        let backoff_limit = job.pointer("/spec/backoffLimit").and_then(Value::as_i64).unwrap_or(6);
        let suspended = job.pointer("/spec/suspend") == Some(&json!(true));
        let now = meta::now();
        if status.get("startTime").is_none_or(Value::is_null) && !suspended {
            status["startTime"] = json!(now);
        }
        let deadline = job.pointer("/spec/activeDeadlineSeconds").and_then(Value::as_i64);
        let age = status.get("startTime").and_then(Value::as_str).and_then(crate::table::age_secs).unwrap_or(0);
        let complete = match completions {
            Some(c) if indexed => completed.len() as i64 >= c,
            Some(c) => succeeded >= c,
            None => succeeded > 0 && active.is_empty(),
        };
        let failure = if failed > backoff_limit {
            Some(("BackoffLimitExceeded", "Job has reached the specified backoff limit"))
        } else if deadline.is_some_and(|d| age >= d) && !suspended {
            Some(("DeadlineExceeded", "Job was active longer than specified deadline"))
        } else {
            None
        };
        if let Some((reason, message)) = failure {
            for p in &active {
                self.delete_pod(p).await?;
            }
            add_condition(&mut status, "FailureTarget", reason, message);
            if active.is_empty() && terminating == 0 {
                add_condition(&mut status, "Failed", reason, message);
                self.recorder.event(&job, "Job", "Warning", reason, message.to_string());
            }
        } else if complete {
            add_condition(
                &mut status,
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
            for p in &active {
                self.delete_pod(p).await?;
            }
            if active.is_empty() && terminating == 0 {
                add_condition(
                    &mut status,
                    "Complete",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                );
                status["completionTime"] = json!(now);
                self.recorder.event(&job, "Job", "Normal", "Completed", "Job completed".into());
            }
        } else if suspended {
            for p in &active {
                self.delete_pod(p).await?;
            }
            add_condition(&mut status, "Suspended", "JobSuspended", "Job suspended");
        } else {
            if condition_true(&job, "Suspended") {
                set_false(&mut status, "Suspended", "JobResumed", "Job resumed");
            }
            // Make pods up to parallelism (and what is left to complete), after the failure
            // back-off.
            let want = match completions {
                Some(c) if indexed => parallelism.min(c - completed.len() as i64),
                Some(c) => parallelism.min(c - succeeded),
                None if succeeded > 0 => 0,
                None => parallelism,
            }
            .max(0);
            let missing = want - active.len() as i64;
            if missing > 0 {
                let wait = self.backoff_left(&mine, failed);
                if wait.is_zero() {
                    self.expectations.expect(key, missing, 0);
                    let busy: BTreeSet<i64> = active.iter().filter_map(|p| index_of(p)).collect();
                    let mut free =
                        (0..completions.unwrap_or(0)).filter(|i| !completed.contains(i) && !busy.contains(i));
                    for made in 0..missing {
                        let index = if indexed { free.next() } else { None };
                        if indexed && index.is_none() {
                            self.expectations.lower(key, missing - made, 0);
                            break;
                        }
                        if let Err(e) = self.create_pod(&job, index).await {
                            self.expectations.lower(key, missing - made, 0);
                            return Err(e);
                        }
                    }
                } else {
                    self.queue.add_after(key, wait);
                }
            } else if missing < 0 {
                let mut extra: Vec<&&Value> = active.iter().collect();
                extra.sort_by_key(|p| ready_since(p).is_some());
                for p in extra.into_iter().take((-missing) as usize) {
                    self.delete_pod(p).await?;
                }
            }
            if let Some(d) = deadline {
                self.queue.add_after(key, Duration::from_secs((d - age).max(1) as u64));
            }
        }
        status["active"] = json!(active.len());
        status["ready"] = json!(active.iter().filter(|p| ready_since(p).is_some()).count());
        status["terminating"] = json!(terminating);
        if !status.get("uncountedTerminatedPods").is_some_and(Value::is_object) {
            status["uncountedTerminatedPods"] = json!({});
        }
        for f in ["active", "succeeded", "failed"] {
            if status.get(f) == Some(&json!(0)) {
                status.as_object_mut().expect("an object").remove(f);
            }
        }
        self.write_status(&job, status).await
    }

    /// How long a replacement waits after `failed` failures (from the last pod's failure).
    fn backoff_left(&self, pods: &[Value], failed: i64) -> Duration {
        if failed <= 0 {
            return Duration::ZERO;
        }
        let delay = BACKOFF.saturating_mul(1 << (failed - 1).min(10)).min(MAX_BACKOFF);
        let last = pods
            .iter()
            .filter(|p| phase(p) == "Failed")
            .filter_map(|p| {
                let cs = p.pointer("/status/containerStatuses").and_then(Value::as_array)?;
                cs.iter()
                    .filter_map(|c| c.pointer("/state/terminated/finishedAt").and_then(Value::as_str))
                    .max()
                    .map(str::to_string)
            })
            .max();
        let since = last.as_deref().and_then(crate::table::age_secs).map_or(delay.as_secs() as i64, |s| s.max(0));
        Duration::from_secs((delay.as_secs() as i64 - since).max(0) as u64)
    }

    async fn untrack(&self, p: &Value) -> Result<(), Failure> {
        let pods = resource("", "v1", "pods");
        let left: Vec<Value> = p
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|f| **f != json!(TRACKING))
            .cloned()
            .collect();
        let patch = json!({"metadata": {"finalizers": if left.is_empty() { Value::Null } else { Value::Array(left) },
                                        "resourceVersion": meta::get(p, "resourceVersion")}});
        match self.client.merge_patch(pods, Some(meta::get(p, "namespace")), meta::get(p, "name"), None, &patch).await {
            Err(e) if !e.is("NotFound") => Err(e),
            _ => Ok(()),
        }
    }

    async fn delete_pod(&self, p: &Value) -> Result<(), Failure> {
        let pods = resource("", "v1", "pods");
        match self.client.delete(pods, Some(meta::get(p, "namespace")), meta::get(p, "name"), &json!({})).await {
            Err(e) if !e.is("NotFound") => Err(e),
            _ => Ok(()),
        }
    }

    async fn create_pod(&self, job: &Value, index: Option<i64>) -> Result<(), Failure> {
        let pods = resource("", "v1", "pods");
        let (ns, name) = (meta::get(job, "namespace"), meta::get(job, "name"));
        let mut t = job.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
        let mut metadata = t.get("metadata").cloned().unwrap_or_else(|| json!({}));
        metadata["namespace"] = json!(ns);
        metadata["generateName"] = json!(match index {
            Some(i) => format!("{name}-{i}-"),
            None => format!("{name}-"),
        });
        metadata["ownerReferences"] = json!([super::controller_ref("batch/v1", "Job", name, meta::get(job, "uid"))]);
        metadata["finalizers"] = json!([TRACKING]);
        if let Some(i) = index {
            metadata["annotations"][INDEX] = json!(i.to_string());
            metadata["labels"][INDEX] = json!(i.to_string());
            t["spec"]["hostname"] = json!(format!("{name}-{i}"));
            for c in t.pointer_mut("/spec/containers").and_then(Value::as_array_mut).into_iter().flatten() {
                let env = c.as_object_mut().expect("a container").entry("env").or_insert_with(|| json!([]));
                if let Some(env) = env.as_array_mut() {
                    env.push(json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['{INDEX}']")}}}));
                }
            }
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": t.get("spec")});
        match self.client.create(pods, Some(ns), &pod).await {
            Ok(made) => {
                self.recorder.event(
                    job,
                    "Job",
                    "Normal",
                    "SuccessfulCreate",
                    format!("Created pod: {}", meta::get(&made, "name")),
                );
                Ok(())
            }
            Err(e) => {
                self.recorder.event(job, "Job", "Warning", "FailedCreate", format!("Error creating: {}", e.message));
                Err(e)
            }
        }
    }

    async fn write_status(&self, job: &Value, status: Value) -> Result<(), Failure> {
        self.client.put_status(resource("batch", "v1", "jobs"), job, status).await
    }
}

fn strip_empty_uncounted(status: &mut Value) {
    if let Some(u) = status.get_mut("uncountedTerminatedPods").and_then(Value::as_object_mut) {
        u.retain(|_, v| v.as_array().is_some_and(|a| !a.is_empty()));
    }
}

fn add_condition(status: &mut Value, kind: &str, reason: &str, message: &str) {
    let now = meta::now();
    let cs = status.as_object_mut().expect("an object").entry("conditions").or_insert_with(|| json!([]));
    let Some(cs) = cs.as_array_mut() else { return };
    if cs.iter().any(|c| c["type"] == kind && c["status"] == "True") {
        return;
    }
    cs.retain(|c| c["type"] != kind);
    cs.push(json!({"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now, "reason": reason, "message": message}));
}

fn set_false(status: &mut Value, kind: &str, reason: &str, message: &str) {
    let now = meta::now();
    if let Some(c) = status
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .and_then(|cs| cs.iter_mut().find(|c| c["type"] == kind))
    {
        *c = json!({"type": kind, "status": "False", "lastProbeTime": now, "lastTransitionTime": now, "reason": reason, "message": message});
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_are_written_as_kube_writes_them() {
        let set: BTreeSet<i64> = [0, 1, 2, 4, 6, 7].into();
        assert_eq!(ranges(&set), "0-2,4,6-7");
        assert_eq!(parse_ranges("0-2,4,6-7"), set);
        assert_eq!(ranges(&BTreeSet::new()), "");
    }
}
