//! The CronJob controller (kube's `cronjob` v2 controller): at each time its schedule names (a
//! 5-field cron or `@hourly`…, in `spec.timeZone` or UTC) a CronJob makes a Job from its
//! template, named `<cronjob>-<minutes since the epoch>` and annotated with the scheduled time;
//! `concurrencyPolicy` Forbid skips a run while one is active and Replace deletes the active
//! ones first; a run missed by more than `startingDeadlineSeconds` is skipped; `suspend` stops
//! new runs; finished Jobs past `successfulJobsHistoryLimit` / `failedJobsHistoryLimit` are
//! deleted, oldest first. Status keeps the active Jobs, `lastScheduleTime` and
//! `lastSuccessfulTime`.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use jiff::{tz::TimeZone, Timestamp, Zoned};
use serde_json::{json, Value};

use super::client::{resource, Client};
use super::informer::{self, key_of, split_key};
use super::record::Recorder;
use super::replicaset::controller_of;
use super::{Failure, Queue};
use crate::meta;
use crate::rest::Selectors;

pub const SCHEDULED: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

struct Controller {
    client: Client,
    recorder: Recorder,
    queue: Queue,
}

pub async fn run(client: Client) {
    let recorder = Recorder::new(client.clone(), "cronjob-controller", None);
    let c = Arc::new(Controller { client, recorder, queue: Queue::new() });
    let (cronjobs, jobs) = (resource("batch", "v1", "cronjobs"), resource("batch", "v1", "jobs"));
    let me = c.clone();
    let cj_watch = informer::run(c.client.cache(cronjobs).clone(), Selectors::everything(), move |ch| {
        me.queue.add(key_of(ch.object()))
    });
    let me = c.clone();
    let job_watch = informer::run(c.client.cache(jobs).clone(), Selectors::everything(), move |ch| {
        if let Some((kind, name, _)) = controller_of(&ch.object().value(jobs)) {
            if kind == "CronJob" {
                me.queue.add(format!("{}/{name}", ch.object().namespace));
            }
        }
    });
    let me = c.clone();
    let workers = c.queue.clone().work("cronjob-controller", 5, move |key| {
        let me = me.clone();
        async move { me.sync(&key).await }
    });
    super::together(vec![Box::pin(cj_watch), Box::pin(job_watch), Box::pin(workers)]).await;
}

/// A schedule (with kube's `CRON_TZ=`/`TZ=` prefix read, or `zone`) as a parsed cron and a zone.
pub fn schedule(spec: &str, zone: Option<&str>) -> Result<(croner::Cron, TimeZone), String> {
    let (mut pattern, mut tz) = (spec.trim(), zone.map(str::to_string));
    for prefix in ["CRON_TZ=", "TZ="] {
        if let Some(rest) = pattern.strip_prefix(prefix) {
            let (name, p) = rest.split_once(' ').ok_or_else(|| format!("unparseable schedule {spec:?}"))?;
            tz = Some(name.to_string());
            pattern = p.trim();
        }
    }
    let cron = croner::Cron::from_str(pattern).map_err(|e| format!("unparseable schedule {spec:?}: {e}"))?;
    let tz = match tz {
        Some(name) => TimeZone::get(&name).map_err(|_| format!("unknown time zone {name}"))?,
        None => TimeZone::UTC,
    };
    Ok((cron, tz))
}

/// The latest time the schedule names after `after` and at or before `now`, and the next after
/// `now` (kube's `mostRecentScheduleTime` and `nextScheduleTime`).
pub fn times(
    cron: &croner::Cron,
    tz: &TimeZone,
    after: Timestamp,
    now: Timestamp,
) -> (Option<Timestamp>, Option<Timestamp>) {
    let mut latest = None;
    let mut t = after.to_zoned(tz.clone());
    // At most a day of minutes is walked; older misses count as one (kube reports "too many
    // missed start times" past 100 and starts the latest).
    for _ in 0..1440 {
        match cron.find_next_occurrence(&t, false) {
            Ok(next) if next.timestamp() <= now => {
                latest = Some(next.timestamp());
                t = next;
            }
            Ok(next) => return (latest, Some(next.timestamp())),
            Err(_) => return (latest, None),
        }
    }
    let jump: Zoned = now.to_zoned(tz.clone());
    let last = cron.find_previous_occurrence(&jump, true).ok().map(|z| z.timestamp());
    let next = cron.find_next_occurrence(&jump, false).ok().map(|z| z.timestamp());
    (last.or(latest), next)
}

