//! Registering CSI drivers.

use nodeplugins_api::call::{self, CallError};
use nodeplugins_api::call_layer::CallLayer;
use std::path::Path;
use std::time::Duration;

use nodeplugins_api::csi::v1::NodeGetInfoRequest;
use nodeplugins_api::csi::v1::node_client::NodeClient;
use nodeplugins_api::transport::{TransportError, dial, root_cause};

use super::store::{CsiDriver, CsiDriverStore};
use crate::plugin_manager::handler::{HandlerError, PluginHandler};
use nodeplugins_api::csi_version::{Version, highest_supported};

/// NodeGetInfo timeout (upstream `csiTimeout`, 2 min).
pub(crate) const NODE_GET_INFO_TIMEOUT: Duration = Duration::from_secs(120);

/// The handler for plugins of type `CSIPlugin`.
///
/// Upstream removes a driver on any deregistration of its name, ignoring
/// the endpoint, so removing an old instance's socket after a newer instance
/// registered removes the newer one. Here a deregistration removes the driver
/// only if it is still registered at that endpoint.
#[derive(Debug, Clone)]
pub struct CsiHandler {
    drivers: CsiDriverStore,
    timeout: Duration,
}

impl Default for CsiHandler {
    fn default() -> Self {
        Self::new(NODE_GET_INFO_TIMEOUT)
    }
}

impl CsiHandler {
    /// A handler whose NodeGetInfo calls time out after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self {
            drivers: CsiDriverStore::default(),
            timeout,
        }
    }

    /// The registered drivers.
    pub fn drivers(&self) -> CsiDriverStore {
        self.drivers.clone()
    }

    fn check(&self, name: &str, versions: &[String]) -> Result<Version, HandlerError> {
        let highest = highest_supported(versions).map_err(HandlerError::from_error)?;
        if let Some(existing) = self.drivers.get(name)
            && let Some(existing_version) = Version::parse_generic(&existing.version)
            && existing_version >= highest
        {
            return Err(HandlerError::new(format!(
                "another driver with the same name ({name}) is already registered with a higher supported version: {existing_version}"
            )));
        }
        Ok(highest)
    }
}

/// Why a CSI driver's node information could not be had.
#[derive(Debug, thiserror::Error)]
enum NodeInfoError {
    #[error("dial CSI driver at {endpoint}: {}", root_cause(source))]
    Dial {
        endpoint: String,
        #[source]
        source: TransportError,
    },
    #[error("NodeGetInfo failed: {0}")]
    Call(#[source] CallError),
    #[error("NodeGetInfo returned an empty node id")]
    EmptyNodeId,
}

fn socket_path(endpoint: &str) -> &Path {
    Path::new(endpoint.strip_prefix("unix://").unwrap_or(endpoint))
}

#[async_trait::async_trait]
impl PluginHandler for CsiHandler {
    async fn validate(
        &self,
        name: &str,
        _endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError> {
        self.check(name, versions).map(|_| ())
    }

    async fn register(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError> {
        let version = self.check(name, versions)?;
        let mut driver = CsiDriver {
            name: name.to_string(),
            endpoint: endpoint.to_string(),
            version: version.to_string(),
            node_id: String::new(),
            max_volumes_per_node: 0,
            accessible_topology: Default::default(),
        };
        let pending = self.drivers.begin(driver.clone());
        let info = async {
            let channel = dial(socket_path(endpoint), self.timeout)
                .await
                .map_err(|source| NodeInfoError::Dial {
                    endpoint: endpoint.to_string(),
                    source,
                })?;
            let policy = CallLayer::new("CSI driver", endpoint).deadline(self.timeout);
            let mut client = NodeClient::new(policy.service(channel));
            call::answer(client.node_get_info(NodeGetInfoRequest {}))
                .await
                .map_err(NodeInfoError::Call)
        };
        let info = match info.await {
            Ok(info) if !info.node_id.is_empty() => Ok(info),
            Ok(_) => Err(NodeInfoError::EmptyNodeId),
            Err(e) => Err(e),
        }
        .map_err(HandlerError::from_error);
        let info = match info {
            Ok(info) => info,
            Err(e) => {
                // Leave no trace and put back what was there before: the plugin
                // manager retries the whole registration.
                self.drivers.abandon(name, pending);
                return Err(e);
            }
        };
        driver.node_id = info.node_id;
        driver.max_volumes_per_node = info.max_volumes_per_node;
        driver.accessible_topology = info
            .accessible_topology
            .map(|t| t.segments.into_iter().collect())
            .unwrap_or_default();
        tracing::info!(driver = %name, %endpoint, version = %driver.version, node_id = %driver.node_id, "CSI driver registered");
        if !self.drivers.complete(&pending, driver) {
            tracing::info!(driver = %name, %endpoint, "a newer registration of this CSI driver replaced this one meanwhile");
        }
        Ok(())
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        if self.drivers.remove_if_endpoint(name, endpoint) {
            tracing::info!(driver = %name, %endpoint, "CSI driver deregistered");
        } else {
            tracing::info!(driver = %name, %endpoint, "CSI driver instance gone; a newer instance stays registered");
        }
    }
}
