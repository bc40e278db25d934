//! One inotify instance for an agent's waits on files: a DRA instance
//! waiting for its socket to come back, a served socket (`kubelet.sock`,
//! the admin and pod-resources sockets) noticing it was removed, the API
//! credentials noticing a rotated certificate or token.
//!
//! A node may have hundreds of such waits at once (a fleet of drivers
//! stopped together); an instance each would soon exhaust the user's limit
//! (`fs.inotify.max_user_instances`, 128 by default), which the kubelet and
//! every other watcher running as the same user share. So an agent has one
//! [`FsWatcher`]: one inotify instance, made when the first wait starts and
//! closed when the last ends, with one watch per directory while some wait
//! is on it (its mask the union of theirs). Each wait holds an `FsWatch`,
//! woken by the events it asked for (on one name in the directory, or on
//! any); dropping it removes its interest, and the directory's watch with
//! the last one. A queue overflow wakes every wait (each looks again at
//! what it waits for); a directory removed breaks its waits.
//!
//! The plugin manager's registration watcher keeps an instance of its own:
//! it follows a whole tree, and rescans it after an overflow, which the
//! waits here should not pay for.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use inotify::{EventMask, EventStream, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The agent's one inotify instance, shared by everything that waits on a
/// file. Cheap to clone; nothing is made until the first wait.
#[derive(Clone, Default)]
pub struct FsWatcher {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FsWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsWatcher")
            .field("watched_dirs", &self.shared.lock().dirs.len())
            .finish()
    }
}

/// Two handles are equal when they share one instance.
impl PartialEq for FsWatcher {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Eq for FsWatcher {}

#[derive(Default)]
struct Shared {
    hub: Mutex<Hub>,
    /// The reader of the instance's events.
    tasks: TaskTracker,
}

#[derive(Default)]
struct Hub {
    /// The inotify instance while some wait is on it.
    instance: Option<Instance>,
    dirs: HashMap<WatchDescriptor, Dir>,
    /// Each watched directory's descriptor: adding a directory twice gives
    /// the same descriptor, so interest in it is counted here.
    by_path: HashMap<PathBuf, WatchDescriptor>,
    next_waiter: u64,
}

struct Instance {
    watches: Watches,
    /// Ends the reader.
    stop: CancellationToken,
}

struct Dir {
    path: PathBuf,
    mask: WatchMask,
    waiters: HashMap<u64, Waiter>,
}

struct Waiter {
    /// The name waited on; `None` for any in the directory.
    name: Option<OsString>,
    events: EventMask,
    /// Holds at most one wake-up: one pending is as good as several.
    wake: mpsc::Sender<()>,
}

/// One wait's interest in its directories. When the watch breaks (the
/// directory went away, the inotify instance failed), it never fires again
/// and the waiter falls back to looking on a schedule of its own.
pub(crate) struct FsWatch {
    woken: mpsc::Receiver<()>,
    /// (directory, waiter) of each registration.
    registered: Vec<(WatchDescriptor, u64)>,
    shared: Arc<Shared>,
}

impl FsWatcher {
    /// A watcher whose instance is made at the first wait.
    pub fn new() -> Self {
        Self::default()
    }

    /// A wait for `mask`'s events on `name` in `dir` (any name, with
    /// `None`; events on the directory itself, such as `DELETE_SELF`, have
    /// no name and reach every wait that asked for them).
    pub(crate) fn watch(
        &self,
        dir: &Path,
        name: Option<&OsStr>,
        mask: WatchMask,
    ) -> std::io::Result<FsWatch> {
        self.watch_all([(dir, name)], mask)
    }

    /// One wait for `mask`'s events on any name in each of `dirs`.
    #[cfg(any(test, feature = "kube"))]
    pub(crate) fn watch_dirs<'a>(
        &self,
        dirs: impl IntoIterator<Item = &'a Path>,
        mask: WatchMask,
    ) -> std::io::Result<FsWatch> {
        self.watch_all(dirs.into_iter().map(|dir| (dir, None)), mask)
    }

