//! The watch cache's benchmarks (issue 27): LISTs of 10k and 100k pods from the cache and from
//! the store, and watch fan-out (10k watchers of every pod at 100 updates/s; 100k watchers each
//! selecting `spec.nodeName=node-i` at 1k updates/s), with delivery latency, CPU and memory.
//!
//! `cargo bench --workspace --bench watch_cache` (prints a Markdown report). The store is a
//! keel member in this process on RocksDB in a temporary directory, reached through the same
//! etcd v3 client as the apiserver; the watchers are the cache's own subscriptions, each read by
//! a task that takes its events as a watch response does (the shared JSON line of each), without
//! the HTTP connection around it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_apiserver::cache::{Cache, Caches, Object, Selectors, Start};
use keel_apiserver::reads;
use keel_apiserver::resources::{self, Resource};
use keel_apiserver::rest::{self, Api, Query};
use keel_apiserver::storage::{keys, Storage};
use keel_apiserver::table::Shape;
use parking_lot::Mutex;

/// The system allocator, counting the bytes allocated and not yet freed (the heap a structure
/// holds, which RSS shows only loosely once freed memory is reused).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: as the caller's contract.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as the caller's contract.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_add(new, Ordering::Relaxed);
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn heap() -> usize {
    LIVE.load(Ordering::Relaxed)
}

fn pods() -> &'static Resource {
    resources::find("", "v1", "pods").unwrap()
}

/// A pod as a scheduled, running pod of a small deployment is stored (about 1.6 KB).
fn pod(i: usize, node: usize, generation: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "metadata": {
            "name": format!("web-7d9f8b6c5-{i:06}"), "namespace": format!("ns-{}", i % 100),
            "uid": format!("5f0e4c2a-{i:08}-4d4b-9a55-2c7c0f4f3b1e"), "generateName": "web-7d9f8b6c5-",
            "creationTimestamp": "2026-12-07T00:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d9f8b6c5", "tier": "frontend"},
            "annotations": {"generation": generation.to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8b6c5",
                "uid": "0b3c0c55-3d0e-4b0c-8d7f-7b3a4c1f8e21", "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "containers": [{"name": "web", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "128Mi"}},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "nodeName": format!("node-{node}"), "securityContext": {},
            "schedulerName": "default-scheduler", "enableServiceLinks": true,
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.1.{}.{}", (i / 250) % 250, i % 250),
            "startTime": "2026-12-07T00:00:01Z", "qosClass": "Burstable",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-07T00:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T00:00:03Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-12-07T00:00:03Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-07T00:00:00Z"},
            ],
            "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0, "started": true,
                "image": "docker.io/library/nginx:1.27", "imageID": "docker.io/library/nginx@sha256:0123456789abcdef",
                "containerID": format!("containerd://{i:064}"),
                "state": {"running": {"startedAt": "2026-12-07T00:00:02Z"}}}],
        },
    }))
    .unwrap()
}

fn key(i: usize) -> String {
    keys::object("/registry", "pods", Some(&format!("ns-{}", i % 100)), &format!("web-7d9f8b6c5-{i:06}"))
}

/// The process's resident memory, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The process's CPU time (user and system) so far.
fn cpu() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let t = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// A cache of `n` pods, as a list fills it.
fn filled(n: usize) -> Arc<Cache> {
    let cache = Arc::new(Cache::new(pods(), "/registry/pods/".into(), true));
    let objects = (0..n).map(|i| Object::decode(pods(), key(i), pod(i, i % 1000, 0), 1 + i as i64).unwrap()).collect();
    cache.replace(objects, n as i64);
    cache
}

/// p50, p99 and the mean of `runs` timings of `f`, which returns the bytes it produced.
async fn timed<F: AsyncFnMut() -> usize>(runs: usize, mut f: F) -> (Duration, Duration, Duration, usize) {
    let mut times = Vec::with_capacity(runs);
    let mut bytes = 0;
    for _ in 0..runs {
        let t = Instant::now();
        bytes = f().await;
        times.push(t.elapsed());
    }
    let mean = times.iter().sum::<Duration>() / runs as u32;
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99), mean, bytes)
}

