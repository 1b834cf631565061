//! A one-line progress display on stderr for long runs: what has been done, the rate over the
//! last half second, and elapsed against the goal. Shown only when stderr is a terminal, so logs
//! and CI output stay clean. Counting is one relaxed atomic add per operation.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

/// A running progress line. Stop it with [`Progress::finish`] (or drop it).
pub struct Progress {
    done: Arc<AtomicU64>,
    task: Option<JoinHandle<()>>,
}

/// What the line measures progress against.
#[derive(Clone, Copy, Debug)]
pub enum Goal {
    Count(u64),
    Time(Duration),
    Open,
}

impl Progress {
    /// Starts the display: `label` names the phase, `unit` what is counted (ops, events, ...).
    pub fn start(label: &str, unit: &'static str, goal: Goal) -> Progress {
        let done = Arc::new(AtomicU64::new(0));
        let task = std::io::stderr().is_terminal().then(|| {
            let (done, label) = (done.clone(), label.to_string());
            tokio::spawn(async move {
                let start = Instant::now();
                let (mut last, mut last_at) = (0u64, start);
                let mut tick = tokio::time::interval(Duration::from_millis(500));
                loop {
                    tick.tick().await;
                    let now_done = done.load(Ordering::Relaxed);
                    let rate = now_done.saturating_sub(last) as f64 / last_at.elapsed().as_secs_f64().max(1e-3);
                    (last, last_at) = (now_done, Instant::now());
                    let goal = match goal {
                        Goal::Count(n) => format!(" / {n} ({:.0}%)", 100.0 * now_done as f64 / n.max(1) as f64),
                        Goal::Time(d) => format!(" ({:.0}s / {:.0}s)", start.elapsed().as_secs_f64(), d.as_secs_f64()),
                        Goal::Open => format!(" ({:.0}s)", start.elapsed().as_secs_f64()),
                    };
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r\x1b[2K{label}: {now_done} {unit}{goal}, {rate:.0}/s");
                    let _ = err.flush();
                }
            })
        });
        Progress { done, task }
    }

    /// The counter to add to.
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.done.clone()
    }

    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Stops the display and clears its line.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}
