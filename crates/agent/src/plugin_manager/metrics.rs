//! What the plugin manager shows on a scrape and on `/readyz`.

use std::fmt::Write;

use super::PluginManagerHandle;
use super::status::PluginState;
use crate::metrics::{MetricsSource, ReadinessCheck, labels};

/// `plugin_manager_total_plugins`, computed from the plugin table.
#[async_trait::async_trait]
impl MetricsSource for PluginManagerHandle {
    async fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP plugin_manager_total_plugins Number of plugins in Plugin Manager\n# TYPE plugin_manager_total_plugins gauge"
        );
        let Ok(plugins) = self.status().await else {
            return;
        };
        let names = &["socket_path", "state"];
        for plugin in &plugins {
            let socket = plugin.socket_path.display().to_string();
            let desired = vec![socket.clone(), "desired_state_of_world".to_string()];
            let _ = writeln!(
                out,
                "plugin_manager_total_plugins{} 1",
                labels(names, &desired, None)
            );
            if plugin.state == PluginState::Registered {
                let actual = vec![socket, "actual_state_of_world".to_string()];
                let _ = writeln!(
                    out,
                    "plugin_manager_total_plugins{} 1",
                    labels(names, &actual, None)
                );
            }
        }
    }
}

/// Ready once the sockets present at start-up have been picked up.
impl ReadinessCheck for PluginManagerHandle {
    fn not_ready(&self) -> Option<String> {
        (!self.is_ready())
            .then(|| "the plugins present at start-up are still being picked up".to_string())
    }
}
