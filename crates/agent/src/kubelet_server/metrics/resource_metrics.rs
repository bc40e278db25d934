//! `/metrics/resource`: the kubelet's resource metrics, what the metrics
//! server scrapes for `kubectl top` and the autoscalers. The node's CPU
//! time and memory working set from its root cgroup, each running
//! container's and each pod's from the runtime's measurements, every
//! sample with the time it was taken, in the Prometheus text format as
//! the kubelet's registry writes it (families sorted by name, a family
//! without samples left out, numbers as Go prints them). A pod's usage is
//! its sandbox's when the runtime measures it, else its running
//! containers' added up (containerd measures no sandbox without a cgroup
//! parent); its swap is always its containers'. A runtime that cannot be
//! asked makes `resource_scrape_error` (and the older `scrape_error`) 1,
//! as in the kubelet.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use http::StatusCode;

use super::node_usage::node_usage;
use crate::kubelet_server::reply::{self, Reply};
use crate::kubelet_server::state::State;
use crate::runtime::{ContainerState, Sample};

/// The content type of the Prometheus text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores";

/// A family: its name, type and the kubelet's help (with its stability).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

const NODE_CPU: Family = Family {
    name: "node_cpu_usage_seconds_total",
    kind: "counter",
    help: "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
};
const NODE_MEMORY: Family = Family {
    name: "node_memory_working_set_bytes",
    kind: "gauge",
    help: "[STABLE] Current working set of the node in bytes",
};
const CONTAINER_CPU: Family = Family {
    name: "container_cpu_usage_seconds_total",
    kind: "counter",
    help: "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
};
const CONTAINER_MEMORY: Family = Family {
    name: "container_memory_working_set_bytes",
    kind: "gauge",
    help: "[STABLE] Current working set of the container in bytes",
};
const CONTAINER_SWAP: Family = Family {
    name: "container_swap_usage_bytes",
    kind: "gauge",
    help: "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems",
};
const CONTAINER_SWAP_LIMIT: Family = Family {
    name: "container_swap_limit_bytes",
    kind: "gauge",
    help: "[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems",
};
const NODE_SWAP: Family = Family {
    name: "node_swap_usage_bytes",
    kind: "gauge",
    help: "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems",
};
const POD_SWAP: Family = Family {
    name: "pod_swap_usage_bytes",
    kind: "gauge",
    help: "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
};
const CONTAINER_START: Family = Family {
    name: "container_start_time_seconds",
    kind: "gauge",
    help: "[STABLE] Start time of the container since unix epoch in seconds",
};
const POD_CPU: Family = Family {
    name: "pod_cpu_usage_seconds_total",
    kind: "counter",
    help: "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
};
const POD_MEMORY: Family = Family {
    name: "pod_memory_working_set_bytes",
    kind: "gauge",
    help: "[STABLE] Current working set of the pod in bytes",
};
const SCRAPE_ERROR: Family = Family {
    name: "resource_scrape_error",
    kind: "gauge",
    help: "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
};

/// The same, under the name the kubelet deprecated in 1.29 and still
/// writes.
const OLD_SCRAPE_ERROR: Family = Family {
    name: "scrape_error",
    kind: "gauge",
    help: "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise",
};

/// The samples of the families, by family name.
#[derive(Default)]
struct Samples {
    families: BTreeMap<&'static str, (&'static Family, Vec<String>)>,
}

impl Samples {
    fn add(
        &mut self,
        family: &'static Family,
        labels: &[(&str, &str)],
        value: f64,
        at: Option<SystemTime>,
    ) {
        let mut line = family.name.to_string();
        if !labels.is_empty() {
            let mut sorted = labels.to_vec();
            sorted.sort_by_key(|(name, _)| *name);
            let pairs: Vec<String> = sorted
                .iter()
                .map(|(name, value)| format!("{name}=\"{}\"", escape(value)))
                .collect();
            let _ = write!(line, "{{{}}}", pairs.join(","));
        }
        let _ = write!(line, " {}", go_float(value));
        if let Some(millis) = at.and_then(|at| at.duration_since(UNIX_EPOCH).ok()) {
            let _ = write!(line, " {}", millis.as_millis());
        }
        self.families
            .entry(family.name)
            .or_insert_with(|| (family, Vec::new()))
            .1
            .push(line);
    }

