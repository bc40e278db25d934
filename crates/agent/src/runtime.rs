//! The container runtime the node's pods run on: one interface,
//! [`ContainerRuntime`], and two implementations:
//!
//! - [`CriRuntime`]: a real runtime (containerd, CRI-O) through CRI v1
//!   over its Unix socket, as the kubelet's `--container-runtime-endpoint`
//!   names it; every call goes through the one call layer
//!   ([`nodeplugins_api::call_layer`]) with the kubelet's deadline, its
//!   metric names and a span, rather than through code at each call site;
//! - [`SimulatedRuntime`]: containers that "run" from their start until
//!   they are stopped, for nodes without a runtime (tests, the demo, many
//!   nodes on one machine).
//!
//! The interface speaks of sandboxes and containers in the runtime's
//! terms ([`SandboxSpec`], [`ContainerSpec`], [`ContainerStatus`]) and
//! none of CRI's wire types, so the pods owner drives both alike.
//!
//! | file | what |
//! |---|---|
//! | `container_runtime` | the interface |
//! | `spec` | what is asked of a runtime and what it reports |
//! | `security` | how a sandbox and its containers are confined |
//! | `cri` | CRI v1 over a Unix socket |
//! | `cri_security` | the confinement in CRI's messages |
//! | `termination_message` | an exited container's termination message, from its file or its log |
//! | `metrics` | the kubelet's runtime operation metrics |
//! | `simulated` | the runtime that runs nothing |
//! | `streaming` | a user's session with a container: exec, attach, port-forward |
//! | `error` | why a call failed |

mod container_runtime;
mod cri;
mod cri_security;
mod error;
mod metrics;
mod security;
mod simulated;
mod spec;
mod stats;
mod streaming;
mod termination_message;

pub use container_runtime::{
    ContainerRuntime, RuntimeCondition, RuntimeHandler, RuntimeStatus, RuntimeVersion,
};
pub use cri::CriRuntime;
pub use error::RuntimeError;
pub use metrics::{RUNTIME_REQUEST_TIMEOUT, RuntimeMetrics};
pub use security::{
    Capabilities, ContainerSecurity, ImageUser, NamespaceMode, Namespaces, SandboxSecurity,
    SeLinuxLabel, SecurityProfile, SupplementalGroupsPolicy,
};
pub use simulated::SimulatedRuntime;
#[cfg(feature = "kube")]
pub(crate) use spec::CONTAINER_HASH_ANNOTATION;
pub use spec::{
    CONTAINER_NAME_LABEL, ContainerEvent, ContainerEventKind, ContainerSpec, ContainerState,
    ContainerStatus, ContainerUser, DeviceNodeSpec, DnsSpec, LinuxResources, MountImage,
    MountPropagation, MountSpec, POD_LOGS_DIR, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
    PodIdentity, PullPolicy, PulledImage, SandboxSpec, SandboxStatus,
};
pub use stats::{ContainerStats, Sample, SandboxStats};
pub use streaming::{AttachRequest, EXEC_SYNC_DEFAULT_DEADLINE, ExecRequest, ExecSyncOutput};
