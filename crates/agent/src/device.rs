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
//! response per container; devices are reserved while the calls run, and
//! nothing is recorded unless Allocate succeeded.
//!
//! Allocations and healthy devices are checkpointed atomically with a
//! checksum after every change and before an allocation is reported; on start
//! the checkpoint brings allocations back and each resource it names waits,
//! with capacity 0, for its plugin to register again. A damaged checkpoint is
//! moved aside and reported, never silently replaced.

mod allocation;
pub mod checkpoint;
mod endpoint;
mod event;
mod handler;
mod manager;
pub mod resource_name;
mod selection;
mod server;

pub use allocation::{AllocateError, ContainerAllocation, DeviceNodeSpec, MountSpec};
pub use event::{DeviceEvent, DeviceEventKind};
pub use handler::DevicePluginHandler;
pub use manager::{
    ALLOCATE_TIMEOUT, DIAL_TIMEOUT, DeviceError, DeviceManager, DeviceManagerConfig, DeviceStatus,
    ENDPOINT_STOP_GRACE_PERIOD, InstanceStatus, OPTIONS_TIMEOUT, PRE_START_TIMEOUT, ResourceStatus,
};
pub use server::{clean_plugin_directory, serve_kubelet_socket};
