//! What the plugin manager shows on a scrape and on `/readyz`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::PluginManagerHandle;
use super::status::PluginState;
use crate::metrics::{MetricsSource, ReadinessCheck};

/// `plugin_manager_total_plugins`, computed from the plugin table.
impl MetricsSource for PluginManagerHandle {
    fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(PluginGauge(self.clone())));
    }
}

/// Reads the published plugin table on each scrape.
struct PluginGauge(PluginManagerHandle);

impl std::fmt::Debug for PluginGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PluginGauge")
    }
}

impl Collector for PluginGauge {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "plugin_manager_total_plugins",
            "Number of plugins in Plugin Manager",
            None,
            MetricType::Gauge,
        )?;
        let snapshot = self.0.snapshot();
        for plugin in snapshot.status_at(tokio::time::Instant::now()) {
            let socket = plugin.socket_path.display().to_string();
            let mut states = vec!["desired_state_of_world"];
            if plugin.state == PluginState::Registered {
                states.push("actual_state_of_world");
            }
            for state in states {
                let labels = [("socket_path", socket.as_str()), ("state", state)];
                family.encode_family(&labels)?.encode_gauge(&1_u64)?;
            }
        }
        Ok(())
    }
}

/// Ready once the sockets present at start-up have been picked up.
impl ReadinessCheck for PluginManagerHandle {
    fn not_ready(&self) -> Option<String> {
        (!self.is_ready())
            .then(|| "the plugins present at start-up are still being picked up".to_string())
    }
}
