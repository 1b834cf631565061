//! `keel-bench compare`: etcd 3.4 and keel, started with the same flags in fresh data dirs, one
//! server kind at a time, in alternating rounds (etcd, keel, etcd, keel, ...), run the same
//! workloads; the result is a markdown table of keel/etcd ratios, the targets of issue 6 with
//! their figures, every raw report as JSON, and SVG plots.
//!
//! One round, per server kind:
//! ```text
//! for members in --members (1, 3):   fresh cluster
//!     put (1 client / 1 conn, 1,000 clients / 100 conns, and the --sweep client counts on 1 member)
//!     preload the key space (not timed), range (linearizable and serializable, single keys and
//!     prefix pages), txn-put, lease-keepalive, watch-latency, watch at each --watchers (1 member)
//! memory:                           fresh single member
//!     RSS before and after --memory-keys keys and --memory-watchers watchers, then restart time
//! ```
//! Figures are the median over rounds of each kind's runs. Results are written after every run,
//! so an interrupted comparison keeps what it measured.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::hist::fmt_us;
use crate::memory::{cpu_seconds, settled_rss_kib, Background};
use crate::plot::{fmt_num, Chart, Series};
use crate::report::Report;
use crate::server::{Cluster, Kind};
use crate::watch::{self, WatchSpec};
use crate::workload::{self, Consistency, Keys, LeaseSpec, Load, PutSpec, RangeSpec, TxnSpec};

#[derive(clap::Args, Clone, Debug, Serialize, Deserialize)]
pub struct CompareArgs {
    /// The keel binary [default: $CARGO_TARGET_DIR/release/keel, else target/release/keel].
    #[arg(long)]
    pub keel_bin: Option<PathBuf>,
    /// The etcd binary (3.4.23 in the published figures).
    #[arg(long, default_value = "etcd")]
    pub etcd_bin: PathBuf,
    /// Rounds; each runs every workload on etcd, then on keel.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Seconds each closed-loop workload runs (watch puts run this long too).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Cluster sizes to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    pub members: Vec<usize>,
    /// Keys that puts and reads pick from (written once before the reads).
    #[arg(long, default_value_t = 100_000)]
    pub key_space: u64,
    /// Clients of the many-client shape (etcd's published 1,000 clients over 100 connections;
    /// connections are a tenth).
    #[arg(long, default_value_t = 1000)]
    pub many: usize,
    /// Client counts of the put throughput sweep on one member (connections: a tenth, at least 1).
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000")]
    pub sweep: Vec<usize>,
    /// Watcher counts of the watch workload (one member; 1,000 watchers per stream).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub watchers: Vec<usize>,
    /// Watchers per watched key in the watch workload.
    #[arg(long, default_value_t = 10)]
    pub watch_fanout: usize,
    /// Puts per second in the watch workloads.
    #[arg(long, default_value_t = 500)]
    pub watch_put_rate: u64,
    /// Keys written for the memory and restart measurement (0: skip it).
    #[arg(long, default_value_t = 1_000_000)]
    pub memory_keys: u64,
    /// Watchers created for the memory measurement.
    #[arg(long, default_value_t = 100_000)]
    pub memory_watchers: usize,
    /// Run only the workloads whose id contains one of these (e.g. `put-,range-l`).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// An extra flag for both servers (repeatable), e.g. `--server-arg=--snapshot-count=10000`.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// Directory for report.md, results.json and the plots.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
}

/// The extra figure holding the CPU cores that processes other than the bench and the servers
/// used during a run.
pub const BACKGROUND: &str = "background_cores";
/// The extra figure holding the servers' CPU time (user + system, every member) per operation
/// answered, in microseconds, over a workload's run.
pub const SERVER_CPU: &str = "server_cpu_us_per_op";
/// Runs with more background than this are listed in the report.
const BUSY_CORES: f64 = 0.2;

