//! What the kernel says about the processes of a run: the resident set (`VmRSS` in
//! `/proc/<pid>/status`) of server processes, read once it has stopped moving; the CPU time
//! server processes used; and how much CPU everything else on the machine used meanwhile (a
//! benchmark on a shared machine must say when it was not alone).

use std::time::Duration;

use anyhow::{Context, Result};

/// The resident set of `pid`, KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS line")?;
    Ok(line.split_whitespace().nth(1).context("bad VmRSS line")?.parse()?)
}

/// The summed resident set of `pids` once it changes by less than 64 KiB per half second (the
/// allocator and runtime settle after a burst), or after ten seconds.
pub async fn settled_rss_kib(pids: &[u32]) -> Result<u64> {
    let sum = || pids.iter().map(|&p| rss_kib(p)).sum::<Result<u64>>();
    let mut last = sum()?;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = sum()?;
        if now.abs_diff(last) < 64 {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// Clock ticks per second of `/proc` CPU times (USER_HZ; 100 on Linux).
fn ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// Busy CPU ticks of the whole machine (`/proc/stat`: all but idle and iowait).
fn machine_busy_ticks() -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().context("empty /proc/stat")?;
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    anyhow::ensure!(f.len() >= 8, "short /proc/stat line");
    Ok(f[0] + f[1] + f[2] + f[5] + f[6] + f[7])
}

/// CPU ticks (user + system, all threads) of `pid`; 0 once it is gone.
fn process_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// CPU time (user + system, all threads) `pids` have used, in seconds; a process that is gone
/// counts 0.
pub fn cpu_seconds(pids: &[u32]) -> f64 {
    ticks_of(pids) as f64 / ticks_per_s()
}

/// CPU ticks of `pids` together ([`process_ticks`]).
fn ticks_of(pids: &[u32]) -> u64 {
    pids.iter().map(|&p| process_ticks(p)).sum()
}

/// A snapshot for [`Background::cores_since`].
pub struct Background {
    at: std::time::Instant,
    busy: u64,
    ours: u64,
}

impl Background {
    /// Now, counting this process and `pids` as ours.
    pub fn now(pids: &[u32]) -> Result<Background> {
        let ours = process_ticks(std::process::id()) + ticks_of(pids);
        Ok(Background { at: std::time::Instant::now(), busy: machine_busy_ticks()?, ours })
    }

    /// CPU cores the rest of the machine kept busy on average since `self` (same `pids`).
    pub fn cores_since(&self, pids: &[u32]) -> Result<f64> {
        let end = Background::now(pids)?;
        let others = (end.busy - self.busy).saturating_sub(end.ours.saturating_sub(self.ours));
        Ok(others as f64 / ticks_per_s() / end.at.duration_since(self.at).as_secs_f64().max(1e-3))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_our_own_resident_set() {
        assert!(super::rss_kib(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn background_load_is_a_number_of_cores() {
        let b = super::Background::now(&[]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let cores = b.cores_since(&[]).unwrap();
        let max = std::thread::available_parallelism().unwrap().get() as f64;
        assert!((0.0..=max + 0.5).contains(&cores), "{cores}");
    }
}
