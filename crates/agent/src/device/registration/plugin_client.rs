//! Every call the agent makes to a device plugin, in one place: dial and
//! GetDevicePluginOptions when it connects, the ListAndWatch stream that feeds
//! its devices to the manager, and GetPreferredAllocation, Allocate and
//! PreStartContainer when devices are allocated. Each call goes through the
//! call layer ([`nodeplugins_api::call_layer`]), which keeps its deadline
//! (the configuration's, per method) and its span, and ends at once with
//! [`CallError::Disconnected`] when the plugin's connection is dropped by
//! the manager.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodeplugins_api::call::{self, CallError};
use nodeplugins_api::call_layer::{CallLayer, CallService};
use nodeplugins_api::deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use nodeplugins_api::deviceplugin::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, Device, DevicePluginOptions, Empty,
    PreStartContainerRequest, PreferredAllocationRequest,
};
use nodeplugins_api::transport::{TransportError, dial, root_cause};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::device::config::DeviceManagerConfig;
use crate::device::metrics::DeviceMetrics;

/// Why a device plugin could not be connected.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The plugin's socket could not be dialed.
    #[error("failed to dial device plugin: {}", root_cause(.source))]
    Dial {
        /// The plugin's socket.
        socket: PathBuf,
        /// The cause.
        #[source]
        source: TransportError,
    },
    /// GetDevicePluginOptions failed or went unanswered.
    #[error("failed to get device plugin options: {source}")]
    Options {
        /// The plugin's socket.
        socket: PathBuf,
        /// The cause.
        #[source]
        source: CallError,
    },
    /// This socket is already connected for this resource.
    #[error("device plugin already connected: resource {resource} at socket {socket}")]
    AlreadyConnected {
        /// The resource.
        resource: String,
        /// The socket.
        socket: String,
    },
    /// The device manager is shutting down.
    #[error("the device manager is stopping")]
    Stopping,
}

/// How a ListAndWatch stream ended.
#[derive(Debug)]
pub(crate) enum StreamEnd {
    /// The manager disconnected the plugin.
    Disconnected,
    /// The plugin ended the stream.
    Closed,
    /// The call or the stream failed.
    Failed(tonic::Status),
}

/// A connected device plugin instance. Cheap to clone; every clone's calls
/// end when [`disconnect`](Self::disconnect) is called on any of them.
#[derive(Debug, Clone)]
pub(crate) struct PluginClient {
    client: DevicePluginClient<CallService<Channel>>,
    socket: Arc<Path>,
    options: DevicePluginOptions,
    disconnected: CancellationToken,
}

impl PluginClient {
    /// Dials the plugin at `socket` and asks for its options.
    pub(crate) async fn connect(
        socket: &Path,
        config: &DeviceManagerConfig,
    ) -> Result<Self, DeviceError> {
        let channel =
            dial(socket, config.dial_timeout)
                .await
                .map_err(|source| DeviceError::Dial {
                    socket: socket.to_owned(),
                    source,
                })?;
        let mut client = DevicePluginClient::new(policy(socket, config).service(channel));
        let options = call::answer(client.get_device_plugin_options(Empty {}))
            .await
            .map_err(|source| DeviceError::Options {
                socket: socket.to_owned(),
                source,
            })?;
        Ok(Self {
            client,
            socket: Arc::from(socket),
            options,
            disconnected: CancellationToken::new(),
        })
    }

    /// A client that has not dialed (it would at its first call): for tests
    /// of the manager's state, which never call the plugin.
    #[cfg(test)]
    pub(crate) fn unconnected(socket: &Path, options: DevicePluginOptions) -> Self {
        let channel =
            nodeplugins_api::transport::dial_lazy(socket, std::time::Duration::from_secs(1))
                .expect("a socket path short enough to dial");
        let config = DeviceManagerConfig::new("/nonexistent");
        Self {
            client: DevicePluginClient::new(policy(socket, &config).service(channel)),
            socket: Arc::from(socket),
            options,
            disconnected: CancellationToken::new(),
        }
    }

    /// The plugin's socket.
    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// What the plugin said it offers.
    pub(crate) fn options(&self) -> DevicePluginOptions {
        self.options
    }

    /// Ends the ListAndWatch stream and every call still running.
    pub(crate) fn disconnect(&self) {
        self.disconnected.cancel();
    }

