//! A pod as the pods owner and the DRA manager see it: its reference, its
//! checked claims, and what manual pod-level DRA answers.

use crate::dra::{PodClaim, PodClaimResult, PodClaimUnprepared};

/// A pod, by namespace, name and UID.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct PodRef {
    /// The pod's namespace (its claims' too).
    pub namespace: String,
    /// The pod's name, unique in its namespace while the pod exists.
    pub name: String,
    /// The pod's UID: a pod made again under its name has another.
    pub uid: String,
}

impl PodRef {
    /// The span an operation on the pod (`admit`, `run`, `release`) runs
    /// in: what is logged within it, down to each call to a plugin, a
    /// driver or the runtime, names the pod once, here.
    #[cfg(feature = "kube")]
    pub(crate) fn span(&self, operation: &'static str) -> tracing::Span {
        tracing::info_span!("pod", op = operation, pod = %self, uid = %self.uid)
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Everything preparing a pod's claims needs, read before any driver is
/// called.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodClaims {
    /// The pod.
    pub pod: PodRef,
    /// Its containers, init containers first.
    pub containers: Vec<String>,
    /// Its claims, in `spec.resourceClaims` order (entries that need no
    /// claim left out), then its extended-resource claim.
    pub claims: Vec<PodClaim>,
}

/// One container's CDI devices from the pod's claims.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerDevices {
    /// The container.
    pub name: String,
    /// The CDI device ids the container runtime is given, by the pod's
    /// claim order, then driver, then as the driver listed them.
    pub cdi_device_ids: Vec<String>,
}

/// The outcome of preparing a pod's claims by hand (`dra prepare --pod`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedPod {
    /// The pod.
    pub pod: PodRef,
    /// One result per claim and driver, in claim order, then driver.
    pub claims: Vec<PodClaimResult>,
    /// Every container with its devices; empty when any claim failed.
    pub containers: Vec<ContainerDevices>,
}

impl PreparedPod {
    /// Whether any claim failed.
    pub fn failed(&self) -> bool {
        self.claims.iter().any(|c| c.result.error.is_some())
    }
}

/// The outcome of unpreparing a pod's claims by hand (`dra unprepare
/// --pod`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnpreparedPod {
    /// The pod's UID, when the API or any claim record names it.
    pub pod_uid: Option<String>,
    /// The claims it used, by claim UID.
    pub claims: Vec<PodClaimUnprepared>,
}

impl UnpreparedPod {
    /// Whether any claim failed.
    pub fn failed(&self) -> bool {
        self.claims.iter().any(|c| c.error.is_some())
    }
}
