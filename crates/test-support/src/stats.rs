//! Latency summaries for the benchmarks.

use std::time::Duration;

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
