//! Latency summaries for the benchmarks, and what a process uses.

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

/// Process `pid`'s resident memory in KiB and CPU time so far (user and
/// system), from `/proc`.
pub fn process_usage(pid: u32) -> (u64, Duration) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: field 3 on; utime and stime
    // are fields 14 and 15, in clock ticks (100 a second on Linux).
    let fields: Vec<&str> = stat
        .rfind(')')
        .map(|end| stat[end + 2..].split_whitespace().collect())
        .unwrap_or_default();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (rss, Duration::from_millis((tick(11) + tick(12)) * 10))
}
