//! What the device manager tells operators happened: plugins coming and
//! going, device lists changing, allocations made, refused and released.

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceEventKind {
    /// A plugin instance connected (through kubelet.sock or the registry).
    Connected,
    /// A plugin instance's connection ended.
    Disconnected,
    /// The resource's device list or health changed.
    DevicesChanged,
    /// Devices were allocated to a container.
    Allocated,
    /// An allocation was refused or failed.
    AllocationFailed,
    /// A pod's devices were released.
    Released,
    /// The resource was forgotten after its grace period.
    Expired,
}

/// One device manager event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceEvent {
    /// What happened.
    pub kind: DeviceEventKind,
    /// The extended resource name (empty for a release, which spans resources).
    pub resource: String,
    /// The plugin's socket, for instance events.
    pub endpoint: Option<String>,
    /// Details: healthy/total devices, pod and container, or an error.
    pub detail: Option<String>,
    /// When (Unix milliseconds).
    pub at_unix_ms: u64,
}

impl DeviceEvent {
    /// An event happening now.
    pub(crate) fn now(
        kind: DeviceEventKind,
        resource: &str,
        endpoint: Option<&std::path::Path>,
        detail: Option<String>,
    ) -> Self {
        Self {
            kind,
            resource: resource.to_string(),
            endpoint: endpoint.map(|p| p.display().to_string()),
            detail,
            at_unix_ms: crate::unix_time::unix_ms(std::time::SystemTime::now()),
        }
    }
}
