//! `keel-chaos sim --seeds N [--start S]`: runs N seeded histories and prints, as its last line,
//! `histories=N ops=M violations=V`; exits non-zero on violations. A failing seed prints the
//! command that replays it.

use std::process::ExitCode;
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
    } = Cli::parse().command;
    let faults: Vec<Fault> = match nemesis.iter().map(|n| n.parse()).collect() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let began = Instant::now();
    let (mut ops, mut violations, mut simulated) = (0, 0, Duration::ZERO);
    for seed in start..start + seeds {
        let default = Options::new(seed);
        let opts = Options {
            members: members.unwrap_or(default.members),
            duration: Duration::from_secs(seconds),
            compact_one_in: compact_one_in.unwrap_or(default.compact_one_in),
            nemesis: faults.clone(),
            rocksdb,
            leasers,
            snapshot_every: snapshot_every.or(default.snapshot_every),
            plant: plant.clone(),
            ..default
        };
        let report = match sim::run(&opts) {
            Ok(r) => r,
            Err(e) => {
                println!("seed {seed}: {e}\n  replay: {}", opts.replay());
                violations += 1;
                continue;
            }
        };
        ops += report.ops;
        simulated += report.sim_time;
        if verbose || !report.violations.is_empty() {
            println!("seed {seed}: {} ops, faults: {}", report.ops, report.faults.join("; "));
        }
        if !report.violations.is_empty() {
            violations += report.violations.len();
            for v in &report.violations {
                println!("  violation: {v}");
            }
            println!("  replay: {}", opts.replay());
        }
    }
    println!("simulated {simulated:?} in {:?}", began.elapsed());
    println!("histories={seeds} ops={ops} violations={violations}");
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
