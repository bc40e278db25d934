//! The device manager: device plugins register through `kubelet.sock` or
//! `plugins_registry`; the manager follows each plugin's ListAndWatch stream
//! and keeps capacity (all devices) and allocatable (healthy ones) per
//! resource. Several instances of one resource on different sockets coexist
//! (the newest is primary, a survivor is promoted when it leaves); when the
//! last one disconnects its devices turn unhealthy and the resource is
//! forgotten after a grace period (5 min).
//!
//! Not built yet: allocation (preferred allocation, NUMA alignment,
//! Allocate, PreStartContainer), the checkpoint, and the `resources`,
//! `allocate` and `release` CLI commands.

mod endpoint;
mod handler;
mod manager;
pub mod resource_name;
mod server;

pub use handler::DevicePluginHandler;
pub use manager::{
    DIAL_TIMEOUT, DeviceError, DeviceManager, DeviceManagerConfig, DeviceStatus,
    ENDPOINT_STOP_GRACE_PERIOD, InstanceStatus, OPTIONS_TIMEOUT, ResourceStatus,
};
pub use server::{clean_plugin_directory, serve_kubelet_socket};
