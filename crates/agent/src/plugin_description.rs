//! What a plugin says about itself: plain data that the plugin manager's
//! state and status and the events about registrations carry alike, so
//! that events need nothing of the plugin manager.

/// What a plugin said about itself in GetInfo, with the endpoint defaulted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginDescription {
    /// `CSIPlugin`, `DevicePlugin`, `DRAPlugin`, or an embedder's own type.
    #[serde(rename = "type")]
    pub plugin_type: String,
    /// The name it registers under: a CSI or DRA driver's name, a device
    /// plugin's resource.
    pub name: String,
    /// Service endpoint (the registration socket when the plugin gave none).
    pub endpoint: String,
    /// Supported versions or services.
    pub versions: Vec<String>,
}
