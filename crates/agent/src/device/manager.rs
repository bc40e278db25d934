//! The device manager: one task records the plugins in the device book
//! ([`DeviceBook`], the state every caller shares) and receives commands
//! from [`DeviceHandle`]s, from the ListAndWatch stream of each connected
//! plugin, and from the checkpoint writer; it wakes only for those and for
//! the end of a resource's grace period. Allocations and releases change
//! the book in their callers' tasks.
//!
//! Starting it ([`DeviceManager::run`]) does what the kubelet's device manager
//! does on start: it removes the plugin sockets left in the device plugin
//! directory (plugins notice and register again), loads the checkpoint, and
//! serves `kubelet.sock`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use nodeplugins_api::transport::TransportError;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::book::DeviceBook;
use super::checkpoint::{self, DeviceCheckpoint};
use super::command::{Command, Shared};
use super::config::DeviceManagerConfig;
use super::handle::DeviceHandle;
use super::kubelet_socket;
use super::metrics::DeviceMetrics;
use super::plugin_client::{DeviceError, PluginClient, StreamEnd};
use super::resource::{Instance, InstanceId};
use super::snapshot::DeviceSnapshot;
use crate::checkpoint::{Ends, Persister};
use crate::event::EventKind;
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
    book: Arc<DeviceBook>,
    /// The snapshot's publisher, for the book once it runs.
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
        let book = Arc::new(DeviceBook::new(config.grace_period, events.clone()));
        let metrics = DeviceMetrics::default();
        let shared = Arc::new(Shared {
            config: config.clone(),
            events: events.clone(),
            book: book.clone(),
            store,
            metrics: metrics.clone(),
        });
        let manager = Self {
            config,
            commands_tx,
            commands,
            book,
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
        let (persister, written, loaded) =
            Persister::open::<DeviceCheckpoint>(checkpoint::file(&dir), &tasks).await;
        let socket = kubelet_socket::bind(&dir)
            .await
            .map_err(DeviceManagerError::KubeletSocket)?;
        let handle = self.handle();
        {
            let mut book = self.book.lock();
            if let Some(loaded) = loaded {
                book.state.restore(loaded, Instant::now());
            }
            book.load(persister, self.published);
            book.publish();
        }
        let owner = Owner {
            config: self.config,
            book: self.book,
            written,
            commands: self.commands,
            commands_tx: self.commands_tx,
            published: false,
            metrics: self.metrics,
            tasks,
        };
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
    /// The state, shared with the callers that allocate and release.
    book: Arc<DeviceBook>,
    /// The ends of the checkpoint writes.
    written: Ends,
    commands: mpsc::UnboundedReceiver<Command>,
    /// For the ListAndWatch tasks to report back.
    commands_tx: Mailbox<Command>,
    /// Published during the current command (before its reply).
    published: bool,
    metrics: DeviceMetrics,
    /// The ListAndWatch streams and the checkpoint writer.
    tasks: TaskTracker,
}

impl Owner {
    async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let next_expiry = self.book.lock().state.next_expiry(self.config.grace_period);
            self.published = false;
            let changed = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(command) = self.commands.recv() => self.on_command(command),
                Some(written) = self.written.recv() => self.book.lock().on_written(written),
                () = sleep_until(next_expiry) => self.expire(),
            };
            let mut book = self.book.lock();
            book.flush();
            if changed && !self.published {
                book.publish();
            }
        }
        for resource in self.book.lock().state.resources.values() {
            for instance in resource.instances.values() {
                instance.plugin.disconnect();
            }
        }
        self.book.finish(&mut self.written).await;
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Publishes the state: a new snapshot, and a new change count.
    fn publish(&mut self) {
        self.book.lock().publish();
        self.published = true;
    }

    fn emit(
        &self,
        kind: EventKind,
        resource: &str,
        endpoint: Option<&std::path::Path>,
        detail: Option<String>,
    ) {
        self.book.emit(kind, resource, endpoint, detail);
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
                let book = self.book.lock();
                let instances = book.state.resources.get(&resource).into_iter();
                for instance in instances.flat_map(|r| r.instances.values()) {
                    if instance.plugin.socket() == socket {
                        instance.plugin.disconnect();
                    }
                }
                false
            }
            Command::StreamEnded {
                resource,
                instance,
                end,
            } => self.stream_ended(&resource, instance, end),
        }
    }

    fn connect(&mut self, resource: String, plugin: PluginClient) -> Result<(), DeviceError> {
        let socket = plugin.socket().to_owned();
        let book = self.book.clone();
        let mut book = book.lock();
        let state = &mut book.state;
        let entry = state.resources.entry(resource.clone()).or_default();
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
        state.next_instance += 1;
        let id = state.next_instance;
        let options = plugin.options();
        if let Some(entry) = state.resources.get_mut(&resource) {
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
        let lists = self.book.clone();
        // Each list goes to the book from the stream's task; the end comes
        // here, where it starts the grace period.
        self.tasks.spawn(async move {
            let end = plugin
                .list_and_watch(|devices| lists.device_list(&resource, id, devices))
                .await;
            let _ = commands.send(Command::StreamEnded {
                resource,
                instance: id,
                end,
            });
        });
        Ok(())
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
        let book = self.book.clone();
        let mut book = book.lock();
        let Some(entry) = book.state.resources.get_mut(resource) else {
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
        let due = self
            .book
            .lock()
            .state
            .expire(Instant::now(), self.config.grace_period);
        for resource in &due {
            tracing::info!(%resource, "device plugin resource removed after its grace period");
            self.emit(EventKind::Expired, resource, None, None);
        }
        !due.is_empty()
    }
}
