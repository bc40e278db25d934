//! What the kubelet writes to the Kubernetes API for its node plugins, done
//! by the agent when it is given an API server (feature `kube`):
//!
//! - **Node status**: per device plugin resource, capacity
//!   (all devices) and allocatable (healthy ones), written as a merge patch
//!   of `nodes/<node>/status`; a resource that went away is written as 0,
//!   never deleted. Bursts of changes are coalesced into one write.
//! - **CSI**: the node's CSINode (created with an owner
//!   reference to the Node), the `csi.volume.kubernetes.io/nodeid`
//!   annotation and the drivers' topology labels, following the registered
//!   CSI drivers.
//! - **DRA** ([`ResourceSliceCleanup`]): the node's ResourceSlices are deleted at
//!   start and a driver's when it stayed away for its grace period, as the
//!   DRA manager's cleanup hook.
//!
//! The publisher ([`KubeApi`]) runs one small task per kind of write over
//! the one watch of the Node: each keeps only the latest state to write
//! (latest wins), retries with backoff while the API server is away, and
//! never holds up registration, allocation or prepare.

mod client;
mod client_certificate;
mod config;
mod csi;
mod error;
mod metrics;
mod node;
mod observe;
mod publisher;
mod resource_slices;
mod status;
mod writes;

pub use client::credentials::Connection;
pub(crate) use client::deadline::passed_deadline;
pub use client_certificate::config::ClientCertificates;
pub use client_certificate::error::ClientCertificateError;
pub use config::{
    CSINODE_RECHECK, KubeApiConfig, KubeConfigSource, NODE_LEASE_DURATION, POD_RECONCILE_PERIOD,
    SYNC_FREQUENCY, default_node_name,
};
pub(crate) use config::{KUBE_API_BURST, KUBE_API_QPS};
pub use error::KubeApiError;
pub(crate) use error::request;
pub use metrics::KubeApiMetrics;
pub use node::kubelet_status::KUBELET_VERSION;
pub use node::lease::NODE_LEASE_NAMESPACE;
pub use node::registration::{
    DEFAULT_KUBELET_PORT, DEFAULT_MAX_PODS, NODE_STATUS_REPORT_FREQUENCY,
    NODE_STATUS_UPDATE_FREQUENCY, NodeRegistration, validate_node_labels,
};
pub(crate) use node::volumes_in_use::VolumesInUse;
pub(crate) use observe::reflected::reflect;
pub use publisher::{KubeApi, KubeApiHandle};
pub use resource_slices::ResourceSliceCleanup;
pub use status::{KubeApiStatus, WriteKind};