    fn render(mut self) -> String {
        let mut out = String::new();
        for (family, lines) in self.families.values_mut() {
            lines.sort();
            let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
            let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
            for line in lines.iter() {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }
}

/// Serves `/metrics/resource`.
pub(crate) async fn serve(state: &State) -> Reply {
    let mut samples = Samples::default();
    let node = node_usage();
    if let Some(Sample { at, value }) = node.cpu {
        samples.add(&NODE_CPU, &[], seconds(value), Some(at));
    }
    if let Some(Sample { at, value }) = node.memory_working_set {
        samples.add(&NODE_MEMORY, &[], value as f64, Some(at));
    }
    if let Some(Sample { at, value }) = node.swap {
        samples.add(&NODE_SWAP, &[], value as f64, Some(at));
    }
    let failed = match pod_samples(state, &mut samples).await {
        Ok(()) => 0.0,
        Err(e) => {
            tracing::warn!(error = %e, "kubelet server: resource metrics: the runtime could not be asked");
            1.0
        }
    };
    samples.add(&SCRAPE_ERROR, &[], failed, None);
    samples.add(&OLD_SCRAPE_ERROR, &[], failed, None);
    reply::bytes(StatusCode::OK, CONTENT_TYPE, samples.render().into_bytes())
}

/// A pod's usage, from its sandbox or added up from its containers.
#[derive(Default)]
struct PodUsage {
    namespace: String,
    name: String,
    cpu: Option<Sample>,
    memory_working_set: Option<Sample>,
    swap: Option<Sample>,
}

/// `sample` added to `total`, taken at the later of the two times.
fn add_up(total: &mut Option<Sample>, sample: Option<Sample>) {
    if let Some(sample) = sample {
        let sum = total.get_or_insert(Sample {
            at: sample.at,
            value: 0,
        });
        sum.value = sum.value.saturating_add(sample.value);
        sum.at = sum.at.max(sample.at);
    }
}

/// The running containers' and their pods' samples.
async fn pod_samples(
    state: &State,
    samples: &mut Samples,
) -> Result<(), crate::runtime::RuntimeError> {
    let containers = state.runtime.containers().await?;
    let running: BTreeMap<&str, SystemTime> = containers
        .iter()
        .filter(|c| c.state == ContainerState::Running)
        .map(|c| (c.id.as_str(), c.created_at))
        .collect();
    let stats = state.runtime.container_stats().await?;
    let mut pods: BTreeMap<String, PodUsage> = BTreeMap::new();
    for container in stats.iter().filter(|c| !c.pod.uid.is_empty()) {
        let Some(started) = running.get(container.id.as_str()) else {
            continue;
        };
        let labels = [
            ("container", container.name.as_str()),
            ("namespace", container.pod.namespace.as_str()),
            ("pod", container.pod.name.as_str()),
        ];
        if let Ok(start) = started.duration_since(UNIX_EPOCH) {
            samples.add(&CONTAINER_START, &labels, start.as_secs_f64(), None);
        }
        if let Some(Sample { at, value }) = container.cpu {
            samples.add(&CONTAINER_CPU, &labels, seconds(value), Some(at));
        }
        if let Some(Sample { at, value }) = container.memory_working_set {
            samples.add(&CONTAINER_MEMORY, &labels, value as f64, Some(at));
        }
        if let Some(Sample { at, value }) = container.swap {
            samples.add(&CONTAINER_SWAP, &labels, value as f64, Some(at));
        }
        if let Some(Sample { at, value }) = container.swap_available {
            let used = container.swap.map_or(0, |swap| swap.value);
            let limit = value.saturating_add(used) as f64;
            samples.add(&CONTAINER_SWAP_LIMIT, &labels, limit, Some(at));
        }
        let pod = pods
            .entry(container.pod.uid.clone())
            .or_insert_with(|| PodUsage {
                namespace: container.pod.namespace.clone(),
                name: container.pod.name.clone(),
                ..PodUsage::default()
            });
        add_up(&mut pod.cpu, container.cpu);
        add_up(&mut pod.memory_working_set, container.memory_working_set);
        add_up(&mut pod.swap, container.swap);
    }
    // The sandbox's measurement is the pod's own cgroup, the pause
    // process included; a runtime that has none for a sandbox without a
    // cgroup parent leaves the pod its containers' sum.
    match state.runtime.sandbox_stats().await {
        Ok(sandboxes) => {
            for sandbox in sandboxes {
                if let Some(pod) = pods.get_mut(&sandbox.pod.uid) {
                    pod.cpu = sandbox.cpu.or(pod.cpu);
                    pod.memory_working_set = sandbox.memory_working_set.or(pod.memory_working_set);
                }
            }
        }
        Err(e) => {
            tracing::debug!(error = %e, "resource metrics: no sandbox measurements; the pods' are their containers' sums");
        }
    }
    for pod in pods.values() {
        let labels = [
            ("namespace", pod.namespace.as_str()),
            ("pod", pod.name.as_str()),
        ];
        if let Some(Sample { at, value }) = pod.cpu {
            samples.add(&POD_CPU, &labels, seconds(value), Some(at));
        }
        if let Some(Sample { at, value }) = pod.memory_working_set {
            samples.add(&POD_MEMORY, &labels, value as f64, Some(at));
        }
        if let Some(Sample { at, value }) = pod.swap {
            samples.add(&POD_SWAP, &labels, value as f64, Some(at));
        }
    }
    Ok(())
}

/// Nanoseconds as seconds.
fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// A label value escaped as the text format escapes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `value` as Go's `strconv.FormatFloat(value, 'g', -1, 64)` writes it,
/// as the Prometheus text format does: the shortest digits that read back
/// the same, with an exponent (`e+06`, at least two digits) when it is
/// below -4 or at least 6.
fn go_float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if value == 0.0 {
        return "0".to_string();
    }
    let scientific = format!("{value:e}");
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        return scientific;
    };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_go_writes_them() {
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(1.915387904e9), "1.915387904e+09");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(1.7333184e9), "1.7333184e+09");
    }

    #[test]
    fn a_pods_sum_adds_its_containers_at_the_latest_time() {
        let at = |ms| UNIX_EPOCH + std::time::Duration::from_millis(ms);
        let mut total = None;
        add_up(&mut total, None);
        assert_eq!(total, None, "nothing measured: no sum");
        add_up(
            &mut total,
            Some(Sample {
                at: at(20),
                value: 5,
            }),
        );
        add_up(&mut total, None);
        add_up(
            &mut total,
            Some(Sample {
                at: at(10),
                value: 7,
            }),
        );
        assert_eq!(
            total,
            Some(Sample {
                at: at(20),
                value: 12
            })
        );
    }

    #[test]
    fn families_are_sorted_with_their_help_and_samples_with_sorted_labels() {
        let mut samples = Samples::default();
        let at = UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123);
        samples.add(
            &CONTAINER_MEMORY,
            &[("pod", "p"), ("namespace", "n\"s"), ("container", "c")],
            2048.0,
            Some(at),
        );
        samples.add(&SCRAPE_ERROR, &[], 0.0, None);
        samples.add(&NODE_CPU, &[], 12.5, Some(at));
        assert_eq!(
            samples.render(),
            "# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes\n\
             # TYPE container_memory_working_set_bytes gauge\n\
             container_memory_working_set_bytes{container=\"c\",namespace=\"n\\\"s\",pod=\"p\"} 2048 1700000000123\n\
             # HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds\n\
             # TYPE node_cpu_usage_seconds_total counter\n\
             node_cpu_usage_seconds_total 12.5 1700000000123\n\
             # HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n\
             # TYPE resource_scrape_error gauge\n\
             resource_scrape_error 0\n"
        );
    }
}
