//! The device manager's state: per resource, the connected plugin instances
//! (keyed by socket; the newest is primary), the devices the primary reports
//! with their health, and the grace period after the last instance leaves.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use nodeplugins_api::constants::device_plugin::HEALTHY;
use nodeplugins_api::deviceplugin::v1beta1::{Device, DevicePluginOptions};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use nodeplugins_api::deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use nodeplugins_api::deviceplugin::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, PreStartContainerRequest, PreferredAllocationRequest,
};
use tonic::transport::Channel;

use super::allocation::{AllocateError, ContainerAllocation};
use super::checkpoint::{self, CHECKPOINT_FILE, CheckpointData, CheckpointError};
use super::endpoint;
use super::event::{DeviceEvent, DeviceEventKind};
use super::selection::{Candidate, aligned_order};
use crate::metrics::{CounterVec, DEFAULT_BUCKETS, HistogramVec};
use crate::registry::status::unix_ms;

/// How long a resource stays known after its last plugin disconnected
/// (upstream `endpointStopGracePeriod`, 5 min).
pub const ENDPOINT_STOP_GRACE_PERIOD: Duration = Duration::from_secs(300);
/// Dialing a device plugin (upstream: 10 s).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// GetDevicePluginOptions and GetPreferredAllocation. Upstream sets none, so
/// a hanging plugin blocks forever; here they are bounded.
pub const OPTIONS_TIMEOUT: Duration = Duration::from_secs(10);
/// Allocate. Upstream sets none, so a plugin that never answers blocks the
/// container's start forever; here it is bounded.
pub const ALLOCATE_TIMEOUT: Duration = Duration::from_secs(120);
/// PreStartContainer (upstream `KubeletPreStartContainerRPCTimeoutInSecs`, 30 s).
pub const PRE_START_TIMEOUT: Duration = Duration::from_secs(
    nodeplugins_api::constants::device_plugin::PRE_START_CONTAINER_TIMEOUT_SECS,
);

/// Settings of the device manager.
#[derive(Debug, Clone)]
pub struct DeviceManagerConfig {
    /// The device plugin directory, `<root>/device-plugins`.
    pub dir: PathBuf,
    /// See [`ENDPOINT_STOP_GRACE_PERIOD`].
    pub grace_period: Duration,
    /// See [`DIAL_TIMEOUT`].
    pub dial_timeout: Duration,
    /// See [`OPTIONS_TIMEOUT`].
    pub options_timeout: Duration,
}

impl DeviceManagerConfig {
    /// Upstream defaults for the directory `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            grace_period: ENDPOINT_STOP_GRACE_PERIOD,
            dial_timeout: DIAL_TIMEOUT,
            options_timeout: OPTIONS_TIMEOUT,
        }
    }
}

/// Why a device plugin could not be connected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The plugin's socket could not be dialed.
    #[error("failed to dial device plugin: {0}")]
    Dial(String),
    /// GetDevicePluginOptions failed.
    #[error("failed to get device plugin options: {0}")]
    Options(String),
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

#[derive(Debug, Clone)]
pub(crate) struct Instance {
    pub(crate) client: DevicePluginClient<Channel>,
    pub(crate) socket: PathBuf,
    pub(crate) options: DevicePluginOptions,
    pub(crate) connected_at: SystemTime,
    pub(crate) cancel: CancellationToken,
    /// The last device list this instance sent, if any.
    pub(crate) devices: Option<Vec<Device>>,
}

#[derive(Debug, Default)]
pub(crate) struct Resource {
    /// Instance id → instance; the highest id (newest) is the primary.
    instances: BTreeMap<u64, Instance>,
    /// Device id → device, as the primary last reported.
    devices: BTreeMap<String, Device>,
    /// Set while no instance is connected.
    stopped_at: Option<Instant>,
    expiry: Option<CancellationToken>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    resources: BTreeMap<String, Resource>,
    next_instance: u64,
    /// (pod, container, resource) → what was allocated.
    allocations: BTreeMap<(String, String, String), ContainerAllocation>,
    /// Devices held by allocations still in progress, per resource.
    reserved: BTreeMap<String, BTreeSet<String>>,
}

