//! `/metrics`: the agent's own metrics, with the kubelet's names where
//! they exist (its device plugin, DRA, CSI and runtime operation families),
//! in the Prometheus text format, as the kubelet's `/metrics` serves its
//! registry: on its port behind `nodes/metrics`, and on the read-only
//! port. `/metrics/probes`, the same way: the probes' metrics alone.

use http::StatusCode;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;

use crate::kubelet_server::reply::{self, Reply};
use crate::kubelet_server::state::State;
use crate::metrics::MetricsSource;

/// The content type of the Prometheus text format, as the kubelet's.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores";

/// The families every source registers, encoded now.
pub(crate) fn serve(state: &State) -> Reply {
    let mut registry = Registry::default();
    for source in state.metrics.iter() {
        source.register(&mut registry);
    }
    encoded(&registry)
}

/// `/metrics/probes`: the families of the pods' probes.
pub(crate) fn serve_probes(state: &State) -> Reply {
    let mut registry = Registry::default();
    state.pods.prober_metrics().register(&mut registry);
    encoded(&registry)
}

/// `registry` in the Prometheus text format.
fn encoded(registry: &Registry) -> Reply {
    let mut body = String::new();
    match prometheus_text::encode(&mut body, registry) {
        Ok(()) => reply::bytes(StatusCode::OK, CONTENT_TYPE, body.into_bytes()),
        Err(std::fmt::Error) => reply::text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the metrics",
        ),
    }
}
