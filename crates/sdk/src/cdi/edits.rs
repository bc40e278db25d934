//! What a container needs for a device, as CDI `containerEdits` describes
//! it: environment variables, device nodes and mounts.

/// What the container needs for a device (CDI `containerEdits`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// Environment variables, `NAME=value`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Device nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<CdiDeviceNode>,
    /// Mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<CdiMount>,
}

/// A device node (CDI `deviceNodes` entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiDeviceNode {
    /// Path in the container.
    pub path: String,
    /// Path on the host, if not the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// Cgroup permissions (`rwm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
}

/// A mount (CDI `mounts` entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    /// Path on the host.
    pub host_path: String,
    /// Path in the container.
    pub container_path: String,
    /// Mount options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}
