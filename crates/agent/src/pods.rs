//! The node's pods: what the kubelet does with its plugins when a pod comes
//! and goes (feature `kube` for everything but the types).
//!
//! The pods owner ([`PodsManager`]) watches the pods bound to the node
//! (`spec.nodeName`) and, for each:
//!
//! - **admits** it as the kubelet's container manager does: each container's
//!   device plugin resources allocated all or none, init containers first,
//!   an ended init container's devices reusable by the containers after
//!   it; then its DRA claims read, checked and prepared (recorded before
//!   any driver is called). A failure is a Warning Event on the pod with
//!   the kubelet's reason (`UnexpectedAdmissionError`,
//!   `FailedPrepareDynamicResources`) and is tried again with backoff; a
//!   pod whose claims are not allocated or reserved yet waits.
//! - **runs** it, once admitted, through the container runtime
//!   (`crate::runtime`: CRI, or the simulated one) as the kubelet's pod
//!   worker does: its sandbox, init containers one after another, sidecars
//!   and app containers, PreStartContainer right before each start,
//!   restarts with the crash-loop back-off, and its status written to the
//!   API as the containers change;
//! - **gives back** what it holds once it is deleted, `Succeeded` or
//!   `Failed`: its containers stopped within the grace period and its
//!   sandbox removed, then its claims unprepared (with their last pod) and
//!   its devices released; a deleted pod is then deleted for good;
//! - **reconciles**: at start, on every listing of the watch, before
//!   admitting and every 60 s, whatever the device manager or the DRA
//!   manager holds for a pod UID the API does not have as an active pod is
//!   given back (pods deleted while the agent was away, pods made again
//!   under the same name).
//!
//! It publishes a [`PodsSnapshot`]: each pod's phase and, once admitted,
//! what each container got ([`ContainerResources`]: device ids, device
//! nodes, mounts, environment, annotations, CDI devices), which is what a
//! container runtime needs. With pods not served (`--pods off`), pods are
//! prepared only when asked ([`PodsHandle::prepare_pod`]).
//!
//! The rooms follow the kubelet's phases; each has its own table:
//!
//! | room | what |
//! |---|---|
//! | `lifecycle` | the watch, the owner's loop, one operation per pod through its phases |
//! | `admit` | admitting one pod: devices, then claims |
//! | `run_options` | what the runtime is given for a pod and each container |
//! | `run` | one admitted pod's containers run through the runtime |
//! | `status` | the pod's status as the kubelet writes it |
//! | `static_pods` | the pods the node runs from its own files, and their mirrors |
//! | `teardown` | stopping what a pod runs, then giving back what it held |
//!
//! Beside them:
//!
//! | file | what |
//! |---|---|
//! | `manager` | starting the owner task and everything it drives |
//! | `boot` | whether the node rebooted since the agent last ran |
//! | `informers` | the node's Node and the cluster's Services, watched |
//! | `kube_events` | Warning Events on pods |
//! | `manual` | unpreparing a pod by hand, from the records |
//! | `handle`, `snapshot`, `pod`, `config` | what callers hold and see |

mod admit;
#[cfg(feature = "kube")]
mod boot;
#[cfg(feature = "kube")]
mod config;
#[cfg(feature = "kube")]
mod handle;
#[cfg(feature = "kube")]
mod informers;
#[cfg(feature = "kube")]
mod kube_events;
#[cfg(feature = "kube")]
mod lifecycle;
#[cfg(feature = "kube")]
mod manager;
mod manual;
mod pod;
#[cfg(feature = "kube")]
mod run;
#[cfg(feature = "kube")]
mod run_options;
mod snapshot;
#[cfg(feature = "kube")]
mod static_pods;
#[cfg(feature = "kube")]
mod status;
#[cfg(feature = "kube")]
mod teardown;

#[cfg(feature = "kube")]
pub use admit::admission::AdmissionError;
#[cfg(feature = "kube")]
pub use admit::claims::{PodClaimsError, PodClaimsReader};
pub use admit::container::{ContainerKind, ContainerResources};
#[cfg(feature = "kube")]
pub use boot::current_boot_id;
#[cfg(feature = "kube")]
pub use config::{BOOT_RECORD_FILE, PodsConfig, SIMULATED_RUNTIME_FILE};
#[cfg(feature = "kube")]
pub use handle::{PodsError, PodsHandle, PodsStopped};
#[cfg(feature = "kube")]
pub use kube_events::{FAILED_PREPARE_DYNAMIC_RESOURCES, UNEXPECTED_ADMISSION_ERROR};
#[cfg(feature = "kube")]
pub use manager::PodsManager;
pub(crate) use manual::unprepare_by_name;
pub use pod::{ContainerDevices, PodClaims, PodRef, PreparedPod, UnpreparedPod};
#[cfg(feature = "kube")]
pub(crate) use run_options::env_sources::env_objects_named;
#[cfg(feature = "kube")]
pub(crate) use run_options::expand::expand;
#[cfg(feature = "kube")]
pub use run_options::pod_dns::PodDnsConfig;
pub use snapshot::{PodPhase, PodStatus, PodsSnapshot, VolumeStatus};
#[cfg(feature = "kube")]
pub use static_pods::source::{DEFAULT_FILE_CHECK_FREQUENCY, StaticPodsConfig};
#[cfg(feature = "kube")]
pub use teardown::release::ReleaseError;