/// What a workload of the comparison does.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Work {
    Put(PutSpec),
    Preload(Keys),
    Range(RangeSpec),
    Txn(TxnSpec),
    Lease(LeaseSpec),
    Watch(WatchSpec),
    /// RSS per key and per watcher, then restart time, on a fresh single member.
    Memory {
        keys: u64,
        watchers: usize,
    },
}

/// One workload of the comparison on a cluster size.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Case {
    /// Unique: workload, shape and cluster size, e.g. `put-c1000-m3`.
    pub id: String,
    pub title: String,
    pub members: usize,
    /// Clients/connections or streams/watchers, for the table.
    pub shape: String,
    pub work: Work,
}

/// One measurement: a case on one server kind in one round.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    pub round: usize,
    pub kind: Kind,
    pub case: String,
    pub members: usize,
    pub report: Report,
}

/// Everything `results.json` holds.
#[derive(Serialize, Deserialize)]
pub struct Results {
    pub command: String,
    pub date: String,
    pub machine: String,
    pub keel_bin: String,
    pub etcd_version: String,
    pub args: CompareArgs,
    pub cases: Vec<Case>,
    pub runs: Vec<Run>,
}

fn put_case(members: usize, clients: usize, conns: usize, secs: f64, keys: &Keys) -> Case {
    Case {
        id: format!("put-c{clients}-m{members}"),
        title: "put".into(),
        members,
        shape: format!("{clients} / {conns}"),
        work: Work::Put(PutSpec { load: Load::new(clients, conns).for_secs(secs), keys: keys.clone() }),
    }
}

fn range_case(
    members: usize,
    clients: usize,
    conns: usize,
    c: Consistency,
    page: i64,
    a: &CompareArgs,
    keys: &Keys,
) -> Case {
    let (name, what) = match c {
        Consistency::L => ("l", "linearizable"),
        Consistency::S => ("s", "serializable"),
    };
    let (id, title) = if page > 0 {
        (format!("range-{name}-page{page}-c{clients}-m{members}"), format!("range {what}, pages of {page}"))
    } else {
        (format!("range-{name}-c{clients}-m{members}"), format!("range {what}, one key"))
    };
    let load = Load::new(clients, conns).for_secs(a.duration);
    Case {
        id,
        title,
        members,
        shape: format!("{clients} / {conns}"),
        work: Work::Range(RangeSpec { load, keys: keys.clone(), consistency: c, page, preload: false }),
    }
}

fn watch_spec(streams: usize, per_stream: usize, watched_keys: u64, a: &CompareArgs) -> WatchSpec {
    WatchSpec {
        streams,
        watchers_per_stream: per_stream,
        watched_keys: Some(watched_keys),
        conns: streams.clamp(1, 100),
        put_rate: a.watch_put_rate,
        put_total: (a.watch_put_rate as f64 * a.duration).ceil() as u64,
        key_size: 8,
        val_size: 256,
        drain_secs: 30.0,
    }
}

