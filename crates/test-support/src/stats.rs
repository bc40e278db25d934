//! Latency summaries for the benchmarks.

use std::time::Duration;

/// One line: `label: p50 .. p99 .. max .. (n=..)`, in microseconds.
pub fn percentiles(label: &str, mut samples: Vec<Duration>) -> String {
    samples.sort();
    if samples.is_empty() {
        return format!("{label}: no samples");
    }
    let at =
        |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e6;
    format!(
        "{label}: p50 {:>7.1} us  p99 {:>7.1} us  max {:>7.1} us  (n={})",
        at(0.5),
        at(0.99),
        at(1.0),
        samples.len()
    )
}
