//! What the API publishing tells operators happened.

use super::status::WriteKind;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KubeEventKind {
    /// A write failed (said once per change of error; retried with backoff).
    WriteFailed,
    /// A write succeeded after failures: the API has the latest state.
    CaughtUp,
}

/// One API publishing event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KubeEvent {
    /// What happened.
    pub kind: KubeEventKind,
    /// Which write.
    pub write: WriteKind,
    /// The error, for failures.
    pub detail: Option<String>,
    /// When (Unix milliseconds).
    pub at_unix_ms: u64,
}
