//! The TTL-after-finished controller (kube's `ttlafterfinished`): a finished Job (Complete or
//! Failed) with `ttlSecondsAfterFinished` is deleted (its pods with it, in the background) that
//! many seconds after it finished.

use std::time::Duration;

use serde_json::{json, Value};

use super::client::{resource, Client};
use super::informer::{self, key_of, split_key};
use super::{Failure, Queue};
use crate::rest::Selectors;

pub async fn run(client: Client) {
    let queue = Queue::new();
    let jobs = resource("batch", "v1", "jobs");
    let q = queue.clone();
    let watch = informer::run(client.cache(jobs).clone(), Selectors::everything(), move |ch| {
        let v = ch.object().value(jobs);
        if v.pointer("/spec/ttlSecondsAfterFinished").is_some_and(|t| !t.is_null()) && finished_at(&v).is_some() {
            q.add(key_of(ch.object()));
        }
    });
    let work = queue.clone().work("ttl-after-finished-controller", 2, move |key| {
        let (client, queue) = (client.clone(), queue.clone());
        async move { sync(&client, &queue, &key).await }
    });
    super::together(vec![Box::pin(watch), Box::pin(work)]).await;
}

/// When the Job finished: its Complete or Failed condition's transition.
fn finished_at(job: &Value) -> Option<String> {
    let cs = job.pointer("/status/conditions")?.as_array()?;
    let c = cs.iter().find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")?;
    c.get("lastTransitionTime").and_then(Value::as_str).map(str::to_string)
}

async fn sync(client: &Client, queue: &Queue, key: &str) -> Result<(), Failure> {
    let jobs = resource("batch", "v1", "jobs");
    let (ns, name) = split_key(key);
    let Some(o) = client.cached(jobs, ns, name) else { return Ok(()) };
    let job = o.value(jobs);
    let (Some(ttl), Some(at)) =
        (job.pointer("/spec/ttlSecondsAfterFinished").and_then(Value::as_i64), finished_at(&job))
    else {
        return Ok(());
    };
    if job.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    let age = crate::table::age_secs(&at).unwrap_or(0);
    if age < ttl {
        queue.add_after(key, Duration::from_secs((ttl - age) as u64));
        return Ok(());
    }
    let options = json!({"propagationPolicy": "Background", "preconditions": {"uid": crate::meta::get(&job, "uid")}});
    match client.delete(jobs, ns, name, &options).await {
        Err(e) if !e.is("NotFound") && e.code != 409 => Err(e),
        _ => Ok(()),
    }
}
