//! `keel-chaos sim --seeds N [--start S]`: runs N seeded histories and prints, as its last line,
//! `histories=N ops=M violations=V`; exits non-zero on violations. A failing seed prints the
//! command that replays it.
//!
//! Every history runs in a process of its own, started with its replay command: tokio numbers
//! tasks process-wide, and the order in which a crashed member's tasks are dropped (so the order
//! in which its sockets close, each drawing from the simulation's generator) follows those
//! numbers. A history run after others would not be the one its replay command shows. Being
//! processes, histories run side by side (`--jobs`) and are reported in seed order.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use keel_chaos::sim::{self, Fault, Options};

#[derive(Parser)]
#[command(name = "keel-chaos", about = "Deterministic fault simulation of keel clusters")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run seeded histories and check them.
    Sim {
        /// How many histories (seeds) to run.
        #[arg(long, default_value_t = 10)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Members per cluster (default: 5 for every fifth seed, else 3).
        #[arg(long)]
        members: Option<usize>,
        /// Simulated seconds the clients run per history.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Print every history's faults.
        #[arg(long)]
        verbose: bool,
        /// Clients compact at their last write once in this many operations, 0 for never
        /// (default: 15 for every third seed, else 0).
        #[arg(long)]
        compact_one_in: Option<u32>,
        /// The faults the nemesis draws from, comma-separated (default: all).
        #[arg(long, value_delimiter = ',', default_values_t = sim::ALL_FAULTS.map(|f| f.name().to_string()))]
        nemesis: Vec<String>,
        /// Clients granting, keeping alive and dropping leases.
        #[arg(long, default_value_t = 2)]
        leasers: usize,
        /// Members snapshot every this many entries, keeping 10 behind (default: 100 for every
        /// fourth seed, else etcd's default).
        #[arg(long)]
        snapshot_every: Option<u64>,
        /// Members store on RocksDB in temporary directories (crashes are process crashes).
        #[arg(long)]
        rocksdb: bool,
        /// Plant a bug in the store (an unknown name lists the known ones).
        #[arg(long)]
        plant: Option<String>,
        /// Histories run at once, each in a process of its own (default: the machine's cores).
        #[arg(long)]
        jobs: Option<usize>,
    },
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    }
    let Command::Sim {
        seeds,
        start,
        members,
        seconds,
        verbose,
        compact_one_in,
        nemesis,
        leasers,
        snapshot_every,
        rocksdb,
        plant,
        jobs,
    } = Cli::parse().command;
    let faults: Vec<Fault> = match nemesis.iter().map(|n| n.parse()).collect() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let began = Instant::now();
    let alone = std::env::var_os(ALONE).is_some();
    let histories: Vec<Options> = (start..start + seeds)
        .map(|seed| {
            let default = Options::new(seed);
            Options {
                members: members.unwrap_or(default.members),
                duration: Duration::from_secs(seconds),
                compact_one_in: compact_one_in.unwrap_or(default.compact_one_in),
                nemesis: faults.clone(),
                rocksdb,
                leasers,
                snapshot_every: snapshot_every.or(default.snapshot_every),
                plant: plant.clone(),
                ..default
            }
        })
        .collect();
    let (mut ops, mut violations, mut simulated) = (0, 0, Duration::ZERO);
    let mut tally = |outcome: Outcome| {
        print!("{}", outcome.printed);
        ops += outcome.ops;
        violations += outcome.violations;
        simulated += outcome.simulated;
    };
    if alone {
        histories.iter().for_each(|opts| tally(run_here(opts, verbose)));
    } else {
        let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        in_processes(&histories, jobs.max(1), verbose, tally);
    }
    println!("simulated {:.3}s in {:?}", simulated.as_secs_f64(), began.elapsed());
    println!("histories={seeds} ops={ops} violations={violations}");
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Set in the environment of the process that runs a history: it runs it there.
const ALONE: &str = "KEEL_CHAOS_ALONE";

