//! The device manager's metrics, with the kubelet's names.

use std::time::Duration;

use crate::metrics::{CounterVec, DEFAULT_BUCKETS, HistogramVec, MetricsSource};

/// `kubelet_device_plugin_registration_total` and
/// `kubelet_device_plugin_alloc_duration_seconds`. Cheap to clone.
#[derive(Clone)]
pub struct DeviceMetrics {
    registrations: CounterVec,
    alloc_duration: HistogramVec,
    kubelet_socket_recreations: CounterVec,
}

impl Default for DeviceMetrics {
    fn default() -> Self {
        Self {
            registrations: CounterVec::new(
                "kubelet_device_plugin_registration_total",
                "Cumulative number of device plugin registrations.",
                &["resource_name"],
            ),
            alloc_duration: HistogramVec::new(
                "kubelet_device_plugin_alloc_duration_seconds",
                "Duration in seconds to serve a device plugin Allocation request.",
                &["resource_name"],
                DEFAULT_BUCKETS,
            ),
            kubelet_socket_recreations: CounterVec::new(
                "nodeplugins_kubelet_socket_recreations_total",
                "Times kubelet.sock was removed while the agent ran and served again.",
                &[],
            ),
        }
    }
}

impl DeviceMetrics {
    /// A plugin instance of `resource` connected.
    pub(crate) fn registered(&self, resource: &str) {
        self.registrations.inc(&[resource]);
    }

    /// `kubelet.sock` was removed and is served again.
    pub(crate) fn kubelet_socket_recreated(&self) {
        self.kubelet_socket_recreations.inc(&[]);
    }

    /// How many times `kubelet.sock` was served again after being removed.
    pub fn kubelet_socket_recreations(&self) -> u64 {
        self.kubelet_socket_recreations.get(&[])
    }

    /// An Allocate call to a plugin of `resource` was answered after `took`.
    pub(crate) fn allocation_took(&self, resource: &str, took: Duration) {
        self.alloc_duration.observe(&[resource], took);
    }
}

impl MetricsSource for DeviceMetrics {
    fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        self.registrations.register(registry);
        self.alloc_duration.register(registry);
        self.kubelet_socket_recreations.register(registry);
    }
}
