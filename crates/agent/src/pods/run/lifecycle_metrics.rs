//! The lifecycle hooks' metrics, with the kubelet's names:
//! `kubelet_lifecycle_handler_http_fallbacks_total`, the HTTPS `httpGet`
//! hooks answered in plain HTTP that then succeeded over HTTP, and
//! `kubelet_sleep_action_terminated_early_total`, the `sleep` hooks cut
//! short because their container went.

use crate::metrics::{CounterVec, MetricsSource};

/// The hooks' metrics. Cheap to clone: every clone counts into the same
/// families.
#[derive(Clone, Debug)]
pub(crate) struct LifecycleMetrics {
    http_fallbacks: CounterVec,
    sleeps_cut_short: CounterVec,
}

impl Default for LifecycleMetrics {
    fn default() -> Self {
        Self {
            http_fallbacks: CounterVec::new(
                "kubelet_lifecycle_handler_http_fallbacks_total",
                "[ALPHA] The number of times lifecycle handlers successfully fell back to http from https.",
                &[],
            ),
            sleeps_cut_short: CounterVec::new(
                "kubelet_sleep_action_terminated_early_total",
                "[ALPHA] The number of times lifecycle sleep handler got terminated before it finishes",
                &[],
            ),
        }
    }
}

impl LifecycleMetrics {
    /// An HTTPS hook's retry over HTTP succeeded.
    pub(crate) fn http_fell_back(&self) {
        self.http_fallbacks.inc(&[]);
    }

    /// A `sleep` hook ended before its time.
    pub(crate) fn sleep_cut_short(&self) {
        self.sleeps_cut_short.inc(&[]);
    }

    /// How many HTTPS hooks fell back to HTTP and succeeded.
    #[cfg(test)]
    pub(crate) fn http_fallbacks(&self) -> u64 {
        self.http_fallbacks.get(&[])
    }

    /// How many `sleep` hooks were cut short.
    #[cfg(test)]
    pub(crate) fn sleeps_cut_short(&self) -> u64 {
        self.sleeps_cut_short.get(&[])
    }
}

impl MetricsSource for LifecycleMetrics {
    fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        self.http_fallbacks.register(registry);
        self.sleeps_cut_short.register(registry);
    }
}
