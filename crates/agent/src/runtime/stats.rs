//! What a runtime measures of its containers and sandboxes (CRI
//! `ListContainerStats`, `ListPodSandboxStats`): the cumulative CPU time,
//! the memory working set and the swap in use, each with the time it was
//! taken. The kubelet's resource metrics (`/metrics/resource`, what the
//! metrics server and `kubectl top` read) are made of these.

use std::time::SystemTime;

use super::spec::PodIdentity;

/// One measurement and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When it was taken.
    pub at: SystemTime,
    /// What was measured: nanoseconds of CPU, or bytes.
    pub value: u64,
}

/// A container's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStats {
    /// The runtime's id of the container.
    pub id: String,
    /// The pod it is for.
    pub pod: PodIdentity,
    /// Its name in the pod.
    pub name: String,
    /// Cumulative CPU time, in nanoseconds.
    pub cpu: Option<Sample>,
    /// Memory working set, in bytes.
    pub memory_working_set: Option<Sample>,
    /// Swap in use, in bytes.
    pub swap: Option<Sample>,
    /// Swap it may still use, in bytes (its limit less what it uses).
    pub swap_available: Option<Sample>,
}

/// A sandbox's usage: the pod's, all its containers together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxStats {
    /// The runtime's id of the sandbox.
    pub id: String,
    /// The pod.
    pub pod: PodIdentity,
    /// Cumulative CPU time, in nanoseconds.
    pub cpu: Option<Sample>,
    /// Memory working set, in bytes.
    pub memory_working_set: Option<Sample>,
}
