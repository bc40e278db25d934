//! Latency summaries for the benchmarks.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// One line: `label: p50 .. p99 .. max .. (n=..)`, in microseconds.
pub fn percentiles(label: &str, samples: Vec<Duration>) -> String {
    summary(label, samples, "us", 1e6)
}

/// [`percentiles`] in milliseconds, for what takes that long.
pub fn percentiles_ms(label: &str, samples: Vec<Duration>) -> String {
    summary(label, samples, "ms", 1e3)
}

fn summary(label: &str, mut samples: Vec<Duration>, unit: &str, per_second: f64) -> String {
    samples.sort();
    if samples.is_empty() {
        return format!("{label}: no samples");
    }
    let at = |p: f64| {
        samples[((samples.len() - 1) as f64 * p).round() as usize].as_secs_f64() * per_second
    };
    format!(
        "{label}: p50 {:>7.1} {unit}  p99 {:>7.1} {unit}  max {:>7.1} {unit}  (n={})",
        at(0.5),
        at(0.99),
        at(1.0),
        samples.len()
    )
}

/// For each name of `sent` (when its timing started), the time until
/// `ready` says it was done.
pub fn latencies(
    sent: &BTreeMap<String, SystemTime>,
    ready: &BTreeMap<String, SystemTime>,
) -> Vec<Duration> {
    sent.iter()
        .map(|(name, at)| ready[name].duration_since(*at).unwrap_or_default())
        .collect()
}