fn stamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn finished(job: &Value) -> Option<&'static str> {
    let cs = job.pointer("/status/conditions")?.as_array()?;
    for kind in ["Complete", "Failed"] {
        if cs.iter().any(|c| c["type"] == kind && c["status"] == "True") {
            return Some(if kind == "Complete" { "Complete" } else { "Failed" });
        }
    }
    None
}

impl Controller {
    async fn sync(&self, key: &str) -> Result<(), Failure> {
        let (cronjobs, jobs) = (resource("batch", "v1", "cronjobs"), resource("batch", "v1", "jobs"));
        let (ns, name) = split_key(key);
        let Some(o) = self.client.cached(cronjobs, ns, name) else { return Ok(()) };
        let cj = o.value(cronjobs);
        let uid = meta::get(&cj, "uid").to_string();
        let mut children: Vec<Value> = self
            .client
            .cached_list(jobs, ns)
            .iter()
            .map(|j| j.value(jobs))
            .filter(|j| controller_of(j).is_some_and(|(_, _, u)| u == uid))
            .collect();
        children.sort_by_key(|j| meta::get(j, "creationTimestamp").to_string());
        let mut status = cj.get("status").cloned().unwrap_or_else(|| json!({}));
        // Finished children: the last success, and history beyond the limits deleted.
        let mut active = Vec::new();
        let (mut done_ok, mut done_failed) = (Vec::new(), Vec::new());
        for j in &children {
            match finished(j) {
                Some("Complete") => {
                    done_ok.push(j);
                    let t = j.pointer("/status/completionTime").and_then(Value::as_str).unwrap_or("");
                    let last = status.get("lastSuccessfulTime").and_then(Value::as_str).unwrap_or("");
                    if t > last {
                        status["lastSuccessfulTime"] = json!(t);
                    }
                }
                Some(_) => done_failed.push(j),
                None if j.pointer("/metadata/deletionTimestamp").is_none() => active.push(j),
                None => {}
            }
        }
        let limit =
            |f: &str, d: i64| cj.pointer(&format!("/spec/{f}")).and_then(Value::as_i64).unwrap_or(d).max(0) as usize;
        for (done, keep) in
            [(&done_ok, limit("successfulJobsHistoryLimit", 3)), (&done_failed, limit("failedJobsHistoryLimit", 1))]
        {
            for j in done.iter().take(done.len().saturating_sub(keep)) {
                self.delete_job(&cj, j).await?;
            }
        }
        let refs: Vec<Value> = active
            .iter()
            .map(|j| json!({"kind": "Job", "namespace": meta::get(j, "namespace"), "name": meta::get(j, "name"),
                             "uid": meta::get(j, "uid"), "apiVersion": "batch/v1", "resourceVersion": meta::get(j, "resourceVersion")}))
            .collect();
        status["active"] = if refs.is_empty() { Value::Null } else { Value::Array(refs) };

        let suspended = cj.pointer("/spec/suspend") == Some(&json!(true));
        let spec = cj.pointer("/spec/schedule").and_then(Value::as_str).unwrap_or("");
        let zone = cj.pointer("/spec/timeZone").and_then(Value::as_str);
        let (cron, tz) = match schedule(spec, zone) {
            Ok(s) => s,
            Err(message) => {
                self.recorder.event(&cj, "CronJob", "Warning", "UnparseableSchedule", message);
                return self.write_status(&cj, status).await;
            }
        };
        let now = Timestamp::now();
        let since = status
            .get("lastScheduleTime")
            .and_then(Value::as_str)
            .or_else(|| cj.pointer("/metadata/creationTimestamp").and_then(Value::as_str))
            .and_then(|t| t.parse::<Timestamp>().ok())
            .unwrap_or(now);
        let (due, next) = times(&cron, &tz, since, now);
        if let Some(n) = next {
            let wait = n.duration_since(now);
            let secs = wait.as_secs().max(0) as u64 + 1;
            self.queue.add_after(key, Duration::from_secs(secs));
        }
        if let (Some(due), false) = (due, suspended) {
            let late = now.duration_since(due).as_secs();
            let deadline = cj.pointer("/spec/startingDeadlineSeconds").and_then(Value::as_i64);
            let job_name = format!("{name}-{}", due.as_second() / 60);
            let exists = children.iter().any(|j| meta::get(j, "name") == job_name);
            let policy = cj.pointer("/spec/concurrencyPolicy").and_then(Value::as_str).unwrap_or("Allow");
            if exists {
                // This run was made already.
            } else if deadline.is_some_and(|d| late > d) {
                let message = format!("Missed scheduled time to start a job: {}", stamp(due));
                self.recorder.event(&cj, "CronJob", "Warning", "MissSchedule", message);
                status["lastScheduleTime"] = json!(stamp(due));
            } else if policy != "Forbid" || active.is_empty() {
                // (Forbid with a run active waits: the child's end requeues this CronJob.)
                if policy == "Replace" {
                    for j in &active {
                        self.delete_job(&cj, j).await?;
                    }
                }
                let job = self.make_job(&cj, &job_name, due).await?;
                let mut refs = status.get("active").and_then(Value::as_array).cloned().unwrap_or_default();
                if policy == "Replace" {
                    refs.clear();
                }
                refs.push(json!({"kind": "Job", "namespace": meta::get(&job, "namespace"), "name": job_name,
                                 "uid": meta::get(&job, "uid"), "apiVersion": "batch/v1", "resourceVersion": meta::get(&job, "resourceVersion")}));
                status["active"] = Value::Array(refs);
                status["lastScheduleTime"] = json!(stamp(due));
            }
        }
        if let Some(m) = status.as_object_mut() {
            m.retain(|_, v| !v.is_null());
        }
        self.write_status(&cj, status).await
    }

