//! The admin protocol: the socket's place, the request line and every
//! answer and event line, as both the agent and its clients see them.

use std::path::{Path, PathBuf};

use crate::csi::CsiDriver;
use crate::dra::{
    ClaimPod, ClaimRef, DraDriverStatus, PreparedClaim, RecordedClaim, UnpreparedClaim,
};
use crate::plugin_manager::PluginStatus;
use crate::pods::{PodStatus, PreparedPod, UnpreparedPod};

/// The directory under the root that holds the admin socket.
pub(crate) const ADMIN_DIR: &str = "nodeplugins";
/// The admin socket's file name.
pub(super) const ADMIN_SOCKET: &str = "admin.sock";

/// The admin socket of the agent using `root_dir`.
pub(super) fn socket_path(root_dir: &Path) -> PathBuf {
    root_dir.join(ADMIN_DIR).join(ADMIN_SOCKET)
}

/// A request line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub(super) enum AdminRequest {
    /// The plugin table and agent facts.
    Status,
    /// Plugin and DRA events.
    Events {
        /// Send the agent's recent events first.
        #[serde(default)]
        history: bool,
        /// Keep sending new events until the client hangs up.
        #[serde(default = "yes")]
        follow: bool,
    },
    /// Allocate devices to a container: resource name → count. All or
    /// nothing. The request's fields are the line's (the pod's UID as
    /// `pod`).
    Allocate(crate::device::AllocationRequest),
    /// Free every device a pod holds.
    Release {
        /// The UID of the pod the devices are for.
        pod: String,
    },
    /// Prepare claims with a DRA driver.
    DraPrepare {
        /// Driver name.
        driver: String,
        /// The claims.
        claims: Vec<ClaimRef>,
        /// The pod they are prepared for, if named.
        #[serde(default)]
        pod: Option<ClaimPod>,
    },
    /// Unprepare claims with a DRA driver, or each with the driver that
    /// prepared it as recorded.
    DraUnprepare {
        /// Driver name; without one, each claim's recorded driver.
        #[serde(default)]
        driver: Option<String>,
        /// The claims.
        claims: Vec<ClaimRef>,
    },
    /// The prepared DRA claims.
    DraClaims,
    /// Prepare a pod's claims, read from the API, as the kubelet does.
    DraPreparePod {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
    /// Unprepare what a pod uses, as recorded.
    DraUnpreparePod {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
    /// The pods bound to the node, as the pods owner serves them.
    Pods {
        /// Only the pods of this namespace.
        #[serde(default)]
        namespace: Option<String>,
        /// Only the pods of this name.
        #[serde(default)]
        name: Option<String>,
    },
}

/// The answer to a `{"request":"pods"}` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodsReply {
    /// Whether the node's pods are served from the API (`run --pods on`).
    pub serving: bool,
    /// Whether the pods bound to the node were listed once.
    pub listed: bool,
    /// The pods, sorted by namespace and name; each admitted one with what
    /// its containers got.
    pub pods: Vec<PodStatus>,
}

/// The answer to a `{"request":"dra_prepare_pod"}` line.
pub type DraPreparePodReply = PreparedPod;

/// The answer to a `{"request":"dra_unprepare_pod"}` line.
pub type DraUnpreparePodReply = UnpreparedPod;

/// The answer to a `{"request":"dra_claims"}` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraClaimsReply {
    /// Every prepared claim, once per driver that prepared it, sorted by
    /// claim UID, then driver.
    pub claims: Vec<RecordedClaim>,
    /// What is wrong with the claims' checkpoint, if anything.
    #[serde(default)]
    pub checkpoint_error: Option<String>,
}

/// The answer to a `{"request":"dra_prepare"}` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraPrepareReply {
    /// One result per claim, in request order.
    pub claims: Vec<PreparedClaim>,
}

/// The answer to a `{"request":"dra_unprepare"}` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DraUnprepareReply {
    /// One result per claim, in request order.
    pub claims: Vec<UnpreparedClaim>,
}

fn yes() -> bool {
    true
}

/// The answer to a `{"request":"allocate"}` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllocateReply {
    /// One entry per resource.
    pub allocations: Vec<crate::device::ContainerAllocation>,
}

/// The answer to a `{"request":"release"}` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReleaseReply {
    /// How many (container, resource) allocations ended.
    pub released: usize,
}

/// The answer to a `{"request":"status"}` line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct AgentStatus {
    /// nodeplugins version.
    pub version: String,
    /// The agent's root directory.
    pub root_dir: PathBuf,
    /// When the agent started (Unix milliseconds).
    pub started_at_unix_ms: u64,
    /// How long it has been running.
    pub uptime_ms: u64,
    /// Every known plugin socket.
    pub plugins: Vec<PluginStatus>,
    /// Registered CSI drivers.
    #[serde(default)]
    pub csi_drivers: Vec<CsiDriver>,
    /// Device plugin resources.
    #[serde(default)]
    pub resources: Vec<crate::device::ResourceStatus>,
    /// Why the device checkpoint could not be loaded or written, or how it
    /// was repaired from its backup at start, if either happened.
    #[serde(default)]
    pub device_checkpoint_error: Option<String>,
    /// DRA drivers.
    #[serde(default)]
    pub dra_drivers: Vec<DraDriverStatus>,
    /// Why the DRA claims checkpoint could not be loaded or written, or how
    /// it was repaired from its backup at start, if either happened.
    #[serde(default)]
    pub dra_checkpoint_error: Option<String>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served, if anywhere.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// The sockets the agent serves: `kubelet.sock` and the admin socket.
    #[serde(default)]
    pub sockets: Vec<crate::common::served_socket::SocketStatus>,
    /// The Kubernetes API connection, when the agent publishes to one.
    #[cfg(feature = "kube")]
    #[serde(default)]
    pub kube_api: Option<crate::kube_api::KubeApiStatus>,
}

/// The line an events stream sends once the agent follows new events for
/// it (after the history, if asked for): every later event will be sent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FollowingMarker {
    /// Always true.
    pub following: bool,
}

/// An error line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct AdminErrorReply {
    /// What went wrong.
    pub error: String,
}
