//! Serving a device plugin: `v1beta1.DevicePlugin` on a socket in the device
//! plugin directory, registered through `kubelet.sock` (or `plugins_registry`).
//!
//! The author implements [`DevicePluginService`] (Allocate, and optionally
//! preferred allocation and PreStartContainer) and pushes device lists through
//! a [`Devices`] handle. When the kubelet restarts it deletes plugin sockets
//! and re-creates `kubelet.sock`; [`DevicePluginServer`] notices either at
//! once (inotify) and binds and registers again, where the kubelet's own
//! stub polls every 10 s.

mod grpc;
mod kubelet;
mod server;

use std::path::PathBuf;
use std::sync::Arc;

use nodeplugins_api::constants::device_plugin::{HEALTHY, UNHEALTHY};
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::transport::TransportError;
use tokio::sync::watch;
use tonic::Status;

pub use server::{DevicePluginBuilder, DevicePluginServer};

use crate::registrar::RegistrarError;

/// What a device plugin author implements.
#[async_trait::async_trait]
pub trait DevicePluginService: Send + Sync + 'static {
    /// Prepares `devices` for one container and says how to expose them.
    /// Every id is one the plugin lists: an Allocate naming another is
    /// refused (InvalidArgument) before this is called.
    async fn allocate(&self, devices: Vec<String>)
    -> Result<dp::ContainerAllocateResponse, Status>;

    /// Picks `size` devices from `available`, including `must_include`; `None`
    /// (the default) means the plugin has no preference and does not offer it.
    async fn preferred_allocation(
        &self,
        _available: &[String],
        _must_include: &[String],
        _size: usize,
    ) -> Option<Vec<String>> {
        None
    }

    /// Whether [`preferred_allocation`](Self::preferred_allocation) is implemented.
    fn offers_preferred_allocation(&self) -> bool {
        false
    }

    /// Called before each container start when [`pre_start_required`](Self::pre_start_required).
    async fn pre_start_container(&self, _devices: Vec<String>) -> Result<(), Status> {
        Ok(())
    }

    /// Whether the kubelet must call PreStartContainer.
    fn pre_start_required(&self) -> bool {
        false
    }
}

/// The device list the plugin reports; every change goes out on ListAndWatch.
#[derive(Clone)]
pub struct Devices {
    tx: Arc<watch::Sender<Vec<dp::Device>>>,
}

impl Devices {
    /// A list starting with `devices`.
    pub fn new(devices: Vec<dp::Device>) -> Self {
        Self {
            tx: Arc::new(watch::channel(devices).0),
        }
    }

    /// Replaces the whole list.
    pub fn set(&self, devices: Vec<dp::Device>) {
        self.tx.send_replace(devices);
    }

    /// Marks device `id` healthy or not; returns whether it exists.
    pub fn set_health(&self, id: &str, healthy: bool) -> bool {
        let mut found = false;
        self.tx.send_if_modified(|list| {
            for device in list.iter_mut().filter(|d| d.id == id) {
                found = true;
                let health = if healthy { HEALTHY } else { UNHEALTHY };
                if device.health != health {
                    device.health = health.into();
                    return true;
                }
            }
            false
        });
        found
    }

    /// The current list.
    pub fn get(&self) -> Vec<dp::Device> {
        self.tx.borrow().clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Vec<dp::Device>> {
        self.tx.subscribe()
    }
}

/// How the plugin registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// Through `<dir>/kubelet.sock`.
    KubeletSocket,
    /// Through a registration socket in this `plugins_registry` directory.
    Registry(PathBuf),
}

/// Why the plugin stopped.
#[derive(Debug, thiserror::Error)]
pub enum DevicePluginError {
    /// The socket could not be served.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The registration socket could not be served.
    #[error(transparent)]
    Registrar(#[from] RegistrarError),
    /// The device plugin directory could not be watched.
    #[error("cannot watch {dir:?}: {source}")]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The plugin's task ended abnormally.
    #[error("the device plugin's task ended abnormally: {0}")]
    Panicked(#[source] tokio::task::JoinError),
}
