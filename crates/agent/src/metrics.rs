//! Prometheus metrics, with the kubelet's names where they exist, and the
//! HTTP endpoint serving them with `/healthz` and `/readyz`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `plugin_manager_total_plugins` | gauge | `socket_path`, `state` (`actual_state_of_world`, `desired_state_of_world`) |
//! | `kubelet_device_plugin_registration_total` | counter | `resource_name` |
//! | `kubelet_device_plugin_alloc_duration_seconds` | histogram | `resource_name` |
//! | `dra_operations_duration_seconds` | histogram | `operation_name`, `is_error` |
//! | `dra_grpc_operations_duration_seconds` | histogram | `driver_name`, `method_name`, `grpc_status_code` |
//! | `csi_operations_seconds` | histogram | `driver_name`, `method_name`, `grpc_status_code`, `migrated` (volumes) |
//!
//! Each part of the agent owns its families (`prometheus-client`) and
//! registers them in the registry a scrape encodes ([`MetricsSource`]), the
//! agent's own or an application's ([`MetricsEndpoint::register`]); the
//! plugin gauge is a collector that reads the plugin manager's published
//! table on each scrape, so nothing runs between scrapes. The crate
//! re-exports `prometheus_client`.

mod family;
mod grpc_code;
mod server;
mod source;

pub(crate) use family::{CounterVec, DEFAULT_BUCKETS, HistogramVec};
pub(crate) use grpc_code::grpc_code_name;
pub use server::{MetricsEndpoint, serve_metrics};
pub use source::{MetricsSource, ReadinessCheck};

/// `source`'s families in the Prometheus text format, as a scrape gets
/// them.
#[cfg(test)]
pub(crate) fn encoded(source: &dyn MetricsSource) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    source.register(&mut registry);
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry) {
        panic!("cannot encode the metrics: {e}");
    }
    out
}
