//! What callers hold: a cheap handle to the device manager. Calls to
//! plugins (dial, allocation) run in the caller's task; allocations and
//! releases are decided and recorded in the device book there too, and the
//! manager's task records the plugins the dials found.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::command::{Command, Shared};
use super::config::DeviceManagerConfig;
use super::metrics::DeviceMetrics;
use super::snapshot::{AllocatableDevice, DeviceSnapshot};
use super::status::ResourceStatus;
use crate::checkpoint::CheckpointProblem;
use crate::common::owner::Mailbox;
use crate::common::served_socket::SocketStatus;
use crate::device::allocation::allocate::allocate;
#[cfg(feature = "kube")]
use crate::device::allocation::allocate::{OnDisk, allocate_recorded};
use crate::device::allocation::allocate_error::AllocateError;
use crate::device::allocation::container_allocation::{AllocationRequest, ContainerAllocation};
use crate::device::registration::plugin_client::{DeviceError, PluginClient};
use crate::event::AgentEvent;
use crate::metrics::ReadinessCheck;
use crate::published::Store;
use nodeplugins_api::constants::layout::KUBELET_SOCKET;

/// The device manager has stopped.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the device manager is not running")]
pub struct DeviceManagerStopped;

/// Connects plugins, allocates devices and reads the device manager's state.
/// Cheap to clone; valid while the manager runs.
#[derive(Clone)]
pub struct DeviceHandle {
    pub(crate) commands: Mailbox<Command>,
    pub(crate) shared: Arc<Shared>,
}

impl DeviceHandle {
    /// The settings.
    pub fn config(&self) -> &DeviceManagerConfig {
        &self.shared.config
    }

    /// The manager's metrics.
    pub fn metrics(&self) -> &DeviceMetrics {
        &self.shared.metrics
    }

