//! The pod garbage collector (kube's `podgc`), every 20 s: pods bound to a node that no longer
//! exists (checked in the store, after the node has been gone for `QUARANTINE`) are marked
//! `DisruptionTarget` (DeletionByPodGC) and Failed, then deleted at once; unscheduled pods being
//! deleted are deleted at once; finished pods past `--terminated-pod-gc-threshold` (12500) go,
//! oldest first.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::client::{resource, Client};
use super::Failure;
use crate::meta;
use crate::rest::Target;

const PERIOD: Duration = Duration::from_secs(20);
const QUARANTINE: Duration = Duration::from_secs(40);
pub const TERMINATED_THRESHOLD: usize = 12_500;

pub async fn run(client: Client) {
    let mut missing: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::time::sleep(PERIOD).await;
        if let Err(e) = collect(&client, &mut missing).await {
            tracing::debug!(error = %e, "pod garbage collection");
        }
    }
}

async fn force_delete(client: &Client, pod: &Value) -> Result<(), Failure> {
    let pods = resource("", "v1", "pods");
    let options = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": meta::get(pod, "uid")}});
    match client.delete(pods, Some(meta::get(pod, "namespace")), meta::get(pod, "name"), &options).await {
        Err(e) if !e.is("NotFound") && e.code != 409 => Err(e),
        _ => Ok(()),
    }
}

async fn collect(client: &Client, missing: &mut HashMap<String, Instant>) -> Result<(), Failure> {
    let (pods, nodes) = (resource("", "v1", "pods"), resource("", "v1", "nodes"));
    let all: Vec<Value> = client.cached_list(pods, None).iter().map(|o| o.value(pods)).collect();
    let mut finished: Vec<&Value> = Vec::new();
    let mut seen_missing = Vec::new();
    for p in &all {
        let node = p.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        let phase = p.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
        if matches!(phase, "Succeeded" | "Failed") {
            finished.push(p);
        }
        if node.is_empty() {
            if p.pointer("/metadata/deletionTimestamp").is_some() {
                force_delete(client, p).await?;
            }
            continue;
        }
        if client.cached(nodes, None, node).is_some() {
            continue;
        }
        seen_missing.push(node.to_string());
        let since = *missing.entry(node.to_string()).or_insert_with(Instant::now);
        if since.elapsed() < QUARANTINE {
            continue;
        }
        // Gone in the store too, not only behind in the cache.
        let target = Target::Object { namespace: None, name: node.to_string(), sub: None };
        match client.call(nodes, http::Method::GET, target, &[], None).await {
            Err(e) if e.is("NotFound") => {}
            _ => continue,
        }
        let mut marked = p.clone();
        crate::bindings::set_condition(
            &mut marked,
            "DisruptionTarget",
            "True",
            "DeletionByPodGC",
            "PodGC: node no longer exists",
        );
        if !matches!(phase, "Succeeded" | "Failed") {
            marked["status"]["phase"] = json!("Failed");
        }
        // A patch of the status, as kube's collector writes it (its role patches pods/status).
        let patch = json!({"status": marked["status"]});
        match client
            .merge_patch(pods, Some(meta::get(p, "namespace")), meta::get(p, "name"), Some("status"), &patch)
            .await
        {
            Err(e) if !e.is("NotFound") && e.code != 409 => return Err(e),
            _ => {}
        }
        force_delete(client, p).await?;
    }
    missing.retain(|n, _| seen_missing.contains(n));
    if finished.len() > TERMINATED_THRESHOLD {
        finished.sort_by_key(|p| meta::get(p, "creationTimestamp").to_string());
        for p in &finished[..finished.len() - TERMINATED_THRESHOLD] {
            force_delete(client, p).await?;
        }
    }
    Ok(())
}