/// The comparison's workloads, in the order they run on each cluster size.
pub fn cases(a: &CompareArgs) -> Vec<Case> {
    let keys = Keys { key_space_size: a.key_space, ..Keys::default() };
    let mut cases = Vec::new();
    for &m in &a.members {
        let (many, many_conns) = (a.many, (a.many / 10).max(1));
        let many_shape = format!("{many} / {many_conns}");
        let mut clients: BTreeSet<usize> = [1, many].into();
        if m == 1 {
            clients.extend(a.sweep.iter().copied());
        }
        for c in clients {
            let conns = if c == 1 { 1 } else { (c / 10).max(1) };
            cases.push(put_case(m, c, conns, a.duration, &keys));
        }
        cases.push(Case {
            id: format!("preload-m{m}"),
            title: "preload (not timed)".into(),
            members: m,
            shape: "256 / 32".into(),
            work: Work::Preload(keys.clone()),
        });
        cases.push(range_case(m, 1, 1, Consistency::L, 0, a, &keys));
        cases.push(range_case(m, many, many_conns, Consistency::L, 0, a, &keys));
        cases.push(range_case(m, many, many_conns, Consistency::S, 0, a, &keys));
        cases.push(range_case(m, (many / 10).max(1), (many / 100).max(1), Consistency::L, 50, a, &keys));
        cases.push(Case {
            id: format!("txn-put-c{many}-m{m}"),
            title: "txn-put (CAS)".into(),
            members: m,
            shape: many_shape.clone(),
            work: Work::Txn(TxnSpec { load: Load::new(many, many_conns).for_secs(a.duration), keys: keys.clone() }),
        });
        cases.push(Case {
            id: format!("lease-keepalive-c{many}-m{m}"),
            title: "lease-keepalive".into(),
            members: m,
            shape: many_shape,
            work: Work::Lease(LeaseSpec { load: Load::new(many, many_conns).for_secs(a.duration), ttl: 60 }),
        });
        // etcd benchmark's watch-latency shape: 10 streams x 10 watchers on one key.
        let mut wl = watch_spec(10, 10, 1, a);
        wl.put_rate = 100;
        wl.put_total = (100.0 * a.duration).ceil() as u64;
        cases.push(Case {
            id: format!("watch-latency-m{m}"),
            title: "watch-latency (100 watchers, 1 key)".into(),
            members: m,
            shape: "10 x 10".into(),
            work: Work::Watch(wl),
        });
        if m == 1 {
            for &w in &a.watchers {
                let per_stream = w.min(1000);
                let streams = w.div_ceil(per_stream);
                let keys = (w / a.watch_fanout.max(1)).max(1) as u64;
                cases.push(Case {
                    id: format!("watch-w{w}-m{m}"),
                    title: format!("watch, {} watchers", fmt_num(w as f64)),
                    members: m,
                    shape: format!("{streams} x {per_stream}"),
                    work: Work::Watch(watch_spec(streams, per_stream, keys, a)),
                });
            }
        }
    }
    if a.memory_keys > 0 {
        cases.push(Case {
            id: "memory-m1".into(),
            title: "memory and restart".into(),
            members: 1,
            shape: "-".into(),
            work: Work::Memory { keys: a.memory_keys, watchers: a.memory_watchers },
        });
    }
    if !a.only.is_empty() {
        // Reads need their keys: keep a cluster size's preload when any of its reads is kept.
        let wanted = |c: &Case| a.only.iter().any(|o| c.id.contains(o.as_str()));
        let reads: BTreeSet<usize> =
            cases.iter().filter(|c| wanted(c) && matches!(c.work, Work::Range(_))).map(|c| c.members).collect();
        cases.retain(|c| wanted(c) || (matches!(c.work, Work::Preload(_)) && reads.contains(&c.members)));
    }
    cases
}

impl Work {
    /// Whether this is a closed-loop workload: clients that each send their next request once
    /// answered, measured by throughput and latency.
    fn is_closed_loop(&self) -> bool {
        matches!(self, Work::Put(_) | Work::Range(_) | Work::Txn(_) | Work::Lease(_))
    }

    /// Runs against a cluster.
    async fn run(&self, cluster: &mut Cluster) -> Result<Report> {
        let eps = cluster.endpoints();
        match self {
            Work::Put(s) => workload::put(&eps, s).await,
            Work::Preload(k) => workload::preload(&eps, k).await,
            Work::Range(s) => workload::range(&eps, s).await,
            Work::Txn(s) => workload::txn_put(&eps, s).await,
            Work::Lease(s) => workload::lease_keepalive(&eps, s).await,
            Work::Watch(s) => {
                // The server's resident set is only meaningful on a single member.
                let pids = if eps.len() == 1 { cluster.pids() } else { Vec::new() };
                watch::run(&eps, s, &pids).await
            }
            Work::Memory { keys, watchers } => memory(cluster, *keys, *watchers).await,
        }
    }
}

