//! Why a DRA operation failed.

use std::sync::Arc;

use crate::checkpoint::CheckpointError;
use nodeplugins_api::dra_client::ServiceError;

/// Why a DRA operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DraError {
    /// The plugin lists no usable service.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// The endpoint is not an absolute path.
    #[error("DRA driver {driver}: endpoint {endpoint:?} is not an absolute socket path")]
    BadEndpoint {
        /// The driver.
        driver: String,
        /// The endpoint.
        endpoint: String,
    },
    /// Another instance of the driver already uses this endpoint.
    #[error("endpoint {endpoint} already registered for DRA driver plugin {driver}")]
    AlreadyRegistered {
        /// The driver.
        driver: String,
        /// The endpoint.
        endpoint: String,
    },
    /// No driver name was given.
    #[error("DRA driver name is empty")]
    EmptyName,
    /// No instance of the driver is registered.
    #[error("DRA driver {0} is not registered")]
    NotRegistered(String),
    /// The call failed as a whole; per-claim errors are in the results instead.
    #[error("DRA driver {driver} at {endpoint}: {operation} failed: {code:?}: {message}")]
    Call {
        /// The driver.
        driver: String,
        /// The instance called.
        endpoint: String,
        /// `NodePrepareResources` or `NodeUnprepareResources`.
        operation: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// A prepare names a pod UID that prepared claims record under another
    /// namespace or name.
    #[error("pod {pod} is {known}, not {given}")]
    PodRenamed {
        /// The UID of the pod asking.
        pod: String,
        /// `namespace/name` the prepared claims record it under.
        known: String,
        /// `namespace/name` of the request.
        given: String,
    },
    /// A claim of a pod has the name of a claim still prepared on this node
    /// under another UID: the claim was deleted and created again while a
    /// pod still used the old one.
    #[error(
        "ResourceClaim {claim} is now UID {uid}, but UID {prepared_uid} of that name is still prepared on this node (a pod using it was force-deleted?); unprepare it first"
    )]
    ClaimReplaced {
        /// `namespace/name`.
        claim: String,
        /// The UID prepared here.
        prepared_uid: String,
        /// The UID the API has now.
        uid: String,
    },
    /// The claim's last pod is being unprepared: no pod may start using it
    /// until that ends (the kubelet's `isUnpreparing`).
    #[error("ResourceClaim {claim} is being unprepared")]
    ClaimUnpreparing {
        /// Its name (the kubelet's message names it alone).
        claim: String,
    },
    /// What a prepare or unprepare changed could not be written to the
    /// checkpoint; no driver was called for it.
    #[error("checkpoint ResourceClaim state: {0}")]
    Record(#[source] RecordError),
    /// The manager is shutting down.
    #[error("the DRA manager is stopping")]
    Stopping,
}

/// A failed write of the prepared claims' checkpoint, shared between the
/// callers it failed; two are equal when they are the same failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct RecordError(pub Arc<CheckpointError>);

impl PartialEq for RecordError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for RecordError {}