/// A keel member in this process on RocksDB, and a client of it.
async fn store(dir: &std::path::Path) -> (Storage, Arc<keel_store::node::Member>) {
    use keel_store::config::Config;
    use keel_store::engine::{RocksEngine, SyncMode};
    let peer = "http://127.0.0.1:2380";
    let data = dir.to_str().unwrap();
    let cfg = Config::parse_from([
        "keel",
        "--name",
        "bench",
        "--data-dir",
        data,
        "--initial-cluster",
        &format!("bench={peer}"),
        "--initial-advertise-peer-urls",
        peer,
    ])
    .unwrap();
    let engine = Arc::new(RocksEngine::open(&dir.join("db")).unwrap());
    let member = keel_store::node::Member::start_with(
        &cfg,
        engine,
        keel_store::raft::network::Dialer::default(),
        SyncMode::Background,
    )
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = keel_store::server::client_router(keel_store::server::Edge::new(member.clone()));
    tokio::spawn(keel_store::server::serve_with(listener, router, std::future::pending()));
    let channel = tonic::transport::Endpoint::from_shared(url).unwrap().connect_lazy();
    let storage = Storage::new(channel);
    let deadline = Instant::now() + Duration::from_secs(60);
    while storage.get("/probe").await.is_err() {
        assert!(Instant::now() < deadline, "the member answers");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (storage, member)
}

async fn lists(report: &mut String) {
    report.push_str("\n### LIST of every pod (all namespaces), JSON\n\n");
    report.push_str("| pods | from | p50 | p99 | objects/s | MB/s | bytes |\n|---|---|---|---|---|---|---|\n");
    let dir = tempfile::tempdir().unwrap();
    let (storage, member) = store(dir.path()).await;
    let api = Api {
        storage: storage.clone(),
        prefix: "/registry".into(),
        caches: Caches::default(),
        crds: Default::default(),
        ranges: Default::default(),
        events: std::sync::Arc::new(keel_apiserver::storage::Leases::new(std::time::Duration::from_secs(3600))),
        proxies: Default::default(),
        auth: Default::default(),
        admission: Default::default(),
    };
    let mut written = 0;
    for n in [10_000usize, 100_000] {
        // The store gets the same pods, 64 writes at a time.
        let next = Arc::new(AtomicU64::new(written as u64));
        let writers: Vec<_> = (0..64)
            .map(|_| {
                let (storage, next) = (storage.clone(), next.clone());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                        if i >= n {
                            break;
                        }
                        storage.create(&key(i), pod(i, i % 1000, 0), 0).await.unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.await.unwrap();
        }
        written = n;
        let cache = filled(n);
        let runs = if n > 10_000 { 10 } else { 40 };
        let everything = Selectors::everything();
        let (p50, p99, mean, bytes) =
            timed(runs, async || reads::list_json(pods(), &cache.list("/registry/pods/", &everything, 0)).len()).await;
        let line = |from: &str, p50: Duration, p99: Duration, mean: Duration, bytes: usize| {
            format!(
                "| {n} | {from} | {} | {} | {:.0} | {:.0} | {bytes} |\n",
                ms(p50),
                ms(p99),
                n as f64 / mean.as_secs_f64(),
                bytes as f64 / mean.as_secs_f64() / 1e6
            )
        };
        report.push_str(&line("watch cache", p50, p99, mean, bytes));
        let query = Query::new();
        let (p50, p99, mean, bytes) = timed(runs.min(10), async || {
            rest::list_from_store(&api, pods(), None, &query, Shape::Object).await.unwrap().len()
        })
        .await;
        report.push_str(&line("store (keel, RocksDB)", p50, p99, mean, bytes));
    }
    member.begin_shutdown();
    member.shutdown().await;
}

/// One fan-out case: `watchers` subscriptions (watcher `w` selecting `select(w)`), `rate` updates
/// per second of `pods` pods for `secs` seconds, pod `i` on node `node(i)`.
struct Case<S, N> {
    title: &'static str,
    watchers: usize,
    select: S,
    pods: usize,
    node: N,
    rate: usize,
    secs: usize,
}

async fn fan_out<S: Fn(usize) -> Query, N: Fn(usize) -> usize>(report: &mut String, case: Case<S, N>) {
    let Case { title, watchers, select, pods: pods_n, node, rate, secs } = case;
    let cache = Arc::new(Cache::new(pods(), "/registry/pods/".into(), true));
    let objects =
        (0..pods_n).map(|i| Object::decode(pods(), key(i), pod(i, node(i), 0), 1 + i as i64).unwrap()).collect();
    let start_rev = pods_n as i64;
    cache.replace(objects, start_rev);
    let applied: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    let (rss_before, heap_before) = (rss(), heap());
    let mut tasks = Vec::with_capacity(watchers);
    let delivered = Arc::new(AtomicU64::new(0));
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let out_of_order = Arc::new(AtomicU64::new(0));
    for w in 0..watchers {
        let sel = Selectors::of(pods(), &select(w)).unwrap();
        let mut sub = cache.watch(Start::After(start_rev), None, sel).unwrap();
        let (applied, delivered, latencies, out_of_order) =
            (applied.clone(), delivered.clone(), latencies.clone(), out_of_order.clone());
        tasks.push(tokio::spawn(async move {
            let mut last = start_rev;
            let mut mine = Vec::new();
            while let Some((e, seen)) = sub.next().await {
                let line = e.line(seen);
                std::hint::black_box(&line);
                let at = applied.lock()[(e.rev - start_rev - 1) as usize];
                mine.push(at.elapsed());
                if e.rev <= last {
                    out_of_order.fetch_add(1, Ordering::Relaxed);
                }
                last = e.rev;
                delivered.fetch_add(1, Ordering::Relaxed);
            }
            latencies.lock().extend(mine);
        }));
    }
    tokio::task::yield_now().await;
    let rss_per_watcher = (rss().saturating_sub(rss_before)) as f64 / watchers as f64;
    let heap_per_watcher = (heap().saturating_sub(heap_before)) as f64 / watchers as f64;
    let cpu_before = cpu();
    let wall = Instant::now();
    let total = rate * secs;
    let mut expected = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let per_tick = rate / 100;
    let mut sent = 0;
    while sent < total {
        tick.tick().await;
        for _ in 0..per_tick {
            let i = sent % pods_n;
            let rev = start_rev + 1 + sent as i64;
            let value = pod(i, node(i), sent + 1);
            applied.lock().push(Instant::now());
            cache.apply(key(i), Some(value), rev);
            expected += watchers_of(i, watchers, &select, &node) as u64;
            sent += 1;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while delivered.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = wall.elapsed();
    let used = cpu() - cpu_before;
    let dropped = watchers - cache.watchers();
    // Dropping the cache's subscriptions ends each reader.
    cache.replace(Vec::new(), start_rev + total as i64 + 1);
    for t in tasks {
        t.await.unwrap();
    }
    let mut l = std::mem::take(&mut *latencies.lock());
    l.sort();
    report.push_str(&format!(
        "| {title} | {watchers} | {total} in {secs} s | {} of {expected} | {} | {} | {} | {:.0}% of a core | {:.2} KiB | {:.2} KiB |\n",
        delivered.load(Ordering::Relaxed),
        if out_of_order.load(Ordering::Relaxed) == 0 && dropped == 0 { "yes" } else { "NO" },
        ms(percentile(&l, 0.5)),
        ms(percentile(&l, 0.99)),
        used.as_secs_f64() / elapsed.as_secs_f64() * 100.0,
        rss_per_watcher / 1024.0,
        heap_per_watcher / 1024.0,
    ));
}

/// How many of the watchers select pod `i` (every update of it goes to them).
fn watchers_of(i: usize, watchers: usize, select: &impl Fn(usize) -> Query, node: &impl Fn(usize) -> usize) -> usize {
    match select(0).get("fieldSelector") {
        None => watchers,
        Some(_) => usize::from(node(i) < watchers),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let mut report = String::new();
        // Watchers first, on a fresh heap, so RSS growth is theirs.
        report.push_str("### Watch fan-out\n\n");
        report.push_str("| case | watchers | updates | delivered | once, in order | p50 latency | p99 latency | CPU | RSS per watcher | heap per watcher |\n|---|---|---|---|---|---|---|---|---|---|\n");
        let by_node = |w: usize| -> Query {
            [("fieldSelector".to_string(), format!("spec.nodeName=node-{w}"))].into_iter().collect()
        };
        let indexed = Case {
            title: "spec.nodeName=node-i",
            watchers: 100_000,
            select: by_node,
            pods: 100_000,
            node: |i| i,
            rate: 1_000,
            secs: 10,
        };
        fan_out(&mut report, indexed).await;
        let broad =
            Case { title: "every pod", watchers: 10_000, select: |_| Query::new(), pods: 1_000, node: |i| i % 1000, rate: 100, secs: 10 };
        fan_out(&mut report, broad).await;
        let (base, heap_base) = (rss(), heap());
        let cache = filled(100_000);
        let per_object = (rss().saturating_sub(base)) as f64 / 100_000.0;
        let heap_per_object = (heap().saturating_sub(heap_base)) as f64 / 100_000.0;
        let item = cache.list("/registry/pods/", &Selectors::everything(), 1).items[0].item.len();
        report.push_str(&format!(
            "\nMemory per cached pod: {:.2} KiB of heap ({:.2} KiB of RSS growth) filling a cache with 100,000 pods of {item} bytes of JSON each\n",
            heap_per_object / 1024.0,
            per_object / 1024.0
        ));
        drop(cache);
        lists(&mut report).await;
        println!("{report}");
    });
}