impl State {
    /// Healthy devices of `resource` that no container holds or is being given.
    fn free(&self, resource: &str) -> Vec<Candidate> {
        let Some(r) = self.resources.get(resource) else {
            return Vec::new();
        };
        let reserved = self.reserved.get(resource);
        let taken: BTreeSet<&String> = self
            .allocations
            .values()
            .filter(|a| a.resource == resource)
            .flat_map(|a| a.devices.iter())
            .chain(reserved.into_iter().flatten())
            .collect();
        r.devices
            .values()
            .filter(|d| is_healthy(d) && !taken.contains(&d.id))
            .map(|d| Candidate {
                id: d.id.clone(),
                numa: d
                    .topology
                    .as_ref()
                    .map(|t| t.nodes.iter().map(|n| n.id).collect())
                    .unwrap_or_default(),
            })
            .collect()
    }
}

/// The device manager. Cheap to clone.
#[derive(Clone)]
pub struct DeviceManager {
    inner: Arc<Inner>,
}

struct Inner {
    config: DeviceManagerConfig,
    state: Mutex<State>,
    changes: watch::Sender<u64>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    /// Serializes checkpoint writes so the newest state is written last.
    writer: tokio::sync::Mutex<()>,
    /// A background checkpoint write is queued; it will include every change
    /// made before it takes `writer`, so further changes need no other write.
    write_queued: AtomicBool,
    /// Why the checkpoint could not be loaded or last written, for status.
    checkpoint_error: Mutex<Option<String>>,
    /// Events for operators.
    events: broadcast::Sender<DeviceEvent>,
    /// `kubelet_device_plugin_registration_total`.
    registrations: CounterVec,
    /// `kubelet_device_plugin_alloc_duration_seconds`.
    alloc_duration: HistogramVec,
}

/// One device, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStatus {
    /// Device id.
    pub id: String,
    /// `Healthy` or `Unhealthy`.
    pub health: String,
    /// NUMA nodes the device is attached to.
    pub numa_nodes: Vec<i64>,
}

/// One connected plugin instance, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InstanceStatus {
    /// The plugin's socket.
    pub socket: PathBuf,
    /// Whether this is the instance whose devices count.
    pub primary: bool,
    /// The plugin wants PreStartContainer calls.
    pub pre_start_required: bool,
    /// The plugin implements GetPreferredAllocation.
    pub get_preferred_allocation_available: bool,
    /// When it connected (Unix milliseconds).
    pub connected_at_unix_ms: u64,
}

/// One resource, as status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResourceStatus {
    /// Extended resource name.
    pub name: String,
    /// All devices.
    pub capacity: usize,
    /// Healthy devices.
    pub allocatable: usize,
    /// Devices held by containers.
    pub allocated: usize,
    /// Devices being allocated right now.
    pub reserved: usize,
    /// The devices.
    pub devices: Vec<DeviceStatus>,
    /// Connected plugin instances.
    pub instances: Vec<InstanceStatus>,
    /// Time left before the resource is forgotten, while no plugin is connected.
    pub removal_in_ms: Option<u64>,
}

fn is_healthy(device: &Device) -> bool {
    device.health == HEALTHY
}