    async fn make_job(&self, cj: &Value, job_name: &str, due: Timestamp) -> Result<Value, Failure> {
        let jobs = resource("batch", "v1", "jobs");
        let ns = meta::get(cj, "namespace");
        let template = cj.pointer("/spec/jobTemplate").cloned().unwrap_or_else(|| json!({}));
        let mut metadata = template.get("metadata").cloned().unwrap_or_else(|| json!({}));
        metadata["name"] = json!(job_name);
        metadata["namespace"] = json!(ns);
        metadata["annotations"][SCHEDULED] = json!(due.to_string());
        metadata["ownerReferences"] =
            json!([super::controller_ref("batch/v1", "CronJob", meta::get(cj, "name"), meta::get(cj, "uid"))]);
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": template.get("spec")});
        match self.client.create(jobs, Some(ns), &job).await {
            Ok(made) => {
                self.recorder.event(cj, "CronJob", "Normal", "SuccessfulCreate", format!("Created job {job_name}"));
                Ok(made)
            }
            Err(e) if e.is("AlreadyExists") => {
                let existing = self.client.cached(jobs, Some(ns), job_name).map(|o| o.value(jobs));
                existing.ok_or(e)
            }
            Err(e) => {
                self.recorder.event(
                    cj,
                    "CronJob",
                    "Warning",
                    "FailedCreate",
                    format!("Error creating job: {}", e.message),
                );
                Err(e)
            }
        }
    }

    async fn delete_job(&self, cj: &Value, job: &Value) -> Result<(), Failure> {
        let jobs = resource("batch", "v1", "jobs");
        let options = json!({"propagationPolicy": "Background"});
        match self.client.delete(jobs, Some(meta::get(job, "namespace")), meta::get(job, "name"), &options).await {
            Ok(_) => {
                let message = format!("Deleted job {}", meta::get(job, "name"));
                self.recorder.event(cj, "CronJob", "Normal", "SuccessfulDelete", message);
                Ok(())
            }
            Err(e) if e.is("NotFound") => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn write_status(&self, cj: &Value, status: Value) -> Result<(), Failure> {
        self.client.put_status(resource("batch", "v1", "cronjobs"), cj, status).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn schedules_name_the_times_kube_would_run() {
        let (cron, tz) = schedule("*/5 * * * *", None).unwrap();
        let (due, next) = times(&cron, &tz, at("2026-12-07T10:00:00Z"), at("2026-12-07T10:12:30Z"));
        assert_eq!(due, Some(at("2026-12-07T10:10:00Z")));
        assert_eq!(next, Some(at("2026-12-07T10:15:00Z")));
        let (cron, tz) = schedule("@hourly", None).unwrap();
        assert_eq!(times(&cron, &tz, at("2026-12-07T10:00:00Z"), at("2026-12-07T10:59:00Z")).0, None);
        // In a time zone: 09:00 in Berlin is 08:00 UTC in winter.
        let (cron, tz) = schedule("0 9 * * *", Some("Europe/Berlin")).unwrap();
        let (due, _) = times(&cron, &tz, at("2026-12-06T12:00:00Z"), at("2026-12-07T08:30:00Z"));
        assert_eq!(due, Some(at("2026-12-07T08:00:00Z")));
        let (cron, tz) = schedule("CRON_TZ=UTC 30 * * * *", None).unwrap();
        assert_eq!(
            times(&cron, &tz, at("2026-12-07T10:00:00Z"), at("2026-12-07T10:31:00Z")).0,
            Some(at("2026-12-07T10:30:00Z"))
        );
        assert!(schedule("61 * * * *", None).is_err());
        assert!(schedule("* * * * *", Some("Mars/Olympus")).is_err());
    }
}
