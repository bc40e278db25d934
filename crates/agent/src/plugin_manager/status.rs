//! What the plugin manager shows operators: a table of plugins.

use std::path::PathBuf;

/// Where a plugin stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginState {
    /// Found; registration is running or about to.
    Pending,
    /// Registered with its handler.
    Registered,
    /// The last registration failed; it is retried at `retry_in_ms`.
    Failed,
    /// Its socket went away (or was replaced); the handler is being told.
    Deregistering,
}

/// One row of the plugin table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginStatus {
    /// The registration socket.
    pub socket_path: PathBuf,
    /// Plugin type, once GetInfo answered.
    #[serde(rename = "type")]
    pub plugin_type: Option<String>,
    /// Plugin name, once GetInfo answered.
    pub name: Option<String>,
    /// Service endpoint, once GetInfo answered.
    pub endpoint: Option<String>,
    /// Supported versions or services.
    pub versions: Vec<String>,
    /// Where it stands.
    pub state: PluginState,
    /// Which appearance of the socket this row describes.
    pub generation: u64,
    /// When it was registered (Unix milliseconds).
    pub registered_at_unix_ms: Option<u64>,
    /// The last error, for failed plugins (or a failed final notification).
    pub error: Option<String>,
    /// Consecutive failures.
    pub failures: u32,
    /// Time left until the next attempt, for failed plugins.
    pub retry_in_ms: Option<u64>,
}
