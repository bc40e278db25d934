//! Why a pod's claims could not be read, or the pod may not be prepared:
//! each case names the pod or claim and what was wrong with it.

use std::time::Duration;

use nodeplugins_api::retry::{Classify, RetryClass};

/// Why a pod's claims could not be read, or may not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PodClaimsError {
    /// The pod does not exist.
    #[error("pod {pod} not found")]
    PodNotFound {
        /// `namespace/name`.
        pod: String,
    },
    /// A claim the pod names does not exist.
    #[error("ResourceClaim {claim} not found (pod {pod})")]
    ClaimNotFound {
        /// `namespace/name`.
        claim: String,
        /// `namespace/name`.
        pod: String,
    },
    /// A read failed.
    #[error("read {what}: {source}")]
    Read {
        /// What was read, e.g. `pod default/web`.
        what: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// A read took longer than the request timeout.
    #[error("read {what}: no answer within {timeout:?}")]
    Timeout {
        /// What was read.
        what: String,
        /// The timeout.
        timeout: Duration,
    },
    /// An entry made from a template has no claim yet.
    #[error(
        "pod {pod}: the ResourceClaim of spec.resourceClaims {entry:?} is not created yet (no status.resourceClaimStatuses entry)"
    )]
    NotCreated {
        /// `namespace/name`.
        pod: String,
        /// The `spec.resourceClaims` entry's name.
        entry: String,
    },
    /// An entry names neither a claim nor a template.
    #[error(
        "pod {pod}: spec.resourceClaims {entry:?} names neither a resourceClaimName nor a resourceClaimTemplateName"
    )]
    Unsupported {
        /// `namespace/name`.
        pod: String,
        /// The entry's name.
        entry: String,
    },
    /// A claim made from a template was not made for this pod.
    #[error("ResourceClaim {claim} was not created for pod {pod} (the pod is not its owner)")]
    NotForPod {
        /// `namespace/name`.
        claim: String,
        /// `namespace/name`.
        pod: String,
    },
    /// A claim is not allocated.
    #[error("ResourceClaim {claim} (UID {uid}) is not allocated yet")]
    NotAllocated {
        /// `namespace/name`.
        claim: String,
        /// Its UID.
        uid: String,
    },
    /// A claim is not reserved for the pod.
    #[error(
        "pod {pod} ({pod_uid}) is not allowed to use ResourceClaim {claim} (UID {uid}): not reserved for it"
    )]
    NotReserved {
        /// `namespace/name`.
        claim: String,
        /// Its UID.
        uid: String,
        /// `namespace/name`.
        pod: String,
        /// The pod's UID.
        pod_uid: String,
    },
    /// The pod is bound to another node, or to none.
    #[error("pod {pod} is bound to {}, not {node}", .bound.as_ref().map_or("no node".to_string(), |b| format!("node {b}")))]
    OtherNode {
        /// `namespace/name`.
        pod: String,
        /// The node it is bound to.
        bound: Option<String>,
        /// This node.
        node: String,
    },
    /// A claim's allocation is for other nodes.
    #[error("ResourceClaim {claim} of pod {pod} is allocated for other nodes, not {node}")]
    AllocatedElsewhere {
        /// `namespace/name`.
        claim: String,
        /// `namespace/name`.
        pod: String,
        /// This node.
        node: String,
    },
    /// An object the API returned lacks a field it always has.
    #[error("{what} has no {field}")]
    Malformed {
        /// The object.
        what: String,
        /// The field.
        field: &'static str,
    },
}

impl PodClaimsError {
    /// The error of reading `what`, which failed with `source` (a
    /// deadline passed in the client is a timeout).
    pub(crate) fn read(what: &str, source: kube::Error) -> Self {
        match crate::kube_api::passed_deadline(&source) {
            Some(timeout) => Self::Timeout {
                what: what.to_string(),
                timeout,
            },
            None => Self::Read {
                what: what.to_string(),
                source,
            },
        }
    }

    /// The HTTP status the API server answered a read with, if it
    /// answered.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Self::Read {
                source: kube::Error::Api(status),
                ..
            } => Some(status.code),
            _ => None,
        }
    }

    /// Whether the node's identity was refused the read (403): the Node
    /// authorizer lets a node read a pod and its claims only while the pod
    /// is bound to it, and its graph follows a binding a moment behind.
    pub(crate) fn is_forbidden(&self) -> bool {
        self.status() == Some(403)
    }

    /// Whether this is a reason to wait rather than a failure: the claim is
    /// not created, allocated or reserved for the pod yet (the
    /// controller-manager and the scheduler have not done their part), or
    /// a claim the pod names does not exist yet.
    pub fn is_wait(&self) -> bool {
        matches!(
            self,
            Self::NotCreated { .. }
                | Self::NotAllocated { .. }
                | Self::NotReserved { .. }
                | Self::ClaimNotFound { .. }
        )
    }
}

/// The one classification a pod's claim reads and checks ask of their
/// errors.
impl Classify for PodClaimsError {
    fn class(&self) -> RetryClass {
        if self.is_wait() {
            // The controller-manager or the scheduler has not done its
            // part yet.
            return RetryClass::WhenItExists;
        }
        match self {
            Self::Read { .. } => match self.status() {
                // Not on this node in the Node authorizer's graph (yet).
                Some(403) => RetryClass::WhenItExists,
                Some(401) => RetryClass::Credentials,
                Some(409) => RetryClass::Conflict,
                Some(429) => RetryClass::Backoff,
                Some(code) if (400..500).contains(&code) => RetryClass::Slowly,
                _ => RetryClass::Backoff,
            },
            Self::Timeout { .. } => RetryClass::Backoff,
            // What the pod or its claims say does not change by asking
            // again: only a change of them does.
            _ => RetryClass::Permanent,
        }
    }
}