/// What running one history came to.
#[derive(Default)]
struct Outcome {
    ops: usize,
    violations: usize,
    simulated: Duration,
    /// What to print of it.
    printed: String,
}

/// Runs `histories`, `jobs` at a time, each in a process of its own, and hands their outcomes
/// to `done` in the order of `histories`, each as soon as those before it are done.
fn in_processes(histories: &[Options], jobs: usize, verbose: bool, mut done: impl FnMut(Outcome)) {
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..jobs.min(histories.len()) {
            let (tx, next) = (tx.clone(), &next);
            s.spawn(move || {
                while let Some(opts) = histories.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if tx.send((opts.seed, run_alone(opts, verbose))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let (mut ended, mut turn) = (BTreeMap::new(), histories.iter().map(|o| o.seed));
        let mut due = turn.next();
        for (seed, outcome) in rx {
            ended.insert(seed, outcome);
            while let Some(outcome) = due.and_then(|seed| ended.remove(&seed)) {
                done(outcome);
                due = turn.next();
            }
        }
    });
}

/// Runs the history `opts` in this process, printing its faults if `verbose`, and its violations
/// with the command that replays it.
fn run_here(opts: &Options, verbose: bool) -> Outcome {
    let seed = opts.seed;
    let report = match sim::run(opts) {
        Ok(r) => r,
        Err(e) => return failed(format!("seed {seed}: {e}\n  replay: {}\n", opts.replay())),
    };
    let mut printed = String::new();
    if verbose || !report.violations.is_empty() {
        let _ = writeln!(
            printed,
            "seed {seed}: {} ops, digest {:016x}, faults: {}",
            report.ops,
            report.digest,
            report.faults.join("; ")
        );
    }
    for v in &report.violations {
        let _ = writeln!(printed, "  violation: {v}");
    }
    if !report.violations.is_empty() {
        let _ = writeln!(printed, "  replay: {}", opts.replay());
    }
    Outcome { ops: report.ops, violations: report.violations.len(), simulated: report.sim_time, printed }
}

/// A history that came to no report: one violation, and `printed` says why.
fn failed(printed: String) -> Outcome {
    Outcome { violations: 1, printed, ..Outcome::default() }
}

/// Runs the history `opts` in a child process started with its replay command, passing on what
/// the child prints of it, and reads the child's summary lines.
fn run_alone(opts: &Options, verbose: bool) -> Outcome {
    let replay = opts.replay();
    let mut args: Vec<&str> = replay.split_whitespace().skip(1).collect();
    if verbose {
        args.push("--verbose");
    }
    let child = std::env::current_exe()
        .and_then(|exe| std::process::Command::new(exe).args(&args).env(ALONE, "1").stderr(Stdio::inherit()).output());
    let out = match child {
        Ok(out) => out,
        Err(e) => return failed(format!("seed {}: cannot start its process: {e}\n  replay: {replay}\n", opts.seed)),
    };
    let (mut outcome, mut summary) = (Outcome::default(), false);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(rest) = line.strip_prefix("histories=1 ops=") {
            let mut fields = rest.split(" violations=").map(|n| n.parse::<usize>().ok());
            if let (Some(Some(ops)), Some(Some(violations))) = (fields.next(), fields.next()) {
                (outcome.ops, outcome.violations, summary) = (ops, violations, true);
            }
        } else if let Some(secs) = line.strip_prefix("simulated ").and_then(|l| l.split_once("s in ")) {
            outcome.simulated = secs.0.parse().map(Duration::from_secs_f64).unwrap_or_default();
        } else {
            let _ = writeln!(outcome.printed, "{line}");
        }
    }
    if !summary {
        let _ = writeln!(
            outcome.printed,
            "seed {}: its process ended without a verdict ({})\n  replay: {replay}",
            opts.seed, out.status
        );
        outcome.violations = outcome.violations.max(1);
    }
    outcome
}
