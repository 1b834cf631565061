//! `keel-chaos sim --seeds N [--start S]`: runs N seeded histories and prints, as its last line,
//! `histories=N ops=M violations=V`; exits non-zero on violations. A failing seed prints the
//! command that replays it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use keel_chaos::sim::{self, Options};

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
        /// Members per cluster.
        #[arg(long, default_value_t = 3)]
        members: usize,
        /// Simulated seconds the clients run per history.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Print every history's faults.
        #[arg(long)]
        verbose: bool,
        /// Plant a bug in the store (ack-before-commit, stale-read, lost-on-crash, drop-watch-event).
        #[arg(long)]
        plant: Option<String>,
    },
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    }
    let Command::Sim { seeds, start, members, seconds, verbose, plant } = Cli::parse().command;
    let replay = |seed: u64| {
        let plant = plant.as_ref().map(|p| format!(" --plant {p}")).unwrap_or_default();
        format!("keel-chaos sim --seeds 1 --start {seed} --members {members} --seconds {seconds}{plant}")
    };
    let began = Instant::now();
    let (mut ops, mut violations, mut simulated) = (0, 0, Duration::ZERO);
    for seed in start..start + seeds {
        let opts =
            Options { members, duration: Duration::from_secs(seconds), plant: plant.clone(), ..Options::new(seed) };
        let report = match sim::run(&opts) {
            Ok(r) => r,
            Err(e) => {
                println!("seed {seed}: {e}\n  replay: {}", replay(seed));
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
            println!("  replay: {}", replay(seed));
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