/// RSS of a fresh member, after `keys` keys (8-byte keys, 256-byte values), after `watchers`
/// watchers on them; then the time a graceful restart takes until the member serves again.
async fn memory(cluster: &mut Cluster, keys: u64, watchers: usize) -> Result<Report> {
    let eps = cluster.endpoints();
    let base = settled_rss_kib(&cluster.pids()).await?;
    let spec = Keys { key_space_size: keys, ..Keys::default() };
    let load = workload::preload(&eps, &spec).await?;
    let with_keys = settled_rss_kib(&cluster.pids()).await?;
    let per_stream = watchers.clamp(1, 1000);
    let w = WatchSpec {
        streams: watchers.div_ceil(per_stream),
        watchers_per_stream: per_stream,
        watched_keys: None,
        conns: 10,
        put_rate: 1,
        put_total: 0,
        key_size: 8,
        val_size: 256,
        drain_secs: 0.0,
    };
    let wr = watch::run(&eps, &w, &cluster.pids()).await?;
    let restart = cluster.restart(0).await?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let mut r = Report {
        workload: "memory".into(),
        params: serde_json::json!({"keys": keys, "watchers": watchers}),
        ..Default::default()
    };
    r.ops = load.ops;
    r.ops_per_s = load.ops_per_s;
    r.latency = load.latency;
    let x = &mut r.extra;
    x.insert("rss_base_mib".into(), mib(base));
    x.insert("rss_with_keys_mib".into(), mib(with_keys));
    x.insert("rss_per_1m_keys_mib".into(), mib(with_keys.saturating_sub(base)) * 1e6 / keys as f64);
    let per_watcher = wr.extra.get("rss_per_watcher_bytes").copied().unwrap_or(f64::NAN);
    x.insert("rss_per_100k_watchers_mib".into(), per_watcher * 1e5 / (1024.0 * 1024.0));
    x.insert("rss_with_watchers_mib".into(), wr.extra.get("server_rss_mib").copied().unwrap_or(f64::NAN));
    x.insert("restart_s".into(), restart.as_secs_f64());
    Ok(r)
}

fn keel_default() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| "target".into());
    target.join("release").join("keel")
}

/// The first line a command prints, or `unknown`.
fn first_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// CPU model, cores and memory of this machine.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<f64>().ok()))
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    format!("{cores} cores ({cpu}), {mem_gib:.0} GiB RAM, Linux {}", first_line("uname", &["-r"]))
}

/// Runs the comparison and writes `report.md`, `results.json` and the plots into `--out`.
pub async fn compare(a: &CompareArgs) -> Result<()> {
    let keel_bin = a.keel_bin.clone().unwrap_or_else(keel_default);
    anyhow::ensure!(
        keel_bin.exists(),
        "no keel binary at {} (build it: cargo build --release --workspace)",
        keel_bin.display()
    );
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let cases = cases(a);
    let mut results = Results {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        machine: machine(),
        keel_bin: keel_bin.display().to_string(),
        etcd_version: first_line(&a.etcd_bin.display().to_string(), &["--version"]),
        args: a.clone(),
        cases: cases.clone(),
        runs: Vec::new(),
    };
    let started = Instant::now();
    let sizes: BTreeSet<usize> = cases.iter().filter(|c| c.id != "memory-m1").map(|c| c.members).collect();
    for round in 1..=a.rounds {
        for kind in [Kind::Etcd, Kind::Keel] {
            let program = match kind {
                Kind::Etcd => a.etcd_bin.clone(),
                Kind::Keel => keel_bin.clone(),
            };
            // One cluster per size for the workloads, then a fresh member for memory.
            let mut sessions: Vec<(usize, Vec<&Case>)> = sizes
                .iter()
                .map(|&m| (m, cases.iter().filter(|c| c.members == m && c.id != "memory-m1").collect()))
                .collect();
            sessions.extend(cases.iter().filter(|c| c.id == "memory-m1").map(|c| (1, vec![c])));
            for (members, session) in sessions {
                eprintln!("round {round}/{}: {} with {members} member(s)", a.rounds, kind.name());
                let mut cluster = Cluster::start(kind, &program, members, &a.server_args).await?;
                for case in session {
                    eprintln!("  {} ({:.0}s so far)", case.id, started.elapsed().as_secs_f64());
                    let pids = cluster.pids();
                    let background = Background::now(&pids)?;
                    let cpu = cpu_seconds(&pids);
                    let mut report = case.work.run(&mut cluster).await.unwrap_or_else(|e| Report {
                        workload: case.id.clone(),
                        first_error: Some(format!("{e:#}")),
                        ..Default::default()
                    });
                    let cpu = cpu_seconds(&pids) - cpu;
                    report.extra.insert(BACKGROUND.into(), background.cores_since(&pids)?);
                    // Closed-loop workloads only: the memory case restarts the member (a new pid).
                    if case.work.is_closed_loop() && report.ops > 0 {
                        report.extra.insert(SERVER_CPU.into(), cpu * 1e6 / report.ops as f64);
                    }
                    eprint!("{}", report.text().lines().map(|l| format!("    {l}\n")).collect::<String>());
                    results.runs.push(Run { round, kind, case: case.id.clone(), members, report });
                    write_all(&a.out, &results)?;
                }
            }
        }
    }
    eprintln!("done in {:.0}s; report in {}", started.elapsed().as_secs_f64(), a.out.join("report.md").display());
    Ok(())
}