    /// A counter that increases on every change, for waiting on state.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.store.changes()
    }

    /// Events from now on: plugins connecting and leaving, device lists
    /// changing, allocations and releases.
    pub fn events(&self) -> broadcast::Receiver<AgentEvent> {
        self.shared.events.subscribe()
    }

    /// Connects the device plugin for `resource` serving at `socket`: dials,
    /// asks for its options, records the instance (the newest becomes
    /// primary) and starts following its device list, each list applied
    /// to the book by the stream's task; the stream's end goes to the
    /// manager's task. Returns once the instance is recorded; waits for the
    /// manager to run.
    pub async fn connect(&self, resource: &str, socket: &Path) -> Result<(), DeviceError> {
        if self.commands.is_closed() {
            return Err(DeviceError::Stopping);
        }
        self.shared
            .store
            .wait_until_ready()
            .await
            .map_err(|_| DeviceError::Stopping)?;
        let plugin = PluginClient::connect(socket, self.config()).await?;
        let book = self.shared.book.clone();
        let id = book.connect(resource, &plugin)?;
        self.shared.metrics.registered(resource);
        let commands = self.commands.clone();
        let resource = resource.to_string();
        self.shared.tasks.spawn(async move {
            let end = plugin
                .list_and_watch(|devices| book.device_list(&resource, id, devices))
                .await;
            let _ = commands.send(Command::StreamEnded {
                resource,
                instance: id,
                end,
            });
        });
        Ok(())
    }

    /// Disconnects the instance of `resource` at `socket`, if any.
    pub fn disconnect(&self, resource: &str, socket: &Path) {
        let _ = self.commands.send(Command::Disconnect {
            resource: resource.to_string(),
            socket: socket.to_owned(),
        });
    }

    /// Allocates devices to one container: every resource of `request` or
    /// none. Asking again for the same counts returns what the container
    /// already holds; a failed request leaves what it held before untouched.
    /// Returns one allocation per resource, in resource name order.
    pub async fn allocate(
        &self,
        request: &AllocationRequest,
    ) -> Result<Vec<ContainerAllocation>, AllocateError> {
        allocate(&self.commands, &self.shared, request).await
    }

    #[cfg(feature = "kube")]
    /// [`allocate`](Self::allocate), returning once the allocations are
    /// recorded (every later request sees them) with the end of their
    /// checkpoint write to wait for apart.
    #[tracing::instrument(name = "devices", skip_all, fields(call = "allocate", container = %request.container))]
    pub(crate) async fn allocate_recorded(
        &self,
        request: &AllocationRequest,
    ) -> Result<(Vec<ContainerAllocation>, OnDisk), AllocateError> {
        allocate_recorded(&self.commands, &self.shared, request).await
    }

    /// Calls PreStartContainer for container `container` of pod `pod_uid`
    /// with the devices it holds, for each resource whose plugin asked for
    /// the call: right before each start of the container, as the kubelet
    /// does. A container holding no devices costs nothing.
    #[tracing::instrument(name = "devices", skip_all, fields(call = "pre_start", container = %container))]
    pub async fn pre_start_container(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Result<(), AllocateError> {
        crate::device::allocation::pre_start::pre_start(
            &self.commands,
            &self.shared,
            pod_uid,
            container,
        )
        .await
    }

    /// Frees every device held by pod `pod_uid`, once that is on disk;
    /// returns how many (container, resource) allocations ended.
    #[tracing::instrument(name = "devices", skip_all, fields(call = "release"))]
    pub async fn release(&self, pod_uid: &str) -> Result<usize, DeviceManagerStopped> {
        if self.commands.is_closed() {
            return Err(DeviceManagerStopped);
        }
        self.running_snapshot().await?;
        let (released, written) = self.shared.book.release(pod_uid);
        if let Some(written) = written
            && let Ok(Err(e)) = written.await
        {
            tracing::error!(error = %e, "cannot write the device checkpoint");
        }
        Ok(released)
    }

    /// `kubelet.sock`: whether it is there, and how many times it was served
    /// again after being removed.
    pub fn kubelet_socket(&self) -> SocketStatus {
        let path = self.config().dir.join(KUBELET_SOCKET);
        SocketStatus::of(&path, self.metrics().kubelet_socket_recreations())
    }

    /// The state after the latest change (empty, and not
    /// [`running`](DeviceSnapshot::running), before the manager runs).
    pub fn snapshot(&self) -> Arc<DeviceSnapshot> {
        self.shared.store.get()
    }

    /// The state's published snapshots, for following them.
    pub fn store(&self) -> Store<DeviceSnapshot> {
        self.shared.store.clone()
    }

    /// The state after the latest change, once the manager runs and has
    /// read its checkpoint.
    pub async fn running_snapshot(&self) -> Result<Arc<DeviceSnapshot>, DeviceManagerStopped> {
        self.shared
            .store
            .wait_until_ready()
            .await
            .map_err(|_| DeviceManagerStopped)
    }

    /// The resources, sorted by name.
    pub async fn status(&self) -> Result<Vec<ResourceStatus>, DeviceManagerStopped> {
        Ok(self.running_snapshot().await?.status_at(Instant::now()))
    }

    /// Every allocation, sorted by pod, container and resource.
    pub async fn allocations(&self) -> Result<Vec<ContainerAllocation>, DeviceManagerStopped> {
        let snapshot = self.running_snapshot().await?;
        Ok(snapshot
            .allocations()
            .iter()
            .map(|a| ContainerAllocation::clone(a))
            .collect())
    }

    /// Every healthy device, with its NUMA nodes, sorted by resource and id.
    pub async fn allocatable(&self) -> Result<Vec<AllocatableDevice>, DeviceManagerStopped> {
        Ok(self.running_snapshot().await?.allocatable())
    }

    /// What is wrong with the checkpoint, if anything: it could not be
    /// loaded, it was repaired from its backup at start, or the last write
    /// failed.
    pub async fn checkpoint_problem(
        &self,
    ) -> Result<Option<CheckpointProblem>, DeviceManagerStopped> {
        Ok(self.running_snapshot().await?.checkpoint_problem().cloned())
    }

    /// Waits until the resources satisfy `pred`, re-checking after every
    /// change, and returns them; `None` after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&[ResourceStatus]) -> bool,
    ) -> Result<Option<Vec<ResourceStatus>>, DeviceManagerStopped> {
        self.shared
            .store
            .wait_for(timeout, |s| s.status_at(Instant::now()), |r| pred(r))
            .await
            .map_err(|_| DeviceManagerStopped)
    }
}

/// Not ready while `kubelet.sock` is missing: no device plugin can register.
impl ReadinessCheck for DeviceHandle {
    fn not_ready(&self) -> Option<String> {
        let socket = self.kubelet_socket();
        (!socket.present).then(|| format!("{} is not being served", socket.path.display()))
    }
}
