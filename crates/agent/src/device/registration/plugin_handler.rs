//! Device plugins registering through `plugins_registry` (type `DevicePlugin`).

use std::path::Path;

use nodeplugins_api::constants::device_plugin::VERSION;

use crate::device::handle::DeviceHandle;
use crate::plugin_manager::handler::{HandlerError, PluginHandler};
use nodeplugins_api::names::is_extended_resource_name;

/// The `DevicePlugin` handler: the plugin's name is its resource name and its
/// endpoint the absolute path of its DevicePlugin socket.
#[derive(Clone)]
pub struct DevicePluginHandler {
    devices: DeviceHandle,
}

impl DevicePluginHandler {
    /// A handler connecting plugins through `devices`.
    pub fn new(devices: DeviceHandle) -> Self {
        Self { devices }
    }
}

#[async_trait::async_trait]
impl PluginHandler for DevicePluginHandler {
    async fn validate(
        &self,
        name: &str,
        _endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError> {
        if !versions.iter().any(|v| v == VERSION) {
            return Err(HandlerError::new(format!(
                "manager version, {VERSION}, is not among plugin supported versions {versions:?}"
            )));
        }
        if !is_extended_resource_name(name) {
            return Err(HandlerError::new(format!(
                "invalid name of device plugin socket: {name:?} is not a valid extended resource name"
            )));
        }
        Ok(())
    }

    async fn register(
        &self,
        name: &str,
        endpoint: &str,
        _versions: &[String],
    ) -> Result<(), HandlerError> {
        self.devices
            .connect(name, Path::new(endpoint))
            .await
            .map_err(HandlerError::from_error)
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        self.devices.disconnect(name, Path::new(endpoint));
    }
}
