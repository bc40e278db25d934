//! The API writes' metrics.

use crate::metrics::{CounterVec, MetricsSource};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::status::WriteKind;

/// `nodeplugins_kube_api_writes_total{kind,result}` and
/// `nodeplugins_kube_api_pending_writes`. Cheap to clone.
#[derive(Clone)]
pub struct KubeApiMetrics {
    writes: CounterVec,
    pending: Arc<AtomicUsize>,
}

impl Default for KubeApiMetrics {
    fn default() -> Self {
        Self {
            writes: CounterVec::new(
                "nodeplugins_kube_api_writes_total",
                "Writes to the Kubernetes API by object kind and result (ok, error).",
                &["kind", "result"],
            ),
            pending: Arc::default(),
        }
    }
}

impl KubeApiMetrics {
    pub(crate) fn wrote(&self, kind: WriteKind, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.writes.inc(&[kind.as_str(), result]);
    }

    pub(crate) fn set_pending(&self, pending: usize) {
        self.pending.store(pending, Ordering::Relaxed);
    }

    /// Writes of `kind` that ended with `ok` or not.
    pub fn writes(&self, kind: WriteKind, ok: bool) -> u64 {
        let result = if ok { "ok" } else { "error" };
        self.writes.get(&[kind.as_str(), result])
    }
}

#[async_trait::async_trait]
impl MetricsSource for KubeApiMetrics {
    async fn render(&self, out: &mut String) {
        use std::fmt::Write;
        self.writes.render(out);
        let _ = writeln!(
            out,
            "# HELP nodeplugins_kube_api_pending_writes Kinds of objects whose latest state is not yet written.\n# TYPE nodeplugins_kube_api_pending_writes gauge\nnodeplugins_kube_api_pending_writes {}",
            self.pending.load(Ordering::Relaxed)
        );
    }
}
