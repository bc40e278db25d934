//! The container runtime the node's pods run on: one interface,
//! [`ContainerRuntime`], and two implementations:
//!
//! - [`CriRuntime`]: a real runtime (containerd, CRI-O) through CRI v1
//!   over its Unix socket, as the kubelet's `--container-runtime-endpoint`
//!   names it; every call goes through one tower layer
//!   (the `call_policy` layer) with the kubelet's deadline, its
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
//! | `cri` | CRI v1 over a Unix socket |
//! | `call_policy` | deadlines, metrics and spans of every CRI call |
//! | `simulated` | the runtime that runs nothing |
//! | `error` | why a call failed |

mod call_policy;
mod container_runtime;
mod cri;
mod error;
mod simulated;
mod spec;

pub use call_policy::{RUNTIME_REQUEST_TIMEOUT, RuntimeMetrics};
pub use container_runtime::{ContainerRuntime, RuntimeVersion};
pub use cri::CriRuntime;
pub use error::RuntimeError;
pub use simulated::SimulatedRuntime;
pub use spec::{
    CONTAINER_NAME_LABEL, ContainerEvent, ContainerEventKind, ContainerSpec, ContainerState,
    ContainerStatus, ContainerUser, DnsSpec, LinuxResources, POD_LOGS_DIR, POD_NAME_LABEL,
    POD_NAMESPACE_LABEL, POD_UID_LABEL, PodIdentity, PullPolicy, SandboxSpec, SandboxStatus,
};
