//! Serving a device plugin: `v1beta1.DevicePlugin` on a socket in the device
//! plugin directory, registered through `kubelet.sock` (or `plugins_registry`).
//!
//! The author implements [`DevicePluginService`] (Allocate, and optionally
//! preferred allocation and PreStartContainer) and pushes device lists through
//! a [`Devices`] handle. When the kubelet restarts it deletes plugin sockets
//! and re-creates `kubelet.sock`; [`DevicePluginServer`] notices either at
//! once (inotify) and binds and registers again, where the kubelet's own
//! stub polls every 10 s.
//!
//! With [`DevicePluginBuilder::cdi`], the server writes a CDI spec of the
//! devices for which [`DevicePluginService::container_edits`] says what a
//! container gets, and names those CDI devices in every Allocate answer.

mod cdi;
mod devices;
mod error;
mod grpc;
mod kubelet;
mod registration;
mod server;
mod service;

pub use devices::Devices;
pub use error::DevicePluginError;
pub use registration::Registration;
pub use server::{DevicePluginBuilder, DevicePluginServer};
pub use service::DevicePluginService;
