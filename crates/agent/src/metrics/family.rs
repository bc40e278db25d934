//! Counter and histogram families keyed by label values, rendered in the
//! Prometheus text exposition format (version 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The Prometheus client default buckets, in seconds.
pub(crate) const DEFAULT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Escapes a label value: backslash, double quote and newline.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `{a="x",b="y"}` for `names` and `values`, plus an optional extra pair.
pub(crate) fn labels(names: &[&str], values: &[String], extra: Option<(&str, &str)>) -> String {
    let mut pairs: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v)))
        .collect();
    if let Some((n, v)) = extra {
        pairs.push(format!("{n}=\"{}\"", escape(v)));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

/// A counter per combination of label values. Cheap to clone.
#[derive(Clone)]
pub(crate) struct CounterVec {
    name: &'static str,
    help: &'static str,
    label_names: &'static [&'static str],
    values: Arc<Mutex<BTreeMap<Vec<String>, u64>>>,
}

impl CounterVec {
    /// A family with no samples yet.
    pub(crate) fn new(
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            help,
            label_names,
            values: Arc::default(),
        }
    }

    /// Adds one for `label_values` (in the order of the label names).
    pub(crate) fn inc(&self, label_values: &[&str]) {
        let key = label_values.iter().map(|s| s.to_string()).collect();
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        *values.entry(key).or_default() += 1;
    }

    /// The current value for `label_values`.
    pub(crate) fn get(&self, label_values: &[&str]) -> u64 {
        let key: Vec<String> = label_values.iter().map(|s| s.to_string()).collect();
        let values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        values.get(&key).copied().unwrap_or(0)
    }

    /// Appends the family to `out`.
    pub(crate) fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} counter", self.name);
        let values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        for (key, value) in values.iter() {
            let _ = writeln!(
                out,
                "{}{} {value}",
                self.name,
                labels(self.label_names, key, None)
            );
        }
    }
}

#[derive(Clone, Default)]
struct Histogram {
    /// Cumulative counts per bucket bound.
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

/// A histogram per combination of label values. Cheap to clone.
#[derive(Clone)]
pub(crate) struct HistogramVec {
    name: &'static str,
    help: &'static str,
    label_names: &'static [&'static str],
    bounds: &'static [f64],
    values: Arc<Mutex<BTreeMap<Vec<String>, Histogram>>>,
}

impl HistogramVec {
    /// A family with `bounds` as bucket upper bounds (seconds).
    pub(crate) fn new(
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
        bounds: &'static [f64],
    ) -> Self {
        Self {
            name,
            help,
            label_names,
            bounds,
            values: Arc::default(),
        }
    }

    /// Records one duration for `label_values`.
    pub(crate) fn observe(&self, label_values: &[&str], duration: Duration) {
        let seconds = duration.as_secs_f64();
        let key = label_values.iter().map(|s| s.to_string()).collect();
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        let h = values.entry(key).or_insert_with(|| Histogram {
            buckets: vec![0; self.bounds.len()],
            ..Default::default()
        });
        for (count, bound) in h.buckets.iter_mut().zip(self.bounds) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        h.sum += seconds;
        h.count += 1;
    }

    /// Appends the family to `out`.
    pub(crate) fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} histogram", self.name);
        let values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        for (key, h) in values.iter() {
            for (count, bound) in h.buckets.iter().zip(self.bounds) {
                let le = bound.to_string();
                let _ = writeln!(
                    out,
                    "{}_bucket{} {count}",
                    self.name,
                    labels(self.label_names, key, Some(("le", &le)))
                );
            }
            let _ = writeln!(
                out,
                "{}_bucket{} {}",
                self.name,
                labels(self.label_names, key, Some(("le", "+Inf"))),
                h.count
            );
            let plain = labels(self.label_names, key, None);
            let _ = writeln!(out, "{}_sum{plain} {}", self.name, h.sum);
            let _ = writeln!(out, "{}_count{plain} {}", self.name, h.count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        let h = HistogramVec::new("op_seconds", "Op time.", &["op"], &[0.1, 1.0]);
        h.observe(&["a\"b"], Duration::from_millis(50));
        h.observe(&["a\"b"], Duration::from_millis(500));
        let mut out = String::new();
        h.render(&mut out);
        assert_eq!(
            out,
            "# HELP op_seconds Op time.\n# TYPE op_seconds histogram\n\
             op_seconds_bucket{op=\"a\\\"b\",le=\"0.1\"} 1\n\
             op_seconds_bucket{op=\"a\\\"b\",le=\"1\"} 2\n\
             op_seconds_bucket{op=\"a\\\"b\",le=\"+Inf\"} 2\n\
             op_seconds_sum{op=\"a\\\"b\"} 0.55\n\
             op_seconds_count{op=\"a\\\"b\"} 2\n"
        );
    }

    #[test]
    fn counters_count_per_label_set() {
        let c = CounterVec::new("reg_total", "Registrations.", &["resource_name"]);
        c.inc(&["x"]);
        c.inc(&["x"]);
        c.inc(&["y"]);
        assert_eq!(c.get(&["x"]), 2);
        let mut out = String::new();
        c.render(&mut out);
        assert!(out.contains("reg_total{resource_name=\"x\"} 2\n"), "{out}");
        assert!(out.contains("reg_total{resource_name=\"y\"} 1\n"), "{out}");
    }
}
