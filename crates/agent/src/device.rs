//! The device manager: device plugins register through `kubelet.sock` or
//! `plugins_registry`; the manager follows each plugin's ListAndWatch stream
//! and keeps capacity (all devices) and allocatable (healthy ones) per
//! resource. Several instances of one resource on different sockets coexist
//! (the newest is primary, a survivor is promoted when it leaves); when the
//! last one disconnects its devices turn unhealthy and the resource is
//! forgotten after a grace period (5 min).
//!
//! Allocation takes healthy free devices, NUMA-aligned where possible, asks
//! the plugin for its preferred allocation when it offers one, calls Allocate
//! (and PreStartContainer when the plugin asks for it) and records the
//! response per container; devices are reserved while the calls run, a
//! request for several resources gets all of them or none, and nothing is
//! recorded unless Allocate succeeded.
//!
//! Allocations and healthy devices are checkpointed atomically with a
//! checksum, and an allocation is reported only once it is on disk; on start
//! the checkpoint brings allocations back and each resource it names waits,
//! with capacity 0, for its plugin to register again. A damaged checkpoint is
//! moved aside and reported, never silently replaced.
//!
//! | file | what |
//! |---|---|
//! | `config` | settings and the kubelet's timeouts |
//! | `manager` | the task that hears plugins leave and their streams end, ends grace periods, and starting it |
//! | `command` | what handles and the task exchange and share |
//! | `handle` | what callers hold; connecting a plugin and starting its stream |
//! | `book` | the state, its checkpoint and snapshot under one lock, shared by the task and the callers that connect, allocate and release |
//! | `state` | everything the manager knows: resources, and who holds their devices |
//! | `resource` | one resource: its plugin instances and devices |
//! | `allocator` | who holds which devices, and every allocation decision |
//! | `allocate` | an allocation's steps in the caller's task: the calls to the plugin |
//! | `allocate_steps`, `allocate_error` | what the steps hand each other; why one failed |
//! | `pre_start` | PreStartContainer, right before a container that holds devices starts |
//! | `selection` | NUMA-aligned choice of devices |
//! | `container_allocation` | what a container asks for and what it was given |
//! | `plugin_client` | every call to a device plugin |
//! | `checkpoint` | what survives a restart |
//! | `snapshot` | the state published after every change, for readers |
//! | `kubelet_socket` | the registration service on `kubelet.sock` |
//! | `plugin_handler` | device plugins registering through `plugins_registry` |
//! | `status`, `metrics` | what operators see (events: `crate::event`) |

mod allocation;
mod book;
mod checkpoint;
mod command;
mod config;
mod handle;
mod manager;
mod metrics;
mod registration;
mod resource;
mod snapshot;
mod state;
mod status;
#[cfg(test)]
pub(crate) mod test_support;

/// The runtime's vocabulary, in which a plugin's Allocate response is kept.
pub use crate::runtime::{DeviceNodeSpec, MountSpec};
#[cfg(feature = "kube")]
pub(crate) use allocation::allocate::OnDisk;
pub use allocation::allocate_error::AllocateError;
pub use allocation::container_allocation::{AllocationRequest, ContainerAllocation};
pub use checkpoint::{BACKUP_FILE, CHECKPOINT_FILE, DeviceCheckpoint};
pub use config::DeviceManagerConfig;
pub use handle::{DeviceHandle, DeviceManagerStopped};
pub use manager::{DeviceManager, DeviceManagerError};
pub use metrics::DeviceMetrics;
pub use nodeplugins_api::call::CallError;
pub use registration::plugin_client::{AllocateCallError, DeviceError};
pub use registration::plugin_handler::DevicePluginHandler;
pub use snapshot::{AllocatableDevice, DeviceSnapshot};
pub use status::{DeviceStatus, InstanceStatus, ResourceStatus};
