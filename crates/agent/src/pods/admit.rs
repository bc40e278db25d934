//! Admitting a pod, as the kubelet's admit handlers and container manager
//! do: each container's device plugin resources allocated all or none,
//! then the pod's ResourceClaims read, checked and prepared.
//!
//! | file | what |
//! |---|---|
//! | `admission` | admitting one pod: devices, then claims |
//! | `spec` | what a pod asks for, read from the pod |
//! | `claims` | a pod's ResourceClaims read and checked |
//! | `container` | what a container got at admission, merged as the kubelet merges it |
//! | `held` | what the node holds for pods, from both managers |
//! | `served` | what the plugins serve, to wake waiting pods |
//! | `sysctls` | the sysctls a pod may set, as the kubelet's sysctl admission allows them |

#[cfg(feature = "kube")]
pub(super) mod admission;
#[cfg(feature = "kube")]
pub(super) mod claims;
pub(super) mod container;
#[cfg(feature = "kube")]
pub(super) mod held;
#[cfg(feature = "kube")]
pub(super) mod served;
#[cfg(feature = "kube")]
pub(super) mod spec;
#[cfg(feature = "kube")]
pub(super) mod sysctls;
