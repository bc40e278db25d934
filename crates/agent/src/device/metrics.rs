//! The device manager's metrics, with the kubelet's names.

use std::time::Duration;

use crate::metrics::{CounterVec, DEFAULT_BUCKETS, HistogramVec, MetricsSource};

/// `kubelet_device_plugin_registration_total` and
/// `kubelet_device_plugin_alloc_duration_seconds`. Cheap to clone.
#[derive(Clone)]
pub struct DeviceMetrics {
    registrations: CounterVec,
    alloc_duration: HistogramVec,
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
        }
    }
}

impl DeviceMetrics {
    /// A plugin instance of `resource` connected.
    pub(crate) fn registered(&self, resource: &str) {
        self.registrations.inc(&[resource]);
    }

    /// An Allocate call to a plugin of `resource` was answered after `took`.
    pub(crate) fn allocation_took(&self, resource: &str, took: Duration) {
        self.alloc_duration.observe(&[resource], took);
    }
}

#[async_trait::async_trait]
impl MetricsSource for DeviceMetrics {
    async fn render(&self, out: &mut String) {
        self.registrations.render(out);
        self.alloc_duration.render(out);
    }
}
