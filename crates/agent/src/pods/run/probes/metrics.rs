//! The probes' metrics, as the kubelet's prober keeps them and serves
//! them on `/metrics/probes`: `prober_probe_total` counts each probe run
//! that gave a result, by probe type (`Liveness`, `Readiness`, `Startup`),
//! result (`successful`, `failed`), container, pod, namespace and pod UID;
//! `prober_probe_duration_seconds` times the successful ones, by probe
//! type, container, pod and namespace (its one bucket `+Inf`, as the
//! kubelet's). A run that erred counts nowhere
//! (the kubelet throws its result away). A probe's series go with it:
//! when its pod stops being probed, they are removed.

use std::time::Duration;

use super::spec::ProbeKind;
use crate::metrics::{CounterVec, HistogramVec, MetricsSource};
use crate::pods::pod::PodRef;

/// The `result` of a successful probe.
const SUCCESSFUL: &str = "successful";
/// The `result` of a failed probe.
const FAILED: &str = "failed";
/// The `result` of a probe that gave neither (kept with the kubelet's
/// others, so that a removal finds it).
const UNKNOWN: &str = "unknown";

/// The probes' metrics. Cheap to clone: every clone counts into the same
/// families.
#[derive(Clone)]
pub(crate) struct ProberMetrics {
    results: CounterVec,
    durations: HistogramVec,
}

impl std::fmt::Debug for ProberMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProberMetrics").finish_non_exhaustive()
    }
}

impl Default for ProberMetrics {
    fn default() -> Self {
        Self {
            results: CounterVec::new(
                "prober_probe_total",
                "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
                &[
                    "container",
                    "namespace",
                    "pod",
                    "pod_uid",
                    "probe_type",
                    "result",
                ],
            ),
            durations: HistogramVec::new(
                "prober_probe_duration_seconds",
                "[ALPHA] Duration in seconds for a probe response.",
                &["container", "namespace", "pod", "probe_type"],
                // The kubelet's family has none but `+Inf`.
                &[],
            ),
        }
    }
}

impl ProberMetrics {
    /// Probe `kind` of `container` in `pod` gave `success` after
    /// `elapsed`.
    pub(crate) fn observed(
        &self,
        kind: ProbeKind,
        pod: &PodRef,
        container: &str,
        success: bool,
        elapsed: Duration,
    ) {
        let result = if success { SUCCESSFUL } else { FAILED };
        self.results
            .inc(&results_labels(kind.as_str(), pod, container, result));
        if success {
            self.durations
                .observe(&durations_labels(kind, pod, container), elapsed);
        }
    }

    /// Probe `kind` of `container` in `pod` stopped: its series go.
    pub(crate) fn forget(&self, kind: ProbeKind, pod: &PodRef, container: &str) {
        for result in [SUCCESSFUL, FAILED, UNKNOWN] {
            self.results
                .remove(&results_labels(kind.as_str(), pod, container, result));
        }
        self.durations
            .remove(&durations_labels(kind, pod, container));
    }

    /// How many runs of probe `kind` of `container` in `pod` gave
    /// `success`.
    #[cfg(test)]
    fn count(&self, kind: &str, pod: &PodRef, container: &str, success: bool) -> u64 {
        let result = if success { SUCCESSFUL } else { FAILED };
        self.results
            .get(&[container, &pod.namespace, &pod.name, &pod.uid, kind, result])
    }
}

/// The values of `prober_probe_total`'s labels, in their order.
fn results_labels<'a>(
    kind: &'a str,
    pod: &'a PodRef,
    container: &'a str,
    result: &'a str,
) -> [&'a str; 6] {
    [container, &pod.namespace, &pod.name, &pod.uid, kind, result]
}

/// The values of `prober_probe_duration_seconds`'s labels, in their order.
fn durations_labels<'a>(kind: ProbeKind, pod: &'a PodRef, container: &'a str) -> [&'a str; 4] {
    [container, &pod.namespace, &pod.name, kind.as_str()]
}

impl MetricsSource for ProberMetrics {
    fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        self.results.register(registry);
        self.durations.register(registry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_counted_by_result_timed_when_successful_and_forgotten_with_their_probe() {
        let metrics = ProberMetrics::default();
        let pod = PodRef {
            namespace: "ns".into(),
            name: "web".into(),
            uid: "u1".into(),
        };
        metrics.observed(
            ProbeKind::Readiness,
            &pod,
            "app",
            true,
            Duration::from_millis(3),
        );
        metrics.observed(
            ProbeKind::Readiness,
            &pod,
            "app",
            false,
            Duration::from_millis(3),
        );
        metrics.observed(
            ProbeKind::Readiness,
            &pod,
            "app",
            true,
            Duration::from_millis(3),
        );
        assert_eq!(metrics.count("Readiness", &pod, "app", true), 2);
        assert_eq!(metrics.count("Readiness", &pod, "app", false), 1);
        let text = crate::metrics::encoded(&metrics);
        assert!(
            text.contains(
                "prober_probe_total{container=\"app\",namespace=\"ns\",pod=\"web\",pod_uid=\"u1\",probe_type=\"Readiness\",result=\"successful\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "prober_probe_duration_seconds_count{container=\"app\",namespace=\"ns\",pod=\"web\",probe_type=\"Readiness\"} 2"
            ),
            "{text}"
        );
        metrics.forget(ProbeKind::Readiness, &pod, "app");
        let text = crate::metrics::encoded(&metrics);
        assert!(!text.contains("pod=\"web\""), "{text}");
    }
}
