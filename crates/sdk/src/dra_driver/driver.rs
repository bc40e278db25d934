//! The trait a DRA driver author implements, and what its methods answer.

use std::collections::HashMap;
use std::fmt;

use super::claim::{Claim, PreparedClaim, PreparedDevice};
use super::claim_uid::ClaimUid;

/// What [`DraDriver::prepare`] answers: per claim UID, the devices the
/// claim got or why it failed.
pub type PrepareResults = HashMap<ClaimUid, Result<Vec<PreparedDevice>, ClaimError>>;

/// What [`DraDriver::unprepare`] answers: per claim UID, success or why it
/// failed.
pub type UnprepareResults = HashMap<ClaimUid, Result<(), ClaimError>>;

/// What a DRA driver author implements. Results are keyed by claim UID; a
/// claim without a result fails. Implement it with
/// `#[nodeplugins_sdk::async_trait]`.
#[async_trait::async_trait]
pub trait DraDriver: Send + Sync + 'static {
    /// Prepares `claims`: per claim, what it got or why it failed. Claims
    /// already prepared (and not unprepared since) are answered from the
    /// record and never reach this.
    async fn prepare(&self, claims: Vec<Claim>) -> PrepareResults;

    /// Unprepares `claims`, each with what is known of what it got (see
    /// [`PreparedState`](super::PreparedState): the driver's answer, what
    /// was allocated to a claim whose prepare was interrupted, or nothing):
    /// per claim, success or why it failed. Must succeed for claims that
    /// were never prepared, and again for claims already unprepared.
    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults;
}

/// Why a driver could not prepare or unprepare a claim. The kubelet gets
/// its message (and shows it in the pod's events), and calls again later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimError {
    message: String,
}

impl ClaimError {
    /// A failure with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// A failure from `error`: its message followed by those of its
    /// sources, each after `: ` (an error whose own message already
    /// includes its source's shows it twice: use [`new`](Self::new) with
    /// its message then). For an `anyhow::Error` `e`, pass `&*e`, or use
    /// `ClaimError::new(format!("{e:#}"))`.
    pub fn from_error(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self { message }
    }

    /// The message the kubelet gets.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ClaimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ClaimError {}

impl From<String> for ClaimError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for ClaimError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot reset gpu-0")]
    struct Reset(#[source] std::io::Error);

    #[test]
    fn an_error_with_a_source_keeps_the_whole_chain_in_its_message() {
        let error = Reset(std::io::Error::other("device busy"));
        let claim = ClaimError::from_error(&error);
        assert_eq!(claim.message(), "cannot reset gpu-0: device busy");
        assert_eq!(
            ClaimError::from("no such device").to_string(),
            "no such device"
        );
    }
}
