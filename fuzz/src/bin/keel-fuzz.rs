//! Runs keel's fuzz targets with the stable mutation driver:
//! `keel-fuzz [TARGET|all] [--seconds N] [--seed S]`. A crashing input is written to
//! `fuzz-crash-<target>-<n>.bin` in the current directory and the run fails.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use keel_fuzz::{run_one, Driver, TARGETS};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str, default: u64| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{flag} takes a number")))
            .unwrap_or(default)
    };
    let seconds = value("--seconds", 60);
    let seed = value("--seed", 1);
    let which = args.first().filter(|a| !a.starts_with("--")).map(String::as_str).unwrap_or("all");
    let targets: Vec<_> = TARGETS.iter().filter(|t| which == "all" || t.name == which).collect();
    if targets.is_empty() {
        eprintln!("no target {which:?}; targets: {}", TARGETS.iter().map(|t| t.name).collect::<Vec<_>>().join(", "));
        return ExitCode::from(2);
    }
    // Quiet the default hook: crashes are reported below, with their input.
    std::panic::set_hook(Box::new(|_| {}));
    let mut failed = false;
    for target in targets {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let seeds = (target.seeds)().len();
        let mut driver = Driver::new(target, seed);
        let (mut runs, mut crashes) = (0u64, 0u32);
        while Instant::now() < deadline {
            let input = driver.next_input();
            runs += 1;
            match run_one(target, &input) {
                Ok(decoded) => driver.tell(input, decoded, seeds),
                Err(crash) => {
                    let file = format!("fuzz-crash-{}-{crashes}.bin", target.name);
                    let _ = std::fs::write(&file, &crash.input);
                    eprintln!("{}: {} (input in {file})", target.name, crash.message);
                    crashes += 1;
                    failed = true;
                    if crashes >= 10 {
                        break;
                    }
                }
            }
        }
        println!("{}: {runs} inputs in {seconds} s, {crashes} crashes", target.name);
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
