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
//! | file | what |
//! |---|---|
//! | `manager`, `owner` | the owner task: watch events, operations, reconcile |
//! | `operation` | one pod's operation: admitted then run, stopped then given back |
//! | `report` | what operations and runtime listings tell the owner on the side |
//! | `tracked` | one pod's state and every decision about it |
//! | `admission` | admitting one pod: devices, then claims |
//! | `admission_gate` | one pod's devices allocated at a time |
//! | `served` | what the plugins serve, to wake waiting pods |
//! | `worker` | one admitted pod's containers run through the runtime |
//! | `pod_sync` | what a running pod's containers need next, and its phase |
//! | `crash_backoff` | the kubelet's crash-loop back-off |
//! | `api_status` | the pod's status as the kubelet writes it |
//! | `resource_health` | the health of what each container holds, in its status |
//! | `status_writer` | the pod's status written, a deleted pod deleted |
//! | `lifecycle_events` | the runtime's container events told to workers |
//! | `runtime_spec` | what the runtime is asked for a pod, as the kubelet asks |
//! | `linux_resources` | a container's cgroup resources, as the kubelet sets them |
//! | `boot` | whether the node rebooted since the agent last ran |
//! | `service_env` | the Services' variables every container gets |
//! | `pod_files` | a pod's hosts file and termination logs |
//! | `host_dns` | the host's DNS settings, for a host-network sandbox |
//! | `terminate` | stopping a pod's containers and sandbox |
//! | `release` | stopping what a pod runs, then giving back what it held |
//! | `held` | what the node holds for pods, from both managers |
//! | `spec` | what a pod asks for, read from the pod |
//! | `claims` | a pod's ResourceClaims read and checked |
//! | `container` | what a container gets, merged as the kubelet merges it |
//! | `watch` | the pods bound to the node |
//! | `informers` | the node's Node and the cluster's Services, watched |
//! | `kube_events` | Warning Events on pods |
//! | `manual` | unpreparing a pod by hand, from the records |
//! | `handle`, `status`, `pod`, `config` | what callers hold and see |

#[cfg(feature = "kube")]
mod admission;
#[cfg(feature = "kube")]
mod admission_gate;
#[cfg(feature = "kube")]
mod api_status;
#[cfg(feature = "kube")]
mod boot;
#[cfg(feature = "kube")]
mod claims;
#[cfg(feature = "kube")]
mod config;
mod container;
#[cfg(feature = "kube")]
mod crash_backoff;
#[cfg(feature = "kube")]
mod handle;
#[cfg(feature = "kube")]
mod held;
#[cfg(feature = "kube")]
mod host_dns;
#[cfg(feature = "kube")]
mod informers;
#[cfg(feature = "kube")]
mod kube_events;
#[cfg(feature = "kube")]
mod lifecycle_events;
#[cfg(feature = "kube")]
mod linux_resources;
#[cfg(feature = "kube")]
mod manager;
mod manual;
#[cfg(feature = "kube")]
mod operation;
#[cfg(feature = "kube")]
mod owner;
mod pod;
#[cfg(feature = "kube")]
mod pod_files;
#[cfg(feature = "kube")]
mod pod_sync;
#[cfg(feature = "kube")]
mod release;
#[cfg(feature = "kube")]
mod report;
#[cfg(feature = "kube")]
mod resource_health;
#[cfg(feature = "kube")]
mod runtime_spec;
#[cfg(feature = "kube")]
mod served;
#[cfg(feature = "kube")]
mod service_env;
#[cfg(feature = "kube")]
mod spec;
mod status;
#[cfg(feature = "kube")]
mod status_writer;
#[cfg(feature = "kube")]
mod terminate;
#[cfg(feature = "kube")]
mod tracked;
#[cfg(feature = "kube")]
mod watch;
#[cfg(feature = "kube")]
mod worker;

#[cfg(feature = "kube")]
pub use admission::AdmissionError;
#[cfg(feature = "kube")]
pub use boot::current_boot_id;
#[cfg(feature = "kube")]
pub use claims::{PodClaimsError, PodClaimsReader};
#[cfg(feature = "kube")]
pub use config::{BOOT_RECORD_FILE, PodsConfig, SIMULATED_RUNTIME_FILE};
pub use container::{ContainerKind, ContainerResources};
#[cfg(feature = "kube")]
pub use handle::{PodsError, PodsHandle, PodsStopped};
#[cfg(feature = "kube")]
pub use kube_events::{FAILED_PREPARE_DYNAMIC_RESOURCES, UNEXPECTED_ADMISSION_ERROR};
#[cfg(feature = "kube")]
pub use manager::PodsManager;
pub(crate) use manual::unprepare_by_name;
pub use pod::{ContainerDevices, PodClaims, PodRef, PreparedPod, UnpreparedPod};
#[cfg(feature = "kube")]
pub use release::ReleaseError;
pub use status::{PodPhase, PodStatus, PodsSnapshot};
