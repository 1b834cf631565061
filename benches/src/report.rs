//! What one workload run produced, as JSON (machine-readable, kept by `compare`) and as the short
//! text summary the subcommands print.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::hist::{fmt_us, Summary};

/// The result of one run of one workload against one set of endpoints.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// `put`, `range`, `txn-put`, `lease-keepalive`, `watch`, ...
    pub workload: String,
    /// The workload's parameters as given.
    pub params: serde_json::Value,
    /// Operations answered successfully (for watch: events delivered).
    pub ops: u64,
    /// Operations answered with an error; they are not in the latency histogram.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Wall time of the measured phase.
    pub elapsed_s: f64,
    /// `ops / elapsed_s`.
    pub ops_per_s: f64,
    /// Per-operation latency (for watch: delivery latency from the write's timestamp).
    pub latency: Summary,
    /// Workload-specific figures (watch completeness, CAS conflicts, RSS, ...).
    pub extra: BTreeMap<String, f64>,
}

impl Report {
    /// A few lines in the spirit of etcd's `benchmark` summary.
    pub fn text(&self) -> String {
        let l = &self.latency;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: {} ops in {:.2}s = {:.1} ops/s, {} errors",
            self.workload, self.ops, self.elapsed_s, self.ops_per_s, self.errors
        );
        if l.count > 0 {
            let _ = writeln!(
                s,
                "  latency: mean {} p50 {} p90 {} p99 {} p99.9 {} max {}",
                fmt_us(l.mean_us),
                fmt_us(l.p50_us as f64),
                fmt_us(l.p90_us as f64),
                fmt_us(l.p99_us as f64),
                fmt_us(l.p999_us as f64),
                fmt_us(l.max_us as f64)
            );
        }
        if !self.extra.is_empty() {
            let parts: Vec<String> = self.extra.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(s, "  {}", parts.join(" "));
        }
        if let Some(e) = &self.first_error {
            let _ = writeln!(s, "  first error: {e}");
        }
        s
    }
}
