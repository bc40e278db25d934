//! The device manager: one task owns the state ([`State`]) and receives
//! commands from [`DeviceHandle`]s, from the ListAndWatch stream of each
//! connected plugin, and from the checkpoint writer; it wakes only for those
//! and for the end of a resource's grace period.
//!
//! Starting it ([`DeviceManager::run`]) does what the kubelet's device manager
//! does on start: it removes the plugin sockets left in the device plugin
//! directory (plugins notice and register again), loads the checkpoint, and
//! serves `kubelet.sock`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use nodeplugins_api::deviceplugin::v1beta1::Device;
use nodeplugins_api::transport::TransportError;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::checkpoint::{self, CheckpointData, DeviceCheckpoint};
use super::command::{Command, Shared};
use super::config::DeviceManagerConfig;
use super::container_allocation::ContainerAllocation;
use super::handle::DeviceHandle;
use super::kubelet_socket;
use super::metrics::DeviceMetrics;
use super::plugin_client::{DeviceError, PluginClient, StreamEnd};
use super::resource::{AllocationKey, Devices, Instance, InstanceId};
use super::snapshot::DeviceSnapshot;
use super::state::State;
use crate::checkpoint::{Persister, Written};
use crate::event::{AgentEvent, EventKind};
use crate::owner::Mailbox;
use crate::published::Publisher;
use nodeplugins_api::timer::sleep_until;

/// Why the device manager could not start.
#[derive(Debug, thiserror::Error)]
pub enum DeviceManagerError {
    /// The device plugin directory could not be created or read.
    #[error("device plugin directory {dir:?}: {source}")]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `kubelet.sock` could not be served.
    #[error("kubelet.sock: {0}")]
    KubeletSocket(#[source] TransportError),
}

/// The device manager's task. [`new`](Self::new) gives it with its
/// [`DeviceHandle`]; [`run`](Self::run) it.
pub struct DeviceManager {
    config: DeviceManagerConfig,
    commands_tx: Mailbox<Command>,
    commands: mpsc::UnboundedReceiver<Command>,
    events: broadcast::Sender<AgentEvent>,
    published: Publisher<DeviceSnapshot>,
    metrics: DeviceMetrics,
    shared: Arc<Shared>,
}

impl DeviceManager {
    /// A manager with no resources, using `config.dir`, and the handle
    /// callers use.
    pub fn new(config: DeviceManagerConfig) -> (Self, DeviceHandle) {
        let (commands_tx, commands) = Mailbox::new();
        let events = broadcast::channel(1024).0;
        let (published, store) = Publisher::new(DeviceSnapshot::default());
        let metrics = DeviceMetrics::default();
        let shared = Arc::new(Shared {
            config: config.clone(),
            events: events.clone(),
            store,
            metrics: metrics.clone(),
        });
        let manager = Self {
            config,
            commands_tx,
            commands,
            events,
            published,
            metrics,
            shared,
        };
        let handle = manager.handle();
        (manager, handle)
    }

    fn handle(&self) -> DeviceHandle {
        DeviceHandle {
            commands: self.commands_tx.clone(),
            shared: self.shared.clone(),
        }
    }

