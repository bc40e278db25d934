//! The device manager's state: per resource, the connected plugin instances
//! (keyed by socket; the newest is primary), the devices the primary reports
//! with their health, and the grace period after the last instance leaves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use nodeplugins_api::constants::device_plugin::HEALTHY;
use nodeplugins_api::deviceplugin::v1beta1::{Device, DevicePluginOptions};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::endpoint;
use crate::registry::status::unix_ms;

/// How long a resource stays known after its last plugin disconnected
/// (upstream `endpointStopGracePeriod`, 5 min).
pub const ENDPOINT_STOP_GRACE_PERIOD: Duration = Duration::from_secs(300);
/// Dialing a device plugin (upstream: 10 s).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// GetDevicePluginOptions. Upstream sets none, so a hanging plugin blocks its
/// registration forever; here it is bounded.
pub const OPTIONS_TIMEOUT: Duration = Duration::from_secs(10);

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
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &DeviceManagerConfig {
        &self.inner.config
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
        tracing::info!(%resource, socket = %socket.display(), pre_start = options.pre_start_required,
            preferred_allocation = options.get_preferred_allocation_available, "device plugin connected");
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

    /// Applies a ListAndWatch update from instance `id`.
    pub(crate) fn update(&self, resource: &str, id: u64, devices: Vec<Device>) {
        {
            let mut state = self.lock();
            let Some(entry) = state.resources.get_mut(resource) else {
                return;
            };
            let Some(instance) = entry.instances.get_mut(&id) else {
                return;
            };
            instance.devices = Some(devices.clone());
            let primary = entry.instances.keys().next_back().copied();
            if primary == Some(id) {
                entry.devices = devices.into_iter().map(|d| (d.id.clone(), d)).collect();
            }
        }
        self.changed();
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
            tracing::info!(%resource, socket = %gone.socket.display(), "device plugin disconnected");
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
            let manager = self.clone();
            let resource = resource.to_string();
            let period = self.inner.config.grace_period;
            self.inner.tasks.spawn(async move {
                tokio::select! {
                    () = expiry.cancelled() => {}
                    () = tokio::time::sleep(period) => manager.expire(&resource),
                }
            });
        }
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
