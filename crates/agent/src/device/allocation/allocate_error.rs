//! Why devices could not be allocated.

use std::sync::Arc;

use crate::checkpoint::CheckpointError;
use crate::device::registration::plugin_client::AllocateCallError;
use nodeplugins_api::call::CallError;

/// Why devices could not be allocated; messages follow upstream's.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AllocateError {
    /// No plugin ever registered the resource.
    #[error("cannot allocate unregistered device {0}")]
    Unregistered(String),
    /// Every device of the resource is unhealthy.
    #[error("no healthy devices present; cannot allocate unhealthy devices {0}")]
    NoHealthy(String),
    /// Devices held by the container turned unhealthy.
    #[error(
        "previously allocated devices are no longer healthy; cannot allocate unhealthy devices {0}"
    )]
    PreviouslyAllocatedUnhealthy(String),
    /// The container already holds a different number of devices.
    #[error(
        "pod {pod:?} container {container:?} changed request for resource {resource:?} from {from} to {to}"
    )]
    ChangedRequest {
        /// The UID of the pod asking.
        pod: String,
        /// Container name.
        container: String,
        /// The extended resource asked for.
        resource: String,
        /// Devices held.
        from: usize,
        /// Devices requested.
        to: usize,
    },
    /// Not enough free healthy devices.
    #[error(
        "requested number of devices unavailable for {resource}. Requested: {requested}, Available: {available}"
    )]
    Unavailable {
        /// The extended resource asked for.
        resource: String,
        /// Devices requested.
        requested: usize,
        /// Devices free.
        available: usize,
    },
    /// The resource's plugin is not connected (within its grace period).
    #[error("endpoint for {0} has been stopped: no device plugin is connected")]
    Stopped(String),
    /// The Allocate call failed.
    #[error("Allocate failed for {resource}: {source}")]
    Rpc {
        /// The extended resource asked for.
        resource: String,
        /// The plugin's answer.
        #[source]
        source: AllocateCallError,
    },
    /// GetPreferredAllocation failed or went unanswered.
    #[error("device plugin GetPreferredAllocation rpc failed with err: {source}")]
    Preferred {
        /// The extended resource asked for.
        resource: String,
        /// The cause.
        #[source]
        source: CallError,
    },
    /// PreStartContainer failed or went unanswered.
    #[error("device plugin PreStartContainer rpc failed with err: {source}")]
    PreStart {
        /// The extended resource asked for.
        resource: String,
        /// The cause.
        #[source]
        source: CallError,
    },
    /// The allocation could not be written to the checkpoint, so it was undone.
    #[error("cannot record the allocation: {0}")]
    Checkpoint(#[source] Arc<CheckpointError>),
    /// A request for zero devices.
    #[error("a request for {0} must ask for at least one device")]
    Zero(String),
    /// A request naming no resource.
    #[error("the request names no resource")]
    Empty,
    /// The pod UID holds devices under another name.
    #[error("pod {pod} is {known}, not {given}")]
    PodRenamed {
        /// The UID of the pod asking.
        pod: String,
        /// `namespace/name` it holds devices under.
        known: String,
        /// `namespace/name` of the request.
        given: String,
    },
    /// The device manager is not running.
    #[error("the device manager is stopping")]
    Stopping,
}

impl AllocateError {
    /// The resource the error is about, if it is about one.
    pub fn resource(&self) -> Option<&str> {
        match self {
            Self::Unregistered(r)
            | Self::NoHealthy(r)
            | Self::PreviouslyAllocatedUnhealthy(r)
            | Self::Stopped(r)
            | Self::Zero(r) => Some(r),
            Self::ChangedRequest { resource, .. }
            | Self::Unavailable { resource, .. }
            | Self::Rpc { resource, .. }
            | Self::Preferred { resource, .. }
            | Self::PreStart { resource, .. } => Some(resource),
            Self::Checkpoint(_) | Self::Empty | Self::PodRenamed { .. } | Self::Stopping => None,
        }
    }
}