    /// Removes old plugin sockets, loads the checkpoint (allocations come
    /// back; each resource it names waits, with capacity 0, for its plugin),
    /// serves `kubelet.sock` and runs until `shutdown`. Fails only if the
    /// directory or `kubelet.sock` cannot be set up.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), DeviceManagerError> {
        let dir = self.config.dir.clone();
        let directory = |source| DeviceManagerError::Directory {
            dir: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(directory)?;
        kubelet_socket::clean_plugin_directory(&dir).map_err(directory)?;
        let tasks = TaskTracker::new();
        let (persister, loaded) =
            Persister::open::<DeviceCheckpoint>(checkpoint::file(&dir), &tasks).await;
        let socket = kubelet_socket::bind(&dir)
            .await
            .map_err(DeviceManagerError::KubeletSocket)?;
        let handle = self.handle();
        let mut owner = Owner {
            persister,
            config: self.config,
            state: State::default(),
            commands: self.commands,
            commands_tx: self.commands_tx,
            events: self.events,
            snapshot: self.published,
            published: false,
            metrics: self.metrics,
            tasks,
        };
        if let Some(loaded) = loaded {
            owner.state.restore(loaded, Instant::now());
        }
        owner.publish();
        let serving = kubelet_socket::serve(socket, handle, shutdown.clone());
        let (served, ()) = tokio::join!(
            async {
                let result = serving.await;
                shutdown.cancel();
                result
            },
            owner.run(shutdown.clone())
        );
        served.map_err(DeviceManagerError::KubeletSocket)
    }
}

struct Owner {
    config: DeviceManagerConfig,
    state: State,
    commands: mpsc::UnboundedReceiver<Command>,
    /// For the ListAndWatch tasks to report back.
    commands_tx: Mailbox<Command>,
    events: broadcast::Sender<AgentEvent>,
    /// The state after every change, for readers.
    snapshot: Publisher<DeviceSnapshot>,
    /// Published during the current command (before its reply).
    published: bool,
    metrics: DeviceMetrics,
    /// The ListAndWatch streams and the checkpoint writer.
    tasks: TaskTracker,
    /// Writes the checkpoint; an allocation waiting for a write that fails
    /// is undone.
    persister: Persister<CheckpointData, Vec<(AllocationKey, Arc<ContainerAllocation>)>>,
}

impl Owner {
    async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let state = &self.state;
            self.persister.flush(|| state.checkpoint_data());
            let next_expiry = self.state.next_expiry(self.config.grace_period);
            self.published = false;
            let changed = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(command) = self.commands.recv() => self.on_command(command),
                written = self.persister.next_written() => self.on_written(written),
                () = sleep_until(next_expiry) => self.expire(),
            };
            if changed && !self.published {
                self.publish();
            }
        }
        for resource in self.state.resources.values() {
            for instance in resource.instances.values() {
                instance.plugin.disconnect();
            }
        }
        let Owner {
            state,
            persister,
            tasks,
            ..
        } = self;
        persister.finish(|| state.checkpoint_data()).await;
        tasks.close();
        tasks.wait().await;
    }

    /// Publishes the state: a new snapshot, and a new change count.
    fn publish(&mut self) {
        let problem = self.persister.problem();
        let mut snapshot = DeviceSnapshot::of(&self.state, self.config.grace_period, problem);
        snapshot.generation = self.snapshot.current().generation + 1;
        self.snapshot.publish(snapshot);
        self.published = true;
    }

    /// A checkpoint write ended: the allocations waiting for it are
    /// answered, and undone if it failed. Says whether the state (or the
    /// checkpoint's problem) changed.
    fn on_written(&mut self, written: Written) -> bool {
        let failed_before = self.persister.last_error().is_some();
        let Err((e, undo)) = self.persister.on_written(written) else {
            return failed_before;
        };
        tracing::error!(error = %e, "cannot write the device checkpoint");
        let committed: Vec<_> = undo.into_iter().flatten().collect();
        if self.state.allocator.undo(&committed) {
            self.persister.changed();
        }
        true
    }

    fn emit(
        &self,
        kind: EventKind,
        resource: &str,
        endpoint: Option<&std::path::Path>,
        detail: Option<String>,
    ) {
        let _ = self
            .events
            .send(AgentEvent::device(kind, resource, endpoint, detail));
    }

    /// Handles one command; says whether the state changed.
    fn on_command(&mut self, command: Command) -> bool {
        match command {
            Command::Connect {
                resource,
                plugin,
                reply,
            } => {
                let result = self.connect(resource, plugin);
                let changed = result.is_ok();
                if changed {
                    self.publish();
                }
                let _ = reply.send(result);
                changed
            }
            Command::Disconnect { resource, socket } => {
                let instances = self.state.resources.get(&resource).into_iter();
                for instance in instances.flat_map(|r| r.instances.values()) {
                    if instance.plugin.socket() == socket {
                        instance.plugin.disconnect();
                    }
                }
                false
            }
            Command::DeviceList {
                resource,
                instance,
                devices,
            } => self.device_list(&resource, instance, devices),
            Command::StreamEnded {
                resource,
                instance,
                end,
            } => self.stream_ended(&resource, instance, end),
            Command::Instance { resource, reply } => {
                let plugin = self
                    .state
                    .resources
                    .get(&resource)
                    .and_then(|r| r.primary())
                    .map(|(_, instance)| instance.plugin.clone());
                let _ = reply.send(plugin);
                false
            }
            Command::Plan { request, reply } => {
                let _ = reply.send(self.state.allocator.plan(&self.state.resources, &request));
                false
            }
            Command::Reserve { choices, reply } => {
                let result = self.state.allocator.reserve(&self.state.resources, choices);
                let changed = result.is_ok();
                if changed {
                    self.publish();
                }
                let _ = reply.send(result);
                changed
            }
            Command::Unreserve { reservation } => self.state.allocator.unreserve(reservation),
            Command::Failed {
                pod,
                container,
                error,
            } => {
                self.emit(
                    EventKind::AllocationFailed,
                    error.resource().unwrap_or_default(),
                    None,
                    Some(format!("pod {pod} container {container}: {error}")),
                );
                false
            }
            Command::Commit {
                reservation,
                allocations,
                reply,
            } => {
                let stored = self.state.allocator.commit(reservation, allocations);
                for (_, a) in &stored {
                    tracing::info!(pod = %a.pod_uid, container = %a.container, resource = %a.resource,
                        devices = ?a.devices, "devices allocated");
                    self.emit(
                        EventKind::Allocated,
                        &a.resource,
                        None,
                        Some(format!(
                            "pod {} container {}: {}",
                            a.pod_uid,
                            a.container,
                            a.devices.join(",")
                        )),
                    );
                }
                let version = self.persister.changed();
                self.persister.when_written(version, reply, stored);
                true
            }
            Command::Release { pod_uid, reply } => {
                let released = self.state.allocator.release(&pod_uid);
                let written = (released > 0).then(|| {
                    tracing::info!(pod = %pod_uid, released, "devices released");
                    self.emit(
                        EventKind::Released,
                        "",
                        None,
                        Some(format!("pod {pod_uid}: {released} allocation(s)")),
                    );
                    let (tx, rx) = oneshot::channel();
                    let version = self.persister.changed();
                    self.persister.when_written(version, tx, Vec::new());
                    rx
                });
                if released > 0 {
                    self.publish();
                }
                let _ = reply.send((released, written));
                released > 0
            }
        }
    }

    fn connect(&mut self, resource: String, plugin: PluginClient) -> Result<(), DeviceError> {
        let socket = plugin.socket().to_owned();
        let entry = self.state.resources.entry(resource.clone()).or_default();
        if entry
            .instances
            .values()
            .any(|i| i.plugin.socket() == socket)
        {
            return Err(DeviceError::AlreadyConnected {
                resource,
                socket: socket.display().to_string(),
            });
        }
        entry.stopped_since = None;
        self.state.next_instance += 1;
        let id = self.state.next_instance;
        let options = plugin.options();
        if let Some(entry) = self.state.resources.get_mut(&resource) {
            entry.instances.insert(
                id,
                Instance {
                    plugin: plugin.clone(),
                    connected_at: SystemTime::now(),
                    devices: None,
                },
            );
        }
        self.metrics.registered(&resource);
        tracing::info!(%resource, socket = %socket.display(), pre_start = options.pre_start_required,
            preferred_allocation = options.get_preferred_allocation_available, "device plugin connected");
        self.emit(EventKind::Connected, &resource, Some(&socket), None);
        let commands = self.commands_tx.clone();
        self.tasks.spawn(async move {
            let end = plugin
                .list_and_watch(|devices| {
                    let _ = commands.send(Command::DeviceList {
                        resource: resource.clone(),
                        instance: id,
                        devices,
                    });
                })
                .await;
            let _ = commands.send(Command::StreamEnded {
                resource,
                instance: id,
                end,
            });
        });
        Ok(())
    }

    /// Records a device list, and queues a checkpoint write without holding
    /// anything up: device health protects nothing on disk, and a burst of
    /// lists is written once, with the newest state.
    fn device_list(&mut self, resource: &str, id: InstanceId, devices: Vec<Device>) -> bool {
        let Some(entry) = self.state.resources.get_mut(resource) else {
            return false;
        };
        let before = entry.counts();
        let Some(instance) = entry.instances.get_mut(&id) else {
            return false;
        };
        instance.devices = Some(Arc::new(
            devices.into_iter().map(|d| (d.id.clone(), d)).collect(),
        ));
        entry.last_known = Devices::default();
        let after = entry.counts();
        if before != after {
            self.emit(
                EventKind::DevicesChanged,
                resource,
                None,
                Some(format!("{} healthy of {}", after.0, after.1)),
            );
        }
        self.persister.changed();
        true
    }

    /// Forgets an instance whose stream ended; a survivor takes over, or the
    /// devices turn unhealthy and the grace period starts.
    fn stream_ended(&mut self, resource: &str, id: InstanceId, end: StreamEnd) -> bool {
        match end {
            StreamEnd::Disconnected => {}
            StreamEnd::Closed => tracing::info!(%resource, "ListAndWatch stream ended"),
            StreamEnd::Failed(status) => {
                tracing::warn!(%resource, code = ?status.code(), error = %status.message(), "ListAndWatch stream failed");
            }
        }
        let Some(entry) = self.state.resources.get_mut(resource) else {
            return false;
        };
        let Some(gone) = entry.remove_instance(id, Instant::now()) else {
            return false;
        };
        // Calls still running against this instance are abandoned.
        gone.plugin.disconnect();
        let socket = gone.plugin.socket();
        tracing::info!(%resource, socket = %socket.display(), "device plugin disconnected");
        self.emit(EventKind::Disconnected, resource, Some(socket), None);
        true
    }

    /// Forgets every resource whose grace period is over.
    fn expire(&mut self) -> bool {
        let due = self.state.expire(Instant::now(), self.config.grace_period);
        for resource in &due {
            tracing::info!(%resource, "device plugin resource removed after its grace period");
            self.emit(EventKind::Expired, resource, None, None);
        }
        !due.is_empty()
    }
}