    /// Follows ListAndWatch, handing each device list to `on_list`, until the
    /// stream ends, fails, or the plugin is disconnected.
    pub(crate) async fn list_and_watch(&self, mut on_list: impl FnMut(Vec<Device>)) -> StreamEnd {
        let mut client = self.client.clone();
        let stream = tokio::select! {
            () = self.disconnected.cancelled() => return StreamEnd::Disconnected,
            stream = client.list_and_watch(Empty {}) => stream,
        };
        let mut stream = match stream {
            Ok(stream) => stream.into_inner(),
            Err(status) => return StreamEnd::Failed(status),
        };
        loop {
            let message = tokio::select! {
                () = self.disconnected.cancelled() => return StreamEnd::Disconnected,
                message = stream.message() => message,
            };
            match message {
                Ok(Some(update)) => on_list(update.devices),
                Ok(None) => return StreamEnd::Closed,
                Err(status) => return StreamEnd::Failed(status),
            }
        }
    }

    /// The plugin's preferred choice of `count` among `available`, which
    /// must include `must_include` (devices the container is given again),
    /// if it gives a usable one (exactly `count` distinct devices, all
    /// available, those it must include among them; otherwise the agent's
    /// own choice stands). A failed call is an error, as upstream's is: the
    /// plugin said it answers and did not.
    pub(crate) async fn preferred_allocation(
        &self,
        resource: &str,
        available: &[String],
        must_include: &[String],
        count: usize,
    ) -> Result<Option<Vec<String>>, CallError> {
        let Ok(allocation_size) = i32::try_from(count) else {
            return Ok(None);
        };
        let request = PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: available.to_vec(),
                must_include_device_i_ds: must_include.to_vec(),
                allocation_size,
            }],
        };
        let mut client = self.client.clone();
        let response = self
            .until_disconnected(client.get_preferred_allocation(request))
            .await?;
        let Some(ids) = response
            .container_responses
            .into_iter()
            .next()
            .map(|r| r.device_i_ds)
        else {
            return Ok(None);
        };
        let distinct: BTreeSet<&String> = ids.iter().collect();
        let usable = ids.len() == count
            && distinct.len() == count
            && ids.iter().all(|id| available.contains(id))
            && must_include.iter().all(|id| ids.contains(id));
        if !usable {
            tracing::warn!(%resource, socket = %self.socket.display(), ?ids,
                "GetPreferredAllocation gave an unusable answer; choosing devices without it");
        }
        Ok(usable.then_some(ids))
    }

    /// Allocate for one container, timed in the allocation histogram. The
    /// plugin's answer must hold one container response.
    pub(crate) async fn allocate(
        &self,
        resource: &str,
        devices: &[String],
        metrics: &DeviceMetrics,
    ) -> Result<ContainerAllocateResponse, AllocateCallError> {
        let request = AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: devices.to_vec(),
            }],
        };
        let mut client = self.client.clone();
        let started = Instant::now();
        let response = self.until_disconnected(client.allocate(request)).await;
        if !matches!(
            response,
            Err(CallError::Timeout(_) | CallError::Disconnected)
        ) {
            metrics.allocation_took(resource, started.elapsed());
        }
        response?
            .container_responses
            .into_iter()
            .next()
            .ok_or(AllocateCallError::NoContainers)
    }

    /// PreStartContainer, when the plugin asked for it.
    pub(crate) async fn pre_start_container(&self, devices: &[String]) -> Result<(), CallError> {
        if !self.options.pre_start_required {
            return Ok(());
        }
        let mut client = self.client.clone();
        let request = PreStartContainerRequest {
            devices_ids: devices.to_vec(),
        };
        self.until_disconnected(client.pre_start_container(request))
            .await
            .map(|_| ())
    }

    async fn until_disconnected<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, CallError> {
        tokio::select! {
            () = self.disconnected.cancelled() => Err(CallError::Disconnected),
            answer = call::answer(call) => answer,
        }
    }
}

/// The calls' policy for the plugin at `socket`: each method's deadline
/// from `config` (GetPreferredAllocation shares the options' deadline, as
/// upstream's), none for the ListAndWatch stream.
fn policy(socket: &Path, config: &DeviceManagerConfig) -> CallLayer {
    CallLayer::new("device plugin", socket.display())
        .method_deadline("GetDevicePluginOptions", Some(config.options_timeout))
        .method_deadline("GetPreferredAllocation", Some(config.options_timeout))
        .method_deadline("Allocate", Some(config.allocate_timeout))
        .method_deadline("PreStartContainer", Some(config.pre_start_timeout))
        .method_deadline("ListAndWatch", None)
}

/// Why Allocate failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AllocateCallError {
    /// The call failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The answer had no container response.
    #[error("no containers return in allocation response")]
    NoContainers,
}
