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
//!
//! Each part of the agent owns its families and renders them on scrape
//! ([`MetricsSource`]); the plugin gauge is computed from the plugin
//! manager's table then, so nothing runs between scrapes.

mod family;
mod server;

pub(crate) use family::labels;
pub use family::{CounterVec, DEFAULT_BUCKETS, HistogramVec};
pub use server::{MetricsEndpoint, serve_metrics};

/// A part of the agent with metrics to show on each scrape.
#[async_trait::async_trait]
pub trait MetricsSource: Send + Sync + 'static {
    /// Appends its metric families to `out`, in the text exposition format.
    async fn render(&self, out: &mut String);
}

/// A part of the agent that can hold back `/readyz`.
pub trait ReadinessCheck: Send + Sync + 'static {
    /// Why the agent is not ready yet, or `None` when this part is.
    fn not_ready(&self) -> Option<String>;
}
