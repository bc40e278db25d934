//! What the DRA manager tells operators happened.

/// What happened to a DRA driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DraEventKind {
    /// An instance was registered.
    InstanceAdded,
    /// An instance was deregistered.
    InstanceRemoved,
    /// An instance's connection came up.
    Connected,
    /// An instance's connection went down.
    Disconnected,
    /// No instance is connected: cleanup will run at the deadline.
    CleanupScheduled,
    /// An instance connected in time: the cleanup will not run.
    CleanupCancelled,
    /// The cleanup ran.
    CleanedUp,
    /// The cleanup failed and will be retried.
    CleanupFailed,
}

/// One DRA event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraEvent {
    /// What happened.
    pub kind: DraEventKind,
    /// The driver.
    pub driver: String,
    /// The instance's endpoint, for instance events.
    pub endpoint: Option<String>,
    /// Details: an error, or the cleanup deadline.
    pub detail: Option<String>,
    /// When (Unix milliseconds).
    pub at_unix_ms: u64,
}