impl DeviceManager {
    /// A manager with no resources.
    pub fn new(config: DeviceManagerConfig) -> Self {
        let shutdown = CancellationToken::new();
        Self {
            inner: Arc::new(Inner {
                config,
                state: Mutex::new(State::default()),
                changes: watch::channel(0).0,
                tasks: TaskTracker::new(),
                shutdown,
                writer: tokio::sync::Mutex::new(()),
                write_queued: AtomicBool::new(false),
                checkpoint_error: Mutex::new(None),
                events: broadcast::channel(1024).0,
                registrations: CounterVec::new(
                    "kubelet_device_plugin_registration_total",
                    "Cumulative number of device plugin registrations.",
                    &["resource_name"],
                ),
                alloc_duration: HistogramVec::new(
                    "kubelet_device_plugin_alloc_duration_seconds",
                    "Duration in seconds to serve a device plugin Allocation request.",
                    &["resource_name"],
                    DEFAULT_BUCKETS,
                ),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &DeviceManagerConfig {
        &self.inner.config
    }

    /// Appends the device manager's metrics to `out`.
    pub fn render_metrics(&self, out: &mut String) {
        self.inner.registrations.render(out);
        self.inner.alloc_duration.render(out);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.inner.changes.send_modify(|v| *v += 1);
    }

    /// A counter that increases on every change, for waiting on state.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Events from now on: plugins connecting and leaving, device lists
    /// changing, allocations and releases.
    pub fn events(&self) -> broadcast::Receiver<DeviceEvent> {
        self.inner.events.subscribe()
    }

    fn emit(
        &self,
        kind: DeviceEventKind,
        resource: &str,
        endpoint: Option<&Path>,
        detail: Option<String>,
    ) {
        let _ = self.inner.events.send(DeviceEvent {
            kind,
            resource: resource.to_string(),
            endpoint: endpoint.map(|p| p.display().to_string()),
            detail,
            at_unix_ms: unix_ms(SystemTime::now()),
        });
    }

    /// Connects the device plugin for `resource` serving at `socket`: dials,
    /// asks for its options, records the instance (the newest becomes
    /// primary) and starts following its device list. Returns once the
    /// instance is recorded.
    pub async fn connect(&self, resource: &str, socket: &Path) -> Result<(), DeviceError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(DeviceError::Stopping);
        }
        let (client, options) = endpoint::connect(socket, &self.inner.config).await?;
        let cancel = self.inner.shutdown.child_token();
        let id = {
            let mut state = self.lock();
            let entry = state.resources.entry(resource.to_string()).or_default();
            if entry.instances.values().any(|i| i.socket == socket) {
                return Err(DeviceError::AlreadyConnected {
                    resource: resource.to_string(),
                    socket: socket.display().to_string(),
                });
            }
            if let Some(expiry) = entry.expiry.take() {
                expiry.cancel();
            }
            entry.stopped_at = None;
            state.next_instance += 1;
            let id = state.next_instance;
            let instance = Instance {
                client: client.clone(),
                socket: socket.to_owned(),
                options,
                connected_at: SystemTime::now(),
                cancel: cancel.clone(),
                devices: None,
            };
            if let Some(entry) = state.resources.get_mut(resource) {
                entry.instances.insert(id, instance);
            }
            id
        };
        self.inner.registrations.inc(&[resource]);
        tracing::info!(%resource, socket = %socket.display(), pre_start = options.pre_start_required,
            preferred_allocation = options.get_preferred_allocation_available, "device plugin connected");
        self.emit(DeviceEventKind::Connected, resource, Some(socket), None);
        self.changed();
        let manager = self.clone();
        let resource = resource.to_string();
        self.inner.tasks.spawn(async move {
            endpoint::list_and_watch(&manager, &resource, id, client, cancel).await;
            manager.disconnected(&resource, id);
        });
        Ok(())
    }

    /// Disconnects the instance of `resource` at `socket`, if any.
    pub fn disconnect(&self, resource: &str, socket: &Path) {
        let state = self.lock();
        if let Some(entry) = state.resources.get(resource) {
            for instance in entry.instances.values().filter(|i| i.socket == socket) {
                instance.cancel.cancel();
            }
        }
    }

    /// Applies a ListAndWatch update from instance `id` and queues a
    /// checkpoint write. The stream is not held up by the write: device
    /// health protects nothing on disk, and a burst of updates is written
    /// once, with the newest state.
    pub(crate) fn update(&self, resource: &str, id: u64, devices: Vec<Device>) {
        let changed = {
            let mut state = self.lock();
            let Some(entry) = state.resources.get_mut(resource) else {
                return;
            };
            let Some(instance) = entry.instances.get_mut(&id) else {
                return;
            };
            instance.devices = Some(devices.clone());
            let primary = entry.instances.keys().next_back().copied();
            if primary != Some(id) {
                None
            } else {
                let counts = |devices: &BTreeMap<String, Device>| {
                    let healthy = devices.values().filter(|d| is_healthy(d)).count();
                    (healthy, devices.len())
                };
                let before = counts(&entry.devices);
                entry.devices = devices.into_iter().map(|d| (d.id.clone(), d)).collect();
                let after = counts(&entry.devices);
                (before != after).then(|| format!("{} healthy of {}", after.0, after.1))
            }
        };
        if let Some(detail) = changed {
            self.emit(
                DeviceEventKind::DevicesChanged,
                resource,
                None,
                Some(detail),
            );
        }
        self.changed();
        self.persist_later();
    }

    /// Queues a checkpoint write in the background unless one is already
    /// queued (which will then include the latest change).
    fn persist_later(&self) {
        if self.inner.write_queued.swap(true, Ordering::SeqCst) {
            return;
        }
        let manager = self.clone();
        self.inner.tasks.spawn(async move {
            if let Err(e) = manager.persist().await {
                tracing::error!(error = %e, "cannot write the device checkpoint");
            }
        });
    }

    /// Forgets instance `id`; promotes a survivor, or starts the grace period.
    fn disconnected(&self, resource: &str, id: u64) {
        let grace = {
            let mut state = self.lock();
            let Some(entry) = state.resources.get_mut(resource) else {
                return;
            };
            let Some(gone) = entry.instances.remove(&id) else {
                return;
            };
            // Calls still running against this instance are abandoned.
            gone.cancel.cancel();
            tracing::info!(%resource, socket = %gone.socket.display(), "device plugin disconnected");
            self.emit(
                DeviceEventKind::Disconnected,
                resource,
                Some(&gone.socket),
                None,
            );
            if let Some((_, primary)) = entry.instances.iter().next_back() {
                if let Some(devices) = &primary.devices {
                    entry.devices = devices.iter().map(|d| (d.id.clone(), d.clone())).collect();
                }
                None
            } else {
                for device in entry.devices.values_mut() {
                    device.health = nodeplugins_api::constants::device_plugin::UNHEALTHY.into();
                }
                entry.stopped_at = Some(Instant::now());
                let expiry = self.inner.shutdown.child_token();
                entry.expiry = Some(expiry.clone());
                Some(expiry)
            }
        };
        self.changed();
        if let Some(expiry) = grace {
            self.schedule_expiry(resource.to_string(), expiry);
        }
    }

    /// Forgets `resource` after the grace period unless `expiry` is cancelled first.
    fn schedule_expiry(&self, resource: String, expiry: CancellationToken) {
        let manager = self.clone();
        let period = self.inner.config.grace_period;
        self.inner.tasks.spawn(async move {
            tokio::select! {
                () = expiry.cancelled() => {}
                () = tokio::time::sleep(period) => manager.expire(&resource),
            }
        });
    }

    fn expire(&self, resource: &str) {
        let removed = {
            let mut state = self.lock();
            let expired = state
                .resources
                .get(resource)
                .is_some_and(|r| r.instances.is_empty() && r.stopped_at.is_some());
            expired && state.resources.remove(resource).is_some()
        };
        if removed {
            tracing::info!(%resource, "device plugin resource removed after its grace period");
            self.emit(DeviceEventKind::Expired, resource, None, None);
            self.changed();
        }
    }

    /// The resources, sorted by name.
    pub fn status(&self) -> Vec<ResourceStatus> {
        let state = self.lock();
        let now = Instant::now();
        let grace = self.inner.config.grace_period;
        state
            .resources
            .iter()
            .map(|(name, r)| {
                let primary = r.instances.keys().next_back().copied();
                ResourceStatus {
                    name: name.clone(),
                    capacity: r.devices.len(),
                    allocatable: r.devices.values().filter(|d| is_healthy(d)).count(),
                    allocated: state
                        .allocations
                        .values()
                        .filter(|a| &a.resource == name)
                        .map(|a| a.devices.len())
                        .sum(),
                    reserved: state.reserved.get(name).map_or(0, BTreeSet::len),
                    devices: r
                        .devices
                        .values()
                        .map(|d| DeviceStatus {
                            id: d.id.clone(),
                            health: d.health.clone(),
                            numa_nodes: d
                                .topology
                                .as_ref()
                                .map(|t| t.nodes.iter().map(|n| n.id).collect())
                                .unwrap_or_default(),
                        })
                        .collect(),
                    instances: r
                        .instances
                        .iter()
                        .map(|(id, i)| InstanceStatus {
                            socket: i.socket.clone(),
                            primary: Some(*id) == primary,
                            pre_start_required: i.options.pre_start_required,
                            get_preferred_allocation_available: i
                                .options
                                .get_preferred_allocation_available,
                            connected_at_unix_ms: unix_ms(i.connected_at),
                        })
                        .collect(),
                    removal_in_ms: r
                        .stopped_at
                        .map(|t| (t + grace).saturating_duration_since(now).as_millis() as u64),
                }
            })
            .collect()
    }

    /// Allocates `count` devices of `resource` to `container` of pod
    /// `pod_uid`. Asking again for the same count returns what the container
    /// already holds.
    pub async fn allocate(
        &self,
        pod_uid: &str,
        container: &str,
        resource: &str,
        count: usize,
    ) -> Result<ContainerAllocation, AllocateError> {
        let result = self.try_allocate(pod_uid, container, resource, count).await;
        let subject = format!("pod {pod_uid} container {container}");
        match &result {
            Ok(a) => self.emit(
                DeviceEventKind::Allocated,
                resource,
                None,
                Some(format!("{subject}: {}", a.devices.join(","))),
            ),
            Err(e) => self.emit(
                DeviceEventKind::AllocationFailed,
                resource,
                None,
                Some(format!("{subject}: {e}")),
            ),
        }
        result
    }

    async fn try_allocate(
        &self,
        pod_uid: &str,
        container: &str,
        resource: &str,
        count: usize,
    ) -> Result<ContainerAllocation, AllocateError> {
        if count == 0 {
            return Err(AllocateError::Zero(resource.into()));
        }
        let key = (
            pod_uid.to_string(),
            container.to_string(),
            resource.to_string(),
        );
        let (order, instance) = {
            let state = self.lock();
            if let Some(existing) = state.allocations.get(&key) {
                if existing.devices.len() != count {
                    return Err(AllocateError::ChangedRequest {
                        pod: pod_uid.into(),
                        container: container.into(),
                        resource: resource.into(),
                        from: existing.devices.len(),
                        to: count,
                    });
                }
                let r = state.resources.get(resource);
                let healthy =
                    |id: &String| r.and_then(|r| r.devices.get(id)).is_some_and(is_healthy);
                if !existing.devices.iter().all(healthy) {
                    return Err(AllocateError::PreviouslyAllocatedUnhealthy(resource.into()));
                }
                return Ok(existing.clone());
            }
            let r = state
                .resources
                .get(resource)
                .ok_or_else(|| AllocateError::Unregistered(resource.into()))?;
            if !r.devices.values().any(is_healthy) {
                return Err(AllocateError::NoHealthy(resource.into()));
            }
            let instance = r
                .instances
                .values()
                .next_back()
                .cloned()
                .ok_or_else(|| AllocateError::Stopped(resource.into()))?;
            let free = state.free(resource);
            if free.len() < count {
                return Err(AllocateError::Unavailable {
                    resource: resource.into(),
                    requested: count,
                    available: free.len(),
                });
            }
            (aligned_order(&free, count), instance)
        };

        // Ask the plugin for its preference among all free devices, aligned first.
        let mut chosen: Vec<String> = order[..count].to_vec();
        if instance.options.get_preferred_allocation_available
            && order.len() > count
            && let Some(preferred) = preferred(
                &instance,
                resource,
                &order,
                count,
                self.inner.config.options_timeout,
            )
            .await?
        {
            chosen = preferred;
        }

        // Reserve, re-checking that nothing was taken meanwhile.
        {
            let mut state = self.lock();
            let free: BTreeSet<String> = state.free(resource).into_iter().map(|c| c.id).collect();
            if !chosen.iter().all(|id| free.contains(id)) {
                let again = aligned_order(&state.free(resource), count);
                if again.len() < count {
                    return Err(AllocateError::Unavailable {
                        resource: resource.into(),
                        requested: count,
                        available: again.len(),
                    });
                }
                chosen = again[..count].to_vec();
            }
            state
                .reserved
                .entry(resource.into())
                .or_default()
                .extend(chosen.iter().cloned());
        }
        self.changed();
        let result = self.call_allocate(&instance, resource, &chosen).await;
        let allocation = {
            let mut state = self.lock();
            if let Some(reserved) = state.reserved.get_mut(resource) {
                for id in &chosen {
                    reserved.remove(id);
                }
            }
            let response = result.inspect_err(|_| self.changed())?;
            let allocation =
                ContainerAllocation::new(pod_uid, container, resource, chosen, response);
            state.allocations.insert(key.clone(), allocation.clone());
            allocation
        };
        // Only report an allocation once it is on disk.
        if let Err(e) = self.persist().await {
            self.lock().allocations.remove(&key);
            return Err(AllocateError::Checkpoint(e.to_string()));
        }
        tracing::info!(pod = %pod_uid, %container, %resource, devices = ?allocation.devices, "devices allocated");
        self.changed();
        Ok(allocation)
    }

    async fn call_allocate(
        &self,
        instance: &Instance,
        resource: &str,
        devices: &[String],
    ) -> Result<ContainerAllocateResponse, AllocateError> {
        let mut client = instance.client.clone();
        let request = AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: devices.to_vec(),
            }],
        };
        let rpc = |status: tonic::Status| AllocateError::Rpc {
            resource: resource.into(),
            error: format!("{:?}: {}", status.code(), status.message()),
        };
        let started = Instant::now();
        let response = tokio::select! {
            () = instance.cancel.cancelled() => {
                return Err(AllocateError::Rpc { resource: resource.into(), error: DISCONNECTED_DURING_CALL.into() });
            }
            () = tokio::time::sleep(ALLOCATE_TIMEOUT) => {
                return Err(AllocateError::Rpc { resource: resource.into(), error: format!("no answer within {ALLOCATE_TIMEOUT:?}") });
            }
            response = client.allocate(request) => {
                self.inner.alloc_duration.observe(&[resource], started.elapsed());
                response.map_err(rpc)?.into_inner()
            }
        };
        let response = response
            .container_responses
            .into_iter()
            .next()
            .ok_or(AllocateError::NoContainers)?;
        if instance.options.pre_start_required {
            let pre_start = client.pre_start_container(PreStartContainerRequest {
                devices_ids: devices.to_vec(),
            });
            match tokio::time::timeout(PRE_START_TIMEOUT, pre_start).await {
                Ok(Ok(_)) => {}
                Ok(Err(status)) => return Err(AllocateError::PreStart(status.message().into())),
                Err(_) => {
                    return Err(AllocateError::PreStart(format!(
                        "no answer within {PRE_START_TIMEOUT:?}"
                    )));
                }
            }
        }
        Ok(response)
    }

    /// Frees every device held by pod `pod_uid`; returns how many allocations ended.
    pub async fn release(&self, pod_uid: &str) -> usize {
        let released = {
            let mut state = self.lock();
            let before = state.allocations.len();
            state.allocations.retain(|(pod, _, _), _| pod != pod_uid);
            before - state.allocations.len()
        };
        if released > 0 {
            tracing::info!(pod = %pod_uid, released, "devices released");
            self.emit(
                DeviceEventKind::Released,
                "",
                None,
                Some(format!("pod {pod_uid}: {released} allocation(s)")),
            );
            self.changed();
            if let Err(e) = self.persist().await {
                tracing::error!(error = %e, "cannot write the device checkpoint");
            }
        }
        released
    }

    /// Forgets one container's allocation of one resource (to undo part of
    /// a request that failed as a whole).
    pub async fn forget(&self, pod_uid: &str, container: &str, resource: &str) {
        let key = (
            pod_uid.to_string(),
            container.to_string(),
            resource.to_string(),
        );
        if self.lock().allocations.remove(&key).is_some() {
            self.changed();
            if let Err(e) = self.persist().await {
                tracing::error!(error = %e, "cannot write the device checkpoint");
            }
        }
    }

    fn checkpoint_path(&self) -> PathBuf {
        self.inner.config.dir.join(CHECKPOINT_FILE)
    }

    /// Why the checkpoint could not be loaded or last written, or how it was
    /// repaired from its backup at start.
    pub fn checkpoint_error(&self) -> Option<String> {
        self.inner
            .checkpoint_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_checkpoint_error(&self, error: Option<String>) {
        *self
            .inner
            .checkpoint_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = error;
    }

    /// Writes the current allocations and healthy devices to the checkpoint.
    pub(crate) async fn persist(&self) -> Result<(), CheckpointError> {
        let _writing = self.inner.writer.lock().await;
        // What is about to be written includes every change so far.
        self.inner.write_queued.store(false, Ordering::SeqCst);
        let data = {
            let state = self.lock();
            CheckpointData {
                allocations: state.allocations.values().cloned().collect(),
                registered_devices: state
                    .resources
                    .iter()
                    .map(|(name, r)| {
                        (
                            name.clone(),
                            r.devices
                                .values()
                                .filter(|d| is_healthy(d))
                                .map(|d| d.id.clone())
                                .collect(),
                        )
                    })
                    .collect(),
            }
        };
        let path = self.checkpoint_path();
        let result = tokio::task::spawn_blocking(move || checkpoint::write(&path, &data))
            .await
            .unwrap_or_else(|e| {
                Err(CheckpointError::Io {
                    path: self.checkpoint_path(),
                    source: std::io::Error::other(e),
                })
            });
        match &result {
            Ok(()) => {
                if self
                    .checkpoint_error()
                    .is_some_and(|e| e.starts_with("write:"))
                {
                    self.set_checkpoint_error(None);
                }
            }
            Err(e) => self.set_checkpoint_error(Some(format!("write: {e}"))),
        }
        result
    }

    /// Loads the checkpoint at start: allocations come back, and each resource
    /// it names is known again with no devices (capacity 0) and its grace
    /// period running until its plugin registers again.
    pub async fn restore(&self) {
        let path = self.checkpoint_path();
        let data = match tokio::task::spawn_blocking(move || checkpoint::load(&path)).await {
            Ok(Ok(loaded)) => {
                if let Some(notice) = loaded.recovered {
                    tracing::warn!("{notice}");
                    self.set_checkpoint_error(Some(notice));
                }
                loaded.data
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, "device checkpoint not restored");
                self.set_checkpoint_error(Some(e.to_string()));
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "device checkpoint not restored");
                return;
            }
        };
        let expiries: Vec<(String, CancellationToken)> = {
            let mut state = self.lock();
            for allocation in data.allocations {
                let key = (
                    allocation.pod_uid.clone(),
                    allocation.container.clone(),
                    allocation.resource.clone(),
                );
                state.allocations.insert(key, allocation);
            }
            data.registered_devices
                .into_keys()
                .filter_map(|name| {
                    let entry = state.resources.entry(name.clone()).or_default();
                    if !entry.instances.is_empty() {
                        return None;
                    }
                    entry.stopped_at = Some(Instant::now());
                    let expiry = self.inner.shutdown.child_token();
                    entry.expiry = Some(expiry.clone());
                    Some((name, expiry))
                })
                .collect()
        };
        let restored = self.lock().allocations.len();
        tracing::info!(
            allocations = restored,
            resources = expiries.len(),
            "device checkpoint restored"
        );
        for (resource, expiry) in expiries {
            self.schedule_expiry(resource, expiry);
        }
        self.changed();
    }

    /// Every allocation, sorted by pod, container and resource.
    pub fn allocations(&self) -> Vec<ContainerAllocation> {
        self.lock().allocations.values().cloned().collect()
    }

    /// Disconnects every plugin and stops background work.
    pub fn stop(&self) {
        self.inner.shutdown.cancel();
    }

    /// Waits for background tasks after [`stop`](Self::stop).
    pub async fn wait_stopped(&self) {
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

/// Why a call failed when its plugin's connection ended while it ran.
const DISCONNECTED_DURING_CALL: &str = "the device plugin disconnected during the call";

/// The plugin's preferred choice of `count` among `available`, if it gives a
/// usable one (exactly `count` distinct devices, all available; otherwise the
/// agent's own choice stands). A failed call fails the allocation, as
/// upstream's does: the plugin said it answers and did not.
async fn preferred(
    instance: &Instance,
    resource: &str,
    available: &[String],
    count: usize,
    timeout: Duration,
) -> Result<Option<Vec<String>>, AllocateError> {
    let mut client = instance.client.clone();
    let Ok(allocation_size) = i32::try_from(count) else {
        return Ok(None);
    };
    let request = PreferredAllocationRequest {
        container_requests: vec![ContainerPreferredAllocationRequest {
            available_device_i_ds: available.to_vec(),
            must_include_device_i_ds: Vec::new(),
            allocation_size,
        }],
    };
    let response = tokio::select! {
        () = instance.cancel.cancelled() => {
            return Err(AllocateError::Preferred(DISCONNECTED_DURING_CALL.into()));
        }
        () = tokio::time::sleep(timeout) => {
            return Err(AllocateError::Preferred(format!("no answer within {timeout:?}")));
        }
        response = client.get_preferred_allocation(request) => match response {
            Ok(response) => response.into_inner(),
            Err(status) => {
                return Err(AllocateError::Preferred(format!(
                    "{:?}: {}",
                    status.code(),
                    status.message()
                )));
            }
        },
    };
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
        && ids.iter().all(|id| available.contains(id));
    if !usable {
        tracing::warn!(%resource, ?ids, "GetPreferredAllocation gave an unusable answer; choosing devices without it");
    }
    Ok(usable.then_some(ids))
}