/// Writes results.json, report.md and the plots.
pub fn write_all(out: &Path, results: &Results) -> Result<()> {
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(results)?)?;
    std::fs::write(out.join("report.md"), markdown(results))?;
    for (name, svg) in plots(results) {
        std::fs::write(out.join(name), svg)?;
    }
    Ok(())
}

/// The median over rounds of `f` on the runs of `case` by `kind` that did not fail.
fn median(r: &Results, case: &str, kind: Kind, f: impl Fn(&Report) -> Option<f64>) -> Option<f64> {
    let mut v: Vec<f64> = r
        .runs
        .iter()
        .filter(|run| run.case == case && run.kind == kind && run.report.ops > 0)
        .filter_map(|run| f(&run.report))
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

fn both(r: &Results, case: &str, f: impl Fn(&Report) -> Option<f64> + Copy) -> (Option<f64>, Option<f64>) {
    (median(r, case, Kind::Etcd, f), median(r, case, Kind::Keel, f))
}

/// keel's median over etcd's.
fn rel(r: &Results, case: &str, f: impl Fn(&Report) -> Option<f64> + Copy) -> Option<f64> {
    let (e, k) = both(r, case, f);
    e.zip(k).filter(|(e, _)| *e > 0.0).map(|(e, k)| k / e)
}

fn cell(v: Option<f64>, fmt: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "failed".into(), fmt)
}

fn ratio(etcd: Option<f64>, keel: Option<f64>) -> String {
    match (etcd, keel) {
        (Some(e), Some(k)) if e > 0.0 => format!("{:.2}×", k / e),
        _ => "-".into(),
    }
}

fn ops(v: f64) -> String {
    format!("{v:.0}")
}

fn extra(key: &'static str) -> impl Fn(&Report) -> Option<f64> + Copy {
    move |r: &Report| r.extra.get(key).copied()
}

