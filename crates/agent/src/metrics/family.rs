//! Counter and histogram families keyed by label values, on
//! `prometheus-client`: each part of the agent keeps its families and
//! registers them in the [`Registry`] a scrape encodes (the agent's own, or
//! an embedder's).
//!
//! A few of the kubelet's counters have no `_total` suffix
//! (`kubelet_pod_resources_endpoint_errors_list`...). `prometheus-client`
//! names every counter `<name>_total`, so those are registered as
//! `untyped` under the kubelet's exact name: a dashboard or alert written
//! for the kubelet finds them, and PromQL's `rate` works on them as on any
//! counter.

use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

/// The Prometheus client default buckets, in seconds.
pub(crate) const DEFAULT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A family's labels: each name with its value.
type Labels = Vec<(&'static str, String)>;

fn labels(names: &'static [&'static str], values: &[&str]) -> Labels {
    names
        .iter()
        .zip(values)
        .map(|(name, value)| (*name, (*value).to_string()))
        .collect()
}

/// The help as the registry takes it: it adds the full stop itself.
fn help(help: &'static str) -> &'static str {
    help.strip_suffix('.').unwrap_or(help)
}

/// A counter per combination of label values. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct CounterVec {
    name: &'static str,
    help: &'static str,
    label_names: &'static [&'static str],
    counters: Counters,
}

/// The counters of a family, as they are exposed.
#[derive(Clone, Debug)]
enum Counters {
    /// `<name>_total`, typed `counter`.
    Total(Family<Labels, Counter>),
    /// A kubelet name without `_total`, typed `untyped`.
    Untyped(Family<Labels, UntypedCounter>),
}

impl CounterVec {
    /// A family with no samples yet, named `name` as it is exposed (with
    /// `_total` when it has it).
    pub(crate) fn new(
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
    ) -> Self {
        let counters = match name.strip_suffix("_total") {
            Some(_) => Counters::Total(Family::default()),
            None => Counters::Untyped(Family::default()),
        };
        Self {
            name,
            help,
            label_names,
            counters,
        }
    }

    /// Adds one for `label_values` (in the order of the label names).
    pub(crate) fn inc(&self, label_values: &[&str]) {
        let labels = labels(self.label_names, label_values);
        match &self.counters {
            Counters::Total(family) => {
                family.get_or_create(&labels).inc();
            }
            Counters::Untyped(family) => {
                family.get_or_create(&labels).0.inc();
            }
        }
    }

    /// The current value for `label_values`.
    pub(crate) fn get(&self, label_values: &[&str]) -> u64 {
        let labels = labels(self.label_names, label_values);
        match &self.counters {
            Counters::Total(family) => family.get(&labels).map_or(0, |c| c.get()),
            Counters::Untyped(family) => family.get(&labels).map_or(0, |c| c.0.get()),
        }
    }

    /// Removes the counter of `label_values`, if any.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn remove(&self, label_values: &[&str]) {
        let labels = labels(self.label_names, label_values);
        match &self.counters {
            Counters::Total(family) => {
                family.remove(&labels);
            }
            Counters::Untyped(family) => {
                family.remove(&labels);
            }
        }
    }

    /// Registers the family in `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        match &self.counters {
            // The registry adds the suffix back.
            Counters::Total(family) => registry.register(
                self.name.strip_suffix("_total").unwrap_or(self.name),
                help(self.help),
                family.clone(),
            ),
            Counters::Untyped(family) => {
                registry.register(self.name, help(self.help), family.clone());
            }
        }
    }
}

/// A counter exposed as `untyped`, under its name as given.
#[derive(Clone, Debug, Default)]
pub(crate) struct UntypedCounter(Counter);

impl TypedMetric for UntypedCounter {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for UntypedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.0.get())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

/// How a family makes each new histogram: with its buckets.
#[derive(Clone, Debug)]
struct Buckets(&'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// A histogram of durations per combination of label values. Cheap to
/// clone.
#[derive(Clone, Debug)]
pub(crate) struct HistogramVec {
    name: &'static str,
    help: &'static str,
    label_names: &'static [&'static str],
    family: Family<Labels, Histogram, Buckets>,
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
            family: Family::new_with_constructor(Buckets(bounds)),
        }
    }

    /// Records one duration for `label_values`.
    pub(crate) fn observe(&self, label_values: &[&str], duration: Duration) {
        self.family
            .get_or_create(&labels(self.label_names, label_values))
            .observe(duration.as_secs_f64());
    }

    /// Removes the histogram of `label_values`, if any.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn remove(&self, label_values: &[&str]) {
        self.family.remove(&labels(self.label_names, label_values));
    }

    /// Registers the family in `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(self.name, help(self.help), self.family.clone());
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::prometheus_text::encode;

    use super::*;

    fn text(register: impl FnOnce(&mut Registry)) -> String {
        let mut registry = Registry::default();
        register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        let h = HistogramVec::new("op_seconds", "Op time.", &["op"], &[0.1, 1.0]);
        h.observe(&["a\"b"], Duration::from_millis(50));
        h.observe(&["a\"b"], Duration::from_millis(500));
        let out = text(|r| h.register(r));
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
    fn counters_count_per_label_set_with_their_names_as_given() {
        let c = CounterVec::new("reg_total", "Registrations.", &["resource_name"]);
        c.inc(&["x"]);
        c.inc(&["x"]);
        c.inc(&["y"]);
        assert_eq!(c.get(&["x"]), 2);
        let out = text(|r| c.register(r));
        assert!(out.contains("# TYPE reg_total counter\n"), "{out}");
        assert!(out.contains("reg_total{resource_name=\"x\"} 2\n"), "{out}");
        assert!(out.contains("reg_total{resource_name=\"y\"} 1\n"), "{out}");

        let plain = CounterVec::new("errors_list", "Errors.", &["v"]);
        plain.inc(&["1"]);
        let out = text(|r| plain.register(r));
        assert!(out.contains("# TYPE errors_list untyped\n"), "{out}");
        assert!(out.contains("errors_list{v=\"1\"} 1\n"), "{out}");
        assert_eq!(plain.get(&["1"]), 1);
    }

    #[test]
    fn a_counter_without_labels_is_one_sample() {
        let c = CounterVec::new("recreations_total", "Recreations.", &[]);
        c.inc(&[]);
        assert!(text(|r| c.register(r)).contains("\nrecreations_total 1\n"));
    }
}
