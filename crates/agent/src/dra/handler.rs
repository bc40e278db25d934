//! DRA drivers registering through `plugins_registry` (type `DRAPlugin`).

use super::manager::{DraError, DraManager};
use super::service::choose_service;
use crate::handler::{HandlerError, PluginHandler};

/// The `DRAPlugin` handler: the plugin's name is the driver name, its
/// endpoint the absolute path of its service socket, and its supported
/// versions the gRPC services it serves.
#[derive(Clone)]
pub struct DraPluginHandler {
    manager: DraManager,
}

impl DraPluginHandler {
    /// A handler registering drivers with `manager`.
    pub fn new(manager: DraManager) -> Self {
        Self { manager }
    }
}

#[async_trait::async_trait]
impl PluginHandler for DraPluginHandler {
    async fn validate(
        &self,
        name: &str,
        _endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError> {
        if name.is_empty() {
            return Err(HandlerError::new(DraError::EmptyName.to_string()));
        }
        choose_service(versions).map(|_| ())
    }

    async fn register(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError> {
        self.manager
            .register(name, endpoint, versions)
            .await
            .map_err(|e| HandlerError::new(e.to_string()))
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        self.manager.deregister(name, endpoint);
    }
}
