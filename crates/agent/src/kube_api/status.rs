//! What `nodeplugins status` shows of the API connection.

/// The kinds of writes the agent makes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum WriteKind {
    /// Device plugin capacity and allocatable in the Node's status.
    NodeStatus,
    /// CSI drivers on the Node (annotation, labels) and its CSINode.
    CsiNode,
    /// Deleting the node's (or a DRA driver's) ResourceSlices.
    ResourceSlices,
}

impl WriteKind {
    /// The name used in metrics and status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodeStatus => "node_status",
            Self::CsiNode => "csi_node",
            Self::ResourceSlices => "resource_slices",
        }
    }
}

impl std::fmt::Display for WriteKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The API connection, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KubeApiStatus {
    /// The API server.
    pub server: String,
    /// The Node written for.
    pub node: String,
    /// Who the API server takes the agent for, once it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// When a write last succeeded (Unix milliseconds).
    pub last_success_unix_ms: Option<u64>,
    /// What is not yet written (the latest state of each waits).
    pub pending: Vec<WriteKind>,
    /// Why the last failed write failed, while it is failing.
    pub last_error: Option<String>,
    /// Consecutive failures of the writes still failing.
    pub failures: u32,
}
