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
mod source;

pub(crate) use family::{CounterVec, DEFAULT_BUCKETS, HistogramVec, labels};
pub use server::{MetricsEndpoint, serve_metrics};
pub use source::{MetricsSource, ReadinessCheck};
