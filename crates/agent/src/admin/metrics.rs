//! The admin socket's own metrics.

/// `nodeplugins_admin_socket_recreations_total`. Cheap to clone.
#[derive(Clone)]
pub(crate) struct AdminMetrics {
    recreations: crate::metrics::CounterVec,
}

impl Default for AdminMetrics {
    fn default() -> Self {
        Self {
            recreations: crate::metrics::CounterVec::new(
                "nodeplugins_admin_socket_recreations_total",
                "Times the admin socket was removed while the agent ran and served again.",
                &[],
            ),
        }
    }
}

impl AdminMetrics {
    pub(super) fn socket_recreated(&self) {
        self.recreations.inc(&[]);
    }

    /// How many times the admin socket was served again after being removed.
    pub(crate) fn socket_recreations(&self) -> u64 {
        self.recreations.get(&[])
    }
}

impl crate::metrics::MetricsSource for AdminMetrics {
    fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        self.recreations.register(registry);
    }
}
