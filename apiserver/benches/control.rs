//! The control plane at scale (issue 28): keel-apiserver on its embedded keel member with
//! simulated nodes, all in this process, as `scripts/run.sh` runs it.
//!
//! 1. A Deployment of `KEEL_REPLICAS` (1,000) replicas on `KEEL_NODES` (100) simulated nodes:
//!    time until every pod is Running and Ready, and the scheduler's throughput (pods bound per
//!    second, from the first binding the cache shows to the last).
//! 2. `KEEL_PROXY_NODES` (1,000) simulated nodes, each with its kube-proxy, and a Service of 10
//!    endpoints: after one endpoint changes (the Deployment scaled by one), the time until every
//!    node's table holds the new endpoint — from the EndpointSlice's change reaching the watch
//!    cache, and from the scale request.
//!
//! CPU (user + system) and peak resident set of the whole process are reported per phase.
//! `cargo bench --workspace --bench control` prints a Markdown report.

use std::path::Path;
use std::time::{Duration, Instant};

use keel_apiserver::control::client::{resource, Client};
use keel_apiserver::run::{start, Flags, Running};
use serde_json::{json, Value};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn serve(dir: &Path, nodes: usize) -> Running {
    let args = vec![
        "keel-apiserver".to_string(),
        "--secure-port=0".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--data-dir={}", dir.display()),
        format!("--simulated-nodes={nodes}"),
    ];
    start(&<Flags as clap::Parser>::parse_from(args)).await.expect("keel-apiserver starts")
}

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line; 11 and 12 after the command name.
    (ticks(11) + ticks(12)) / 100.0
}

/// A `/proc/self/status` figure in MiB (VmRSS, VmHWM).
fn mem_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what} did not happen within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}

fn deployment(name: &str, replicas: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}},
        },
    })
}

/// Pods of `app`: (bound, running and ready).
fn count(client: &Client, app: &str) -> (usize, usize) {
    let pods = resource("", "v1", "pods");
    let mut out = (0, 0);
    for p in client.cached_list(pods, Some("default")) {
        let v = p.value(pods);
        if v.pointer("/metadata/labels/app").and_then(Value::as_str) != Some(app) {
            continue;
        }
        out.0 += usize::from(v.pointer("/spec/nodeName").is_some_and(|n| n.as_str() != Some("")));
        let ready = v
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        out.1 += usize::from(ready && v.pointer("/status/phase") == Some(&json!("Running")));
    }
    out
}

async fn nodes_ready(client: &Client, n: usize) -> Duration {
    let nodes = resource("", "v1", "nodes");
    wait_until("nodes to register", Duration::from_secs(600), || {
        client.cached_list(nodes, None).iter().filter(|o| o.value(nodes).pointer("/status/capacity").is_some()).count()
            >= n
    })
    .await
}

