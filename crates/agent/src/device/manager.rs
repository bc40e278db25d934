//! The device manager: one task forgets plugins that leave from the device
//! book ([`DeviceBook`], the state every caller shares), told by
//! [`DeviceHandle`]s and by the end of each plugin's ListAndWatch stream,
//! answers the ends of the checkpoint writes and ends the grace periods of
//! resources without a plugin; it wakes only for those. Plugins connecting,
//! their device lists, allocations and releases change the book in their
//! callers' tasks.
//!
//! Starting it ([`DeviceManager::run`]) does what the kubelet's device manager
//! does on start: it removes the plugin sockets left in the device plugin
//! directory (plugins notice and register again), loads the checkpoint, and
//! serves `kubelet.sock`.

use std::path::PathBuf;
use std::sync::Arc;

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
use super::metrics::DeviceMetrics;
use super::resource::InstanceId;
use super::snapshot::DeviceSnapshot;
use crate::checkpoint::{Ends, Persister};
use crate::common::owner::Mailbox;
use crate::device::registration::kubelet_socket;
use crate::device::registration::plugin_client::StreamEnd;
use crate::event::EventKind;
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
        let shared = Arc::new(Shared {
            config: config.clone(),
            events: events.clone(),
            book: book.clone(),
            store,
            metrics: DeviceMetrics::default(),
            tasks: TaskTracker::new(),
        });
        let manager = Self {
            config,
            commands_tx,
            commands,
            book,
            published,
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
        let tasks = self.shared.tasks.clone();
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
    /// The ListAndWatch streams and the checkpoint writer.
    tasks: TaskTracker,
}

impl Owner {
    async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let next_expiry = self.book.lock().state.next_expiry(self.config.grace_period);
            let changed = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                Some(command) = self.commands.recv() => self.on_command(command),
                Some(written) = self.written.recv() => self.book.lock().on_written(written),
                () = sleep_until(next_expiry) => self.expire(),
            };
            let mut book = self.book.lock();
            book.flush();
            if changed {
                book.publish();
            }
        }
        for plugin in self.book.stop() {
            plugin.disconnect();
        }
        self.book.finish(&mut self.written).await;
        self.tasks.close();
        self.tasks.wait().await;
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
