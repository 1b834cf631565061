//! Writes through keel-apiserver (issue 27): creates, then updates, of ConfigMaps over HTTPS by a
//! real client (kube-rs), with the apiserver on its embedded keel member and, in the same run, on
//! etcd 3.4 (`--etcd-servers`): throughput and latency of each.
//!
//! `cargo bench --workspace --bench writes` (prints a Markdown report). etcd is Debian's
//! `/usr/bin/etcd` (3.4.23), one member in a temporary directory with its default flags; the
//! keel member runs inside the apiserver's process as `scripts/run.sh` starts it. The client,
//! the apiserver and the store share this machine's cores, as they would on one control-plane
//! node. `KEEL_WRITES` sets the number of objects (default 4000), `KEEL_WRITERS` how many
//! requests are in flight at once (default 64).

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use keel_apiserver::run::{start, Flags, Running};
use keel_bench::hist::{fmt_us, Latencies};
use keel_bench::server::{Cluster, Kind};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A ConfigMap of about 1 KiB (`n` names it; `round` tells its versions apart).
fn configmap(n: usize, round: usize) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("cm-{n:06}"), "labels": {"app": "bench", "shard": (n % 16).to_string()}},
        "data": {"round": round.to_string(), "payload": "x".repeat(1000)},
    }))
    .expect("a configmap")
}

async fn serve(dir: &Path, etcd: Option<&str>) -> Running {
    let mut args = vec![
        "keel-apiserver".to_string(),
        "--secure-port=0".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--data-dir={}", dir.display()),
        // The API server alone, as the kube-apiserver figures it is compared with.
        "--controllers=".into(),
        // No `default` service accounts without their controller (see tests/common).
        "--disable-admission-plugins=ServiceAccount".into(),
    ];
    if let Some(url) = etcd {
        args.push(format!("--etcd-servers={url}"));
    }
    start(&<Flags as clap::Parser>::parse_from(args)).await.expect("keel-apiserver starts")
}

/// One phase's figures.
struct Phase {
    ops: usize,
    elapsed: Duration,
    latencies: Latencies,
}

impl Phase {
    fn row(&self, store: &str, what: &str) -> String {
        let s = self.latencies.summary();
        format!(
            "| {store} | {what} | {} | {:.0} | {} | {} | {} |",
            self.ops,
            self.ops as f64 / self.elapsed.as_secs_f64(),
            fmt_us(s.p50_us as f64),
            fmt_us(s.p99_us as f64),
            fmt_us(s.max_us as f64),
        )
    }
}

/// Runs `op` for every object with `writers` in flight; each must succeed.
async fn phase<F, Fut>(n: usize, writers: usize, op: F) -> Phase
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let started = Instant::now();
    let mut latencies = Latencies::default();
    let mut done = futures::stream::iter(0..n)
        .map(|i| {
            let fut = op(i);
            async move {
                let t = Instant::now();
                fut.await.expect("a write succeeds");
                t.elapsed()
            }
        })
        .buffer_unordered(writers);
    while let Some(d) = done.next().await {
        latencies.record(d);
    }
    Phase { ops: n, elapsed: started.elapsed(), latencies }
}

/// Creates then updates `n` ConfigMaps through the apiserver at `running`.
async fn writes(running: &Running, n: usize, writers: usize) -> (Phase, Phase) {
    let kubeconfig = Kubeconfig::read_from(&running.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = phase(n, writers, |i| {
        let cms = cms.clone();
        async move { cms.create(&PostParams::default(), &configmap(i, 0)).await.map(|_| ()) }
    })
    .await;
    // Updates without a resourceVersion: unconditional, as `kubectl replace` without one.
    let updated = phase(n, writers, |i| {
        let cms = cms.clone();
        async move {
            let cm = configmap(i, 1);
            cms.replace(cm.metadata.name.as_deref().unwrap(), &PostParams::default(), &cm).await.map(|_| ())
        }
    })
    .await;
    (created, updated)
}

fn main() {
    let n = env_or("KEEL_WRITES", 4000);
    let writers = env_or("KEEL_WRITERS", 64);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut rows = Vec::new();
        let dir = tempfile::tempdir().unwrap();
        let keel = serve(&dir.path().join("keel"), None).await;
        let (c, u) = writes(&keel, n, writers).await;
        rows.push(c.row("keel (embedded member)", "create"));
        rows.push(u.row("keel (embedded member)", "update"));
        keel.stop().await;

        let etcd = Cluster::start(Kind::Etcd, Path::new("/usr/bin/etcd"), 1, &[]).await.expect("etcd 3.4 starts");
        let on_etcd = serve(&dir.path().join("etcd"), Some(&keel_bench::conn::url(&etcd.endpoints()[0]))).await;
        let (c, u) = writes(&on_etcd, n, writers).await;
        rows.push(c.row("etcd 3.4.23", "create"));
        rows.push(u.row("etcd 3.4.23", "update"));
        on_etcd.stop().await;
        drop(etcd);

        println!("## keel-apiserver writes\n");
        println!(
            "{n} ConfigMaps of ~1 KiB, {writers} requests in flight, kube-rs over HTTPS; {}.\n",
            keel_bench::compare::machine()
        );
        println!("| store | write | objects | objects/s | p50 | p99 | max |");
        println!("|---|---|---|---|---|---|---|");
        for r in rows {
            println!("{r}");
        }
    });
}
