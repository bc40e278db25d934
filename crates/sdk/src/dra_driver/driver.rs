//! The trait a DRA driver author implements.

use std::collections::HashMap;

use super::claim::{Claim, PreparedClaim, PreparedDevice};

/// What a DRA driver author implements. Results are keyed by claim UID; a
/// claim without a result fails. Implement it with
/// `#[nodeplugins_sdk::async_trait]`.
#[async_trait::async_trait]
pub trait DraDriver: Send + Sync + 'static {
    /// Prepares `claims`: per claim, what it got or why it failed. Claims
    /// already prepared (and not unprepared since) are answered from the
    /// record and never reach this.
    async fn prepare(
        &self,
        claims: Vec<Claim>,
    ) -> HashMap<String, Result<Vec<PreparedDevice>, String>>;

    /// Unprepares `claims`, each with what is known of what it got (see
    /// [`PreparedState`](super::PreparedState): the driver's answer, what
    /// was allocated to a claim whose prepare was interrupted, or nothing):
    /// per claim, success or why it failed. Must succeed for claims that
    /// were never prepared, and again for claims already unprepared.
    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> HashMap<String, Result<(), String>>;
}