    fn watch_all<'a>(
        &self,
        targets: impl IntoIterator<Item = (&'a Path, Option<&'a OsStr>)>,
        mask: WatchMask,
    ) -> std::io::Result<FsWatch> {
        let (wake, woken) = mpsc::channel(1);
        // Registered ones are removed again if a later one fails.
        let mut watch = FsWatch {
            woken,
            registered: Vec::new(),
            shared: self.shared.clone(),
        };
        for (dir, name) in targets {
            let registered = self.shared.register(dir, name, mask, wake.clone())?;
            watch.registered.push(registered);
        }
        Ok(watch)
    }

    /// Waits until the reader of the instance has ended (it does once no
    /// wait remains).
    pub async fn stopped(&self) {
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
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

    fn register(
        self: &Arc<Self>,
        dir: &Path,
        name: Option<&OsStr>,
        mask: WatchMask,
        wake: mpsc::Sender<()>,
    ) -> std::io::Result<(WatchDescriptor, u64)> {
        let mut hub = self.lock();
        if hub.instance.is_none() {
            let inotify = Inotify::init()?;
            let watches = inotify.watches();
            let events = inotify.into_event_stream([0u8; 4096])?;
            let stop = CancellationToken::new();
            self.tasks.reopen();
            self.tasks
                .spawn(read(events, Arc::downgrade(self), stop.clone()));
            hub.instance = Some(Instance { watches, stop });
        }
        let known = hub.by_path.get(dir).cloned();
        let before = known
            .as_ref()
            .and_then(|wd| hub.dirs.get(wd))
            .map_or(WatchMask::empty(), |d| d.mask);
        let wd = match known {
            Some(wd) if before.contains(mask) => wd,
            _ => {
                let wanted = before | mask;
                let instance = hub.instance.as_mut().ok_or_else(gone)?;
                let added = instance.watches.add(dir, wanted);
                let wd = match added {
                    Ok(wd) => wd,
                    Err(error) => {
                        hub.close_if_idle();
                        return Err(error);
                    }
                };
                if known.as_ref() != Some(&wd) {
                    // A directory made again under its path is another
                    // watch; the old one's IGNORED event ends its waits.
                    hub.by_path.insert(dir.to_path_buf(), wd.clone());
                }
                let entry = hub.dirs.entry(wd.clone()).or_insert_with(|| Dir {
                    path: dir.to_path_buf(),
                    mask: WatchMask::empty(),
                    waiters: HashMap::new(),
                });
                entry.mask = wanted;
                wd
            }
        };
        hub.next_waiter += 1;
        let id = hub.next_waiter;
        let waiter = Waiter {
            name: name.map(OsStr::to_owned),
            events: EventMask::from_bits_truncate(mask.bits()),
            wake,
        };
        hub.dirs
            .get_mut(&wd)
            .ok_or_else(gone)?
            .waiters
            .insert(id, waiter);
        Ok((wd, id))
    }

    /// Wakes whoever waits on the event; forgets a directory whose watch
    /// the kernel removed.
    fn deliver(&self, wd: &WatchDescriptor, mask: EventMask, name: Option<&OsStr>) {
        let mut hub = self.lock();
        if mask.contains(EventMask::Q_OVERFLOW) {
            // Events were lost: everyone looks again.
            for waiter in hub.dirs.values().flat_map(|d| d.waiters.values()) {
                let _ = waiter.wake.try_send(());
            }
            return;
        }
        if mask.contains(EventMask::IGNORED) {
            if let Some(dir) = hub.dirs.remove(wd)
                && hub.by_path.get(&dir.path) == Some(wd)
            {
                hub.by_path.remove(&dir.path);
            }
            hub.close_if_idle();
            return;
        }
        let Some(dir) = hub.dirs.get(wd) else {
            return;
        };
        for waiter in dir.waiters.values() {
            let named = match (&waiter.name, name) {
                (Some(wanted), Some(name)) => wanted == name,
                _ => true,
            };
            if named && waiter.events.intersects(mask) {
                // Full: a wake-up is already pending.
                let _ = waiter.wake.try_send(());
            }
        }
    }

    /// The inotify instance is gone: every watch breaks.
    fn broke(&self) {
        let mut hub = self.lock();
        hub.instance = None;
        hub.dirs.clear();
        hub.by_path.clear();
    }
}

impl Hub {
    /// Closes the instance once no directory is watched.
    fn close_if_idle(&mut self) {
        if self.dirs.is_empty()
            && let Some(instance) = self.instance.take()
        {
            instance.stop.cancel();
        }
    }
}

fn gone() -> std::io::Error {
    std::io::Error::other("the inotify instance went away")
}

/// Reads the instance's events until it is stopped (no wait is left) or
/// fails.
async fn read(
    mut events: EventStream<[u8; 4096]>,
    shared: std::sync::Weak<Shared>,
    stop: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => break,
            next = events.next() => next,
        };
        let Some(shared) = shared.upgrade() else {
            break;
        };
        match next {
            Some(Ok(event)) => shared.deliver(&event.wd, event.mask, event.name.as_deref()),
            Some(Err(error)) => {
                tracing::warn!(%error, "the inotify instance failed; waits fall back to their schedules");
                shared.broke();
                break;
            }
            None => {
                shared.broke();
                break;
            }
        }
    }
    // Closing an inotify descriptor waits for the kernel (milliseconds), so
    // it is done off the runtime's threads.
    drop(tokio::task::spawn_blocking(move || drop(events)));
}

impl FsWatch {
    /// Resolves at the next event waited for; never, without a watch or
    /// once it broke (then `watch` becomes `None`).
    pub(crate) async fn fired(watch: &mut Option<Self>) {
        let Some(w) = watch else {
            return std::future::pending().await;
        };
        if w.woken.recv().await.is_none() {
            *watch = None;
            std::future::pending::<()>().await;
        }
    }

    /// Forgets a wake-up already pending (events that came while the
    /// waiter was busy looking).
    #[cfg(feature = "kube")]
    pub(crate) fn drain(&mut self) {
        while self.woken.try_recv().is_ok() {}
    }
}

impl Drop for FsWatch {
    fn drop(&mut self) {
        let mut hub = self.shared.lock();
        for (wd, id) in self.registered.drain(..) {
            let Some(dir) = hub.dirs.get_mut(&wd) else {
                continue;
            };
            dir.waiters.remove(&id);
            if !dir.waiters.is_empty() {
                continue;
            }
            if let Some(dir) = hub.dirs.remove(&wd)
                && hub.by_path.get(&dir.path) == Some(&wd)
            {
                hub.by_path.remove(&dir.path);
            }
            if let Some(instance) = hub.instance.as_mut() {
                // Gone already if the directory was removed meanwhile.
                let _ = instance.watches.remove(wd);
            }
        }
        hub.close_if_idle();
    }
}

#[cfg(test)]
mod tests;
