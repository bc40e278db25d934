//! The API writes' metrics.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::{CounterVec, MetricsSource};

use super::status::WriteKind;

/// `nodeplugins_kube_api_writes_total{kind,result}` and
/// `nodeplugins_kube_api_pending_writes`. Cheap to clone.
#[derive(Clone)]
pub struct KubeApiMetrics {
    writes: CounterVec,
    pending: Gauge,
}

impl Default for KubeApiMetrics {
    fn default() -> Self {
        Self {
            writes: CounterVec::new(
                "nodeplugins_kube_api_writes_total",
                "Writes to the Kubernetes API by object kind and result (ok, error).",
                &["kind", "result"],
            ),
            pending: Gauge::default(),
        }
    }
}

impl KubeApiMetrics {
    pub(crate) fn wrote(&self, kind: WriteKind, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.writes.inc(&[kind.as_str(), result]);
    }

    pub(crate) fn set_pending(&self, pending: usize) {
        self.pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// Writes of `kind` that ended with `ok` or not.
    pub fn writes(&self, kind: WriteKind, ok: bool) -> u64 {
        let result = if ok { "ok" } else { "error" };
        self.writes.get(&[kind.as_str(), result])
    }
}

impl MetricsSource for KubeApiMetrics {
    fn register(&self, registry: &mut Registry) {
        self.writes.register(registry);
        registry.register(
            "nodeplugins_kube_api_pending_writes",
            "Kinds of objects whose latest state is not yet written",
            self.pending.clone(),
        );
    }
}
