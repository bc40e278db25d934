//! Noticing a plugin's service socket being created again.
//!
//! Every disconnected instance waits for its socket to come back, and a
//! node may have hundreds at once (a fleet of drivers stopped together).
//! An inotify instance each would soon exhaust the user's limit
//! (`fs.inotify.max_user_instances`, 128 by default), which the kubelet and
//! every other watcher running as the same user share. So the DRA manager
//! has one [`SocketWatcher`]: a single inotify instance, made when the first
//! instance disconnects, with one watch per directory while some instance
//! waits on it. Each waiting instance holds a [`SocketWatch`], which removes
//! its interest when dropped, and the directory's watch with the last one.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What a directory watch reports: a name created there (or moved in, or
/// its attributes changed, as when a socket is re-bound in place).
const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::ATTRIB);

/// The DRA manager's one inotify instance, shared by its connection
/// monitors. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SocketWatcher {
    shared: Arc<Shared>,
}

struct Shared {
    hub: Mutex<Hub>,
    /// Ends the reader task when the manager stops.
    shutdown: CancellationToken,
}

#[derive(Default)]
struct Hub {
    /// The inotify instance's watches, once made; `None` again after the
    /// instance broke, so that the next watch starts a fresh one.
    watches: Option<Watches>,
    dirs: HashMap<WatchDescriptor, Dir>,
    /// Each watched directory's descriptor: adding a directory twice gives
    /// the same descriptor, so interest in it is counted here.
    by_path: HashMap<PathBuf, WatchDescriptor>,
    next_waiter: u64,
}

struct Dir {
    path: PathBuf,
    waiters: HashMap<u64, Waiter>,
}

struct Waiter {
    name: OsString,
    /// Holds at most one wake-up: one pending is as good as several.
    wake: mpsc::Sender<()>,
}

/// One instance's interest in its socket's name. When the watch breaks
/// (the directory went away, the inotify instance failed), it never fires
/// again and the monitor falls back to its backoff schedule alone.
pub(crate) struct SocketWatch {
    woken: mpsc::Receiver<()>,
    wd: WatchDescriptor,
    id: u64,
    shared: Arc<Shared>,
}

impl SocketWatcher {
    /// A watcher whose inotify instance lives until `shutdown`.
    pub(crate) fn new(shutdown: CancellationToken) -> Self {
        Self {
            shared: Arc::new(Shared {
                hub: Mutex::new(Hub::default()),
                shutdown,
            }),
        }
    }

    /// A watch for `endpoint`'s name in its directory, if one can be set up.
    pub(crate) fn watch(&self, endpoint: &Path) -> Option<SocketWatch> {
        let dir = endpoint.parent()?;
        let name = endpoint.file_name()?.to_owned();
        let mut hub = self.shared.lock();
        if hub.watches.is_none() {
            if self.shared.shutdown.is_cancelled() {
                return None;
            }
            let inotify = Inotify::init().ok()?;
            let watches = inotify.watches();
            let events = inotify.into_event_stream([0u8; 4096]).ok()?;
            tokio::spawn(read(events, self.shared.clone()));
            hub.watches = Some(watches);
        }
        let wd = match hub.by_path.get(dir) {
            Some(wd) => wd.clone(),
            None => {
                let wd = hub.watches.as_mut()?.add(dir, MASK).ok()?;
                hub.by_path.insert(dir.to_path_buf(), wd.clone());
                hub.dirs.insert(
                    wd.clone(),
                    Dir {
                        path: dir.to_path_buf(),
                        waiters: HashMap::new(),
                    },
                );
                wd
            }
        };
        hub.next_waiter += 1;
        let id = hub.next_waiter;
        let (wake, woken) = mpsc::channel(1);
        hub.dirs
            .get_mut(&wd)?
            .waiters
            .insert(id, Waiter { name, wake });
        Some(SocketWatch {
            woken,
            wd,
            id,
            shared: self.shared.clone(),
        })
    }

    /// Directories watched now, for tests.
    #[cfg(test)]
    fn watched_dirs(&self) -> usize {
        self.shared.lock().dirs.len()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Hub> {
        self.hub.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes whoever waits on the event's name; forgets a directory whose
    /// watch the kernel removed.
    fn deliver(&self, wd: &WatchDescriptor, mask: EventMask, name: Option<&std::ffi::OsStr>) {
        let mut hub = self.lock();
        if mask.contains(EventMask::IGNORED) {
            if let Some(dir) = hub.dirs.remove(wd) {
                hub.by_path.remove(&dir.path);
            }
            return;
        }
        let (Some(dir), Some(name)) = (hub.dirs.get(wd), name) else {
            return;
        };
        for waiter in dir.waiters.values().filter(|w| w.name == name) {
            // Full: a wake-up is already pending.
            let _ = waiter.wake.try_send(());
        }
    }

    /// The inotify instance is gone: every watch breaks.
    fn broke(&self) {
        let mut hub = self.lock();
        hub.watches = None;
        hub.dirs.clear();
        hub.by_path.clear();
    }
}

/// Reads the instance's events until the manager stops or the instance
/// fails.
async fn read(mut events: EventStream<[u8; 4096]>, shared: Arc<Shared>) {
    loop {
        let next = tokio::select! {
            () = shared.shutdown.cancelled() => break,
            next = events.next() => next,
        };
        match next {
            Some(Ok(event)) => shared.deliver(&event.wd, event.mask, event.name.as_deref()),
            Some(Err(error)) => {
                tracing::warn!(%error, "the DRA socket watch failed; reconnecting on the backoff schedule alone");
                break;
            }
            None => break,
        }
    }
    shared.broke();
    // Closing an inotify descriptor waits for the kernel (milliseconds), so
    // it is done off the runtime's threads.
    tokio::task::spawn_blocking(move || drop(events));
}

impl SocketWatch {
    /// Resolves when the socket's name is created; never, without a watch
    /// or once it broke.
    pub(crate) async fn next(watch: &mut Option<Self>) {
        let Some(w) = watch else {
            return std::future::pending().await;
        };
        if w.woken.recv().await.is_none() {
            *watch = None;
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for SocketWatch {
    fn drop(&mut self) {
        let mut hub = self.shared.lock();
        let Some(dir) = hub.dirs.get_mut(&self.wd) else {
            return;
        };
        dir.waiters.remove(&self.id);
        if !dir.waiters.is_empty() {
            return;
        }
        if let Some(dir) = hub.dirs.remove(&self.wd) {
            hub.by_path.remove(&dir.path);
        }
        if let Some(watches) = hub.watches.as_mut() {
            // Gone already if the directory was removed meanwhile.
            let _ = watches.remove(self.wd.clone());
        }
    }
}

#[cfg(test)]
mod tests;
