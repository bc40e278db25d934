//! DRA drivers registering through `plugins_registry` (type `DRAPlugin`).

use crate::dra::handle::DraHandle;
use crate::plugin_manager::handler::{HandlerError, PluginHandler};

/// The `DRAPlugin` handler: the plugin's name is the driver name, its
/// endpoint the absolute path of its service socket, and its supported
/// versions the gRPC services it serves.
#[derive(Clone)]
pub struct DraPluginHandler {
    dra: DraHandle,
}

impl DraPluginHandler {
    /// A handler registering drivers through `dra`.
    pub fn new(dra: DraHandle) -> Self {
        Self { dra }
    }
}

#[async_trait::async_trait]
impl PluginHandler for DraPluginHandler {
    async fn validate(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError> {
        DraHandle::check_registration(name, endpoint, versions)
            .map(|_| ())
            .map_err(HandlerError::from_error)
    }

    async fn register(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError> {
        // Connected once the plugin was told (`notified`), so that its
        // answer is not held up by this connection.
        self.dra
            .register_unconnected(name, endpoint, versions)
            .await
            .map_err(HandlerError::from_error)
    }

    async fn notified(&self, name: &str, endpoint: &str) {
        self.dra.connect(name, endpoint);
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        self.dra.deregister(name, endpoint).await;
    }
}