async fn rollout(dir: &Path, nodes: usize, replicas: usize, report: &mut String) {
    let running = serve(dir, nodes).await;
    let client = Client::new(running.api.clone(), "system:admin");
    let registered = nodes_ready(&client, nodes).await;
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let deployments = resource("apps", "v1", "deployments");
    client
        .create(deployments, Some("default"), &deployment("bench", replicas))
        .await
        .expect("the Deployment is created");
    let (mut first_bound, mut last_bound) = (None, None);
    let mut all_running = None;
    while all_running.is_none() {
        let (bound, up) = count(&client, "bench");
        if bound > 0 && first_bound.is_none() {
            first_bound = Some(t0.elapsed());
        }
        if bound == replicas && last_bound.is_none() {
            last_bound = Some(t0.elapsed());
        }
        if up == replicas {
            all_running = Some(t0.elapsed());
        }
        assert!(t0.elapsed() < Duration::from_secs(900), "the Deployment did not come up");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu = cpu_seconds() - cpu0;
    let (first, last, all) = (first_bound.unwrap(), last_bound.unwrap(), all_running.unwrap());
    let rate = replicas as f64 / (last - first).as_secs_f64().max(1e-3);
    report.push_str(&format!(
        "| {nodes} | {replicas} | {:.1} s | {:.2} s | {:.2} s | {rate:.0} | {cpu:.1} s | {:.0} MiB | {:.0} MiB |\n",
        registered.as_secs_f64(),
        last.as_secs_f64(),
        all.as_secs_f64(),
        mem_mib("VmRSS:"),
        mem_mib("VmHWM:"),
    ));
    running.stop().await;
}

async fn proxies(dir: &Path, nodes: usize, report: &mut String) {
    let running = serve(dir, nodes).await;
    let client = Client::new(running.api.clone(), "system:admin");
    let registered = nodes_ready(&client, nodes).await;
    let (deployments, services, slices) = (
        resource("apps", "v1", "deployments"),
        resource("", "v1", "services"),
        resource("discovery.k8s.io", "v1", "endpointslices"),
    );
    client.create(deployments, Some("default"), &deployment("svc", 10)).await.unwrap();
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
                     "spec": {"selector": {"app": "svc"}, "ports": [{"port": 80}]}});
    client.create(services, Some("default"), &svc).await.unwrap();
    let backends = |n: usize| {
        let running = &running;
        move || {
            let proxies = running.api.proxies.read();
            proxies.len() == nodes
                && proxies.values().all(|p| {
                    p.rules(Some("default/svc"))
                        .values()
                        .flatten()
                        .any(|r| r.kind == "ClusterIP" && r.backends.len() == n)
                })
        }
    };
    wait_until("every table to hold 10 endpoints", Duration::from_secs(600), backends(10)).await;
    let ready_in_slice = || {
        client
            .cached_list(slices, Some("default"))
            .iter()
            .map(|o| o.value(slices))
            .filter(|v| v.pointer("/metadata/labels/kubernetes.io~1service-name") == Some(&json!("svc")))
            .flat_map(|v| v["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e.pointer("/conditions/ready") == Some(&json!(true)))
            .count()
    };
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let patch = json!({"spec": {"replicas": 11}});
    client.merge_patch(deployments, Some("default"), "svc", None, &patch).await.unwrap();
    wait_until("the EndpointSlice to hold the 11th endpoint", Duration::from_secs(120), || ready_in_slice() == 11)
        .await;
    let sliced = t0.elapsed();
    wait_until("every table to hold the 11th endpoint", Duration::from_secs(120), backends(11)).await;
    let all = t0.elapsed();
    let cpu = cpu_seconds() - cpu0;
    report.push_str(&format!(
        "| {nodes} | {:.1} s | {:.0} ms | {:.0} ms | {:.0} ms | {cpu:.2} s | {:.0} MiB | {:.0} MiB |\n",
        registered.as_secs_f64(),
        sliced.as_secs_f64() * 1e3,
        (all - sliced).as_secs_f64() * 1e3,
        all.as_secs_f64() * 1e3,
        mem_mib("VmRSS:"),
        mem_mib("VmHWM:"),
    ));
    running.stop().await;
}

fn main() {
    let nodes = env_or("KEEL_NODES", 100);
    let replicas = env_or("KEEL_REPLICAS", 1000);
    let proxy_nodes = env_or("KEEL_PROXY_NODES", 1000);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut report = String::from("### A Deployment comes up on simulated nodes\n\n");
        report.push_str("| nodes | replicas | nodes registered in | all bound after | all Running and Ready after | pods bound/s | CPU | RSS | peak RSS |\n|---|---|---|---|---|---|---|---|---|\n");
        let dir = tempfile::tempdir().unwrap();
        rollout(&dir.path().join("rollout"), nodes, replicas, &mut report).await;
        report.push_str("\n### One Service's endpoint change reaches every node's kube-proxy\n\n");
        report.push_str("| nodes | nodes registered in | scale → EndpointSlice | EndpointSlice → every table | scale → every table | CPU | RSS | peak RSS |\n|---|---|---|---|---|---|---|---|\n");
        proxies(&dir.path().join("proxies"), proxy_nodes, &mut report).await;
        println!("{report}");
    });
}
