//! The container runtime calls' metrics, with the kubelet's names:
//! `kubelet_runtime_operations_total`, `..._duration_seconds` and
//! `..._errors_total` by `operation_type` (`run_podsandbox`,
//! `create_container`...), fed by the call layer
//! ([`nodeplugins_api::call_layer`]) under the CRI clients, which also
//! keeps each call's deadline and span.

use std::time::Duration;

use nodeplugins_api::call_layer::CallMetrics;

use crate::metrics::{CounterVec, DEFAULT_BUCKETS, HistogramVec, MetricsSource};

/// The kubelet's `--runtime-request-timeout` default.
pub const RUNTIME_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The runtime calls' metrics, with the kubelet's names. Cheap to clone.
#[derive(Clone)]
pub struct RuntimeMetrics {
    operations: CounterVec,
    durations: HistogramVec,
    errors: CounterVec,
}

impl std::fmt::Debug for RuntimeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeMetrics").finish_non_exhaustive()
    }
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        Self {
            operations: CounterVec::new(
                "kubelet_runtime_operations_total",
                "Cumulative number of runtime operations by operation type.",
                &["operation_type"],
            ),
            durations: HistogramVec::new(
                "kubelet_runtime_operations_duration_seconds",
                "Duration in seconds of runtime operations. Broken down by operation type.",
                &["operation_type"],
                DEFAULT_BUCKETS,
            ),
            errors: CounterVec::new(
                "kubelet_runtime_operations_errors_total",
                "Cumulative number of runtime operation errors by operation type.",
                &["operation_type"],
            ),
        }
    }
}

impl RuntimeMetrics {
    /// How many `operation` calls were made.
    pub fn operations(&self, operation: &str) -> u64 {
        self.operations.get(&[operation])
    }

    /// How many `operation` calls failed.
    pub fn errors(&self, operation: &str) -> u64 {
        self.errors.get(&[operation])
    }
}

impl MetricsSource for RuntimeMetrics {
    fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        self.operations.register(registry);
        self.durations.register(registry);
        self.errors.register(registry);
    }
}

/// Each CRI call the layer saw end.
impl CallMetrics for RuntimeMetrics {
    fn observed(&self, method: &str, elapsed: Duration, failed: bool) {
        let operation = operation_type(method);
        self.operations.inc(&[&operation]);
        self.durations.observe(&[&operation], elapsed);
        if failed {
            self.errors.inc(&[&operation]);
        }
    }
}

/// The kubelet's `operation_type` of a CRI method
/// (`RunPodSandbox` → `run_podsandbox`).
fn operation_type(method: &str) -> String {
    let mut snake = String::with_capacity(method.len() + 4);
    for (i, c) in method.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    snake.replace("pod_sandbox", "podsandbox")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_as_the_kubelet_names_them() {
        for (path, name) in [
            ("RunPodSandbox", "run_podsandbox"),
            ("PodSandboxStatus", "podsandbox_status"),
            ("ListPodSandbox", "list_podsandbox"),
            ("CreateContainer", "create_container"),
            ("ListContainers", "list_containers"),
            ("GetContainerEvents", "get_container_events"),
            ("PullImage", "pull_image"),
            ("ImageFsInfo", "image_fs_info"),
        ] {
            assert_eq!(operation_type(path), name);
        }
    }
}