/// The report: header, throughput/latency table, watch table, memory table, targets.
pub fn markdown(r: &Results) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# keel vs etcd\n");
    let _ = writeln!(s, "- date: {}", r.date);
    let _ = writeln!(s, "- machine: {}", r.machine);
    let _ = writeln!(s, "- etcd: `{}`; keel: `{}`", r.etcd_version, r.keel_bin);
    let _ = writeln!(s, "- command: `{}`", r.command);
    let _ = writeln!(
        s,
        "- {} round(s), each etcd then keel, fresh data dirs, same flags; figures are medians over rounds; \
         8-byte keys, 256-byte values, key space {}; closed-loop workloads run {} s each\n",
        r.args.rounds, r.args.key_space, r.args.duration
    );
    let closed: Vec<&Case> = r.cases.iter().filter(|c| c.work.is_closed_loop()).collect();
    if !closed.is_empty() {
        let _ = writeln!(s, "Server CPU is the user and system time of every member's process over the workload's run, per operation answered.\n");
        let _ = writeln!(s, "| workload | members | clients / conns | etcd ops/s | keel ops/s | keel/etcd | etcd p50 | keel p50 | etcd p99 | keel p99 | p99 keel/etcd | etcd CPU/op | keel CPU/op | CPU keel/etcd |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    }
    let lat = |q: fn(&Report) -> u64| move |rep: &Report| Some(q(rep) as f64);
    let p50 = lat(|r| r.latency.p50_us);
    let p99 = lat(|r| r.latency.p99_us);
    let tput = |rep: &Report| Some(rep.ops_per_s);
    for c in closed {
        let (et, kt) = both(r, &c.id, tput);
        let (e50, k50) = both(r, &c.id, p50);
        let (e99, k99) = both(r, &c.id, p99);
        let (ec, kc) = both(r, &c.id, extra(SERVER_CPU));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.title,
            c.members,
            c.shape,
            cell(et, ops),
            cell(kt, ops),
            ratio(et, kt),
            cell(e50, fmt_us),
            cell(k50, fmt_us),
            cell(e99, fmt_us),
            cell(k99, fmt_us),
            ratio(e99, k99),
            cell(ec, fmt_us),
            cell(kc, fmt_us),
            ratio(ec, kc)
        );
    }
    let watches: Vec<&Case> = r.cases.iter().filter(|c| matches!(c.work, Work::Watch(_))).collect();
    if !watches.is_empty() {
        let _ = writeln!(s, "\nWatch: delivery latency is from the put's send time to the event's arrival; every watcher is checked for every event, in order, once.\n");
        let _ = writeln!(s, "| workload | members | streams x watchers | etcd events/s | keel events/s | etcd p50 | keel p50 | etcd p99 | keel p99 | p99 keel/etcd | complete (etcd / keel) | server RSS MiB (etcd / keel) |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for c in watches {
            let (et, kt) = both(r, &c.id, tput);
            let (e50, k50) = both(r, &c.id, p50);
            let (e99, k99) = both(r, &c.id, p99);
            let complete = |kind: Kind| {
                let runs: Vec<&Run> = r.runs.iter().filter(|x| x.case == c.id && x.kind == kind).collect();
                let ok = runs.iter().filter(|x| x.report.extra.get("complete") == Some(&1.0)).count();
                format!("{ok}/{}", runs.len())
            };
            let (er, kr) = both(r, &c.id, extra("server_rss_mib"));
            let rss = |v: Option<f64>| v.map_or_else(|| "-".into(), ops);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} |",
                c.title,
                c.members,
                c.shape,
                cell(et, ops),
                cell(kt, ops),
                cell(e50, fmt_us),
                cell(k50, fmt_us),
                cell(e99, fmt_us),
                cell(k99, fmt_us),
                ratio(e99, k99),
                complete(Kind::Etcd),
                complete(Kind::Keel),
                rss(er),
                rss(kr)
            );
        }
    }
    if let Some(c) = r.cases.iter().find(|c| matches!(c.work, Work::Memory { .. })) {
        let Work::Memory { keys, watchers } = c.work else { unreachable!() };
        let _ = writeln!(s, "\nMemory (resident set of a fresh single member) and restart (SIGTERM, then spawn until a linearizable read is served) with {} keys and {} watchers:\n", fmt_num(keys as f64), fmt_num(watchers as f64));
        let _ = writeln!(s, "| | etcd | keel | keel/etcd |\n|---|---|---|---|");
        for (label, key, unit) in [
            ("RSS at start", "rss_base_mib", "MiB"),
            ("RSS with the keys", "rss_with_keys_mib", "MiB"),
            ("RSS growth per 1M keys (scaled linearly)", "rss_per_1m_keys_mib", "MiB"),
            ("RSS growth per 100k watchers (scaled linearly)", "rss_per_100k_watchers_mib", "MiB"),
            ("restart time", "restart_s", "s"),
        ] {
            let (e, k) = both(r, &c.id, extra(key));
            let f = |v: f64| format!("{v:.1} {unit}");
            let _ = writeln!(s, "| {label} | {} | {} | {} |", cell(e, f), cell(k, f), ratio(e, k));
        }
    }
    s.push_str(&targets(r));
    s.push_str(&background(r));
    s
}

