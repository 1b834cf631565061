//! Latency recording. Each client task keeps its own HDR histogram (microseconds, three
//! significant digits, so every percentile is within 0.1% of the recorded value) and the driver
//! merges them once the load ends: nothing is shared while requests are in flight.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The largest latency kept exactly: an hour. Longer ones are recorded as an hour.
const MAX_US: u64 = 3_600_000_000;

/// A latency histogram in microseconds.
#[derive(Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Self(Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds"))
    }
}

impl Latencies {
    /// Records one latency; anything under a microsecond counts as one.
    pub fn record(&mut self, d: Duration) {
        self.record_us(d.as_micros().min(MAX_US as u128) as u64);
    }

    pub fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us.max(1));
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        self.0.add(&other.0).expect("histograms share their bounds");
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// etcd benchmark's percentiles, the mean, and CDF points for plots.
    pub fn summary(&self) -> Summary {
        let h = &self.0;
        if h.is_empty() {
            return Summary::default();
        }
        let mut cdf: Vec<[f64; 2]> = (0..=99)
            .map(|i| i as f64 / 100.0)
            .chain([0.995, 0.999, 0.9995, 0.9999, 1.0])
            .map(|q| [h.value_at_quantile(q) as f64, q])
            .collect();
        cdf.dedup_by(|a, b| a[0] == b[0] && a[1] == b[1]);
        Summary {
            count: h.len(),
            mean_us: h.mean(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            cdf,
        }
    }
}

/// A latency distribution as the reports carry it (all times in microseconds).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// `[latency_us, quantile]` pairs, quantile ascending from 0 to 1.
    pub cdf: Vec<[f64; 2]>,
}

/// Formats microseconds for people: `850µs`, `12.3ms`, `1.20s`.
pub fn fmt_us(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.0}µs")
    } else if us < 1_000_000.0 {
        format!("{:.1}ms", us / 1_000.0)
    } else {
        format!("{:.2}s", us / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut a = Latencies::default();
        let mut b = Latencies::default();
        for us in 1..=500 {
            a.record_us(us);
        }
        for us in 501..=1000 {
            b.record(Duration::from_micros(us));
        }
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.count, 1000);
        assert!(s.p50_us.abs_diff(500) <= 1, "{s:?}");
        assert!(s.p99_us.abs_diff(990) <= 1, "{s:?}");
        assert!(s.max_us.abs_diff(1000) <= 1, "{s:?}");
        assert_eq!(s.cdf.last().unwrap()[1], 1.0);
        assert!(s.cdf.windows(2).all(|w| w[0][0] <= w[1][0] && w[0][1] <= w[1][1]));
    }

    #[test]
    fn human_units() {
        assert_eq!(fmt_us(850.0), "850µs");
        assert_eq!(fmt_us(12_345.0), "12.3ms");
        assert_eq!(fmt_us(1_200_000.0), "1.20s");
    }
}