/// Runs during which other processes kept the machine busy: their figures are suspect. Listed
/// one by one when they are few, summarised per server kind otherwise.
fn background(r: &Results) -> String {
    let busy: Vec<(&Run, f64)> = r
        .runs
        .iter()
        .filter_map(|run| run.report.extra.get(BACKGROUND).filter(|c| **c > BUSY_CORES).map(|c| (run, *c)))
        .collect();
    if busy.is_empty() {
        return format!("\nNo run shared the machine with more than {BUSY_CORES} cores of other work.\n");
    }
    if busy.len() * 4 <= r.runs.len() {
        let named: Vec<String> = busy
            .iter()
            .map(|(run, c)| format!("{} round {} {} ({c:.1} cores)", run.case, run.round, run.kind.name()))
            .collect();
        return format!(
            "\nRuns that shared the machine with other work (CPU other processes used, on average): {}.\n",
            named.join("; ")
        );
    }
    let per_kind: Vec<String> = [Kind::Etcd, Kind::Keel]
        .into_iter()
        .filter_map(|kind| {
            let mut v: Vec<f64> = r
                .runs
                .iter()
                .filter(|run| run.kind == kind)
                .filter_map(|run| run.report.extra.get(BACKGROUND).copied())
                .collect();
            v.sort_by(f64::total_cmp);
            let (lo, mid, hi) = (v.first()?, v[v.len() / 2], v.last()?);
            Some(format!("{}: {lo:.1} to {hi:.1} cores, median {mid:.1}", kind.name()))
        })
        .collect();
    format!(
        "\n{} of {} runs shared the machine with other work; CPU other processes used during a run, on \
         average: {}.\n",
        busy.len(),
        r.runs.len(),
        per_kind.join("; ")
    )
}

/// Issue 6's targets with the measured figures and a verdict each.
fn targets(r: &Results) -> String {
    let mut s = String::from("\nTargets (issue 6):\n\n| target | figure | met |\n|---|---|---|\n");
    // Targets whose workload was left out of the run (--only) get no row.
    let ran = |id: &str| r.cases.iter().any(|c| c.id == id);
    let mut row = |id: &str, target: String, figure: String, met: Option<bool>| {
        if !ran(id) {
            return;
        }
        let verdict = match met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        let _ = writeln!(s, "| {target} | {figure} | {verdict} |");
    };
    let tput = |rep: &Report| Some(rep.ops_per_s);
    let p50 = |rep: &Report| Some(rep.latency.p50_us as f64);
    let p99 = |rep: &Report| Some(rep.latency.p99_us as f64);
    for &m in &r.args.members {
        let many = r.args.many;
        let id = format!("put-c{many}-m{m}");
        let (t, l) = (rel(r, &id, tput), rel(r, &id, p99));
        row(
            &id,
            format!("put throughput, {many} clients, {m} member(s): ≥ 1.5× etcd, p99 no worse"),
            format!("{} throughput, {} p99", fmt_x(t), fmt_x(l)),
            t.zip(l).map(|(t, l)| t >= 1.5 && l <= 1.0),
        );
        let id = format!("put-c1-m{m}");
        let (a, b) = (rel(r, &id, p50), rel(r, &id, p99));
        row(
            &id,
            format!("single-client put latency, {m} member(s): p50 and p99 no worse than etcd"),
            format!("{} p50, {} p99", fmt_x(a), fmt_x(b)),
            a.zip(b).map(|(a, b)| a <= 1.0 && b <= 1.0),
        );
        for (c, name) in [("l", "linearizable"), ("s", "serializable")] {
            let id = format!("range-{c}-c{many}-m{m}");
            let t = rel(r, &id, tput);
            row(
                &id,
                format!("{name} range throughput, {many} clients, {m} member(s): ≥ 1.5× etcd"),
                fmt_x(t),
                t.map(|t| t >= 1.5),
            );
        }
    }
    for c in r.cases.iter().filter(|c| matches!(c.work, Work::Watch(_))) {
        let l = rel(r, &c.id, p99);
        row(
            &c.id,
            format!("watch p99 delivery latency, {}, {} member(s): no worse than etcd", c.title, c.members),
            format!("{} p99", fmt_x(l)),
            l.map(|l| l <= 1.0),
        );
    }
    let largest = r.cases.iter().filter_map(|c| match &c.work {
        Work::Watch(w) if c.members == 1 => Some((w.watchers(), c.id.clone())),
        _ => None,
    });
    match largest.max() {
        Some((n, id)) => {
            let rss = median(r, &id, Kind::Keel, extra("server_rss_mib"));
            let figure = format!("{} MiB with {} watchers", cell(rss, ops), fmt_num(n as f64));
            let met = if n >= 1_000_000 { rss.map(|m| m < 1024.0) } else { None };
            row(&id, "1M watchers on one member under 1 GiB RSS".into(), figure, met);
        }
        None => {
            let _ = writeln!(s, "| 1M watchers on one member under 1 GiB RSS | - | not measured |");
        }
    }
    s
}

fn fmt_x(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.2}×"))
}

const ETCD_COLOR: &str = "#1f77b4";
const KEEL_COLOR: &str = "#d62728";

/// Latency CDFs per workload (one line per server kind and round) and throughput against
/// clients (put on each cluster size).
pub fn plots(r: &Results) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in &r.cases {
        if matches!(c.work, Work::Preload(_) | Work::Memory { .. }) {
            continue;
        }
        let series: Vec<Series> = r
            .runs
            .iter()
            .filter(|run| run.case == c.id && !run.report.latency.cdf.is_empty())
            .map(|run| Series {
                name: format!("{} round {}", run.kind.name(), run.round),
                color: if run.kind == Kind::Etcd { ETCD_COLOR } else { KEEL_COLOR }.into(),
                dashed: run.round % 2 == 0,
                points: run.report.latency.cdf.iter().map(|p| (p[0], p[1])).collect(),
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        let chart = Chart {
            title: format!("{}, {} member(s), {} — latency CDF", c.title, c.members, c.shape),
            x_label: "latency".into(),
            y_label: "fraction of requests".into(),
            log_x: true,
            x_fmt: fmt_us,
            y_fmt: fmt_num,
            series,
        };
        out.push((format!("cdf-{}.svg", c.id), chart.svg()));
    }
    for &m in &r.args.members {
        let puts: Vec<(usize, &Case)> = r
            .cases
            .iter()
            .filter_map(|c| match &c.work {
                Work::Put(p) if c.members == m => Some((p.load.clients, c)),
                _ => None,
            })
            .collect();
        let series: Vec<Series> = [Kind::Etcd, Kind::Keel]
            .into_iter()
            .map(|kind| Series {
                name: kind.name().into(),
                color: if kind == Kind::Etcd { ETCD_COLOR } else { KEEL_COLOR }.into(),
                dashed: false,
                points: puts
                    .iter()
                    .filter_map(|(n, c)| median(r, &c.id, kind, |rep| Some(rep.ops_per_s)).map(|v| (*n as f64, v)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() || puts.len() < 2 {
            continue;
        }
        let chart = Chart {
            title: format!("put throughput against clients, {m} member(s)"),
            x_label: "clients (connections: a tenth)".into(),
            y_label: "puts/s".into(),
            log_x: true,
            x_fmt: fmt_num,
            y_fmt: fmt_num,
            series,
        };
        out.push((format!("put-throughput-m{m}.svg"), chart.svg()));
    }
    out
}

/// Re-renders report.md and the plots from an existing results.json (after editing the code
/// that renders them, without measuring again).
pub fn render(dir: &Path) -> Result<()> {
    let json = std::fs::read_to_string(dir.join("results.json"))
        .with_context(|| format!("reading {}/results.json", dir.display()))?;
    let results: Results = serde_json::from_str(&json)?;
    write_all(dir, &results)
}
