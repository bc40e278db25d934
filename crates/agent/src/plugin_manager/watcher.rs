//! Discovers registration sockets: inotify over `plugins_registry`,
//! recursive at any depth, with an initial walk and no start-up race.
//!
//! Every directory gets its watch *before* it is listed, so a socket created
//! while the listing runs shows up either in the listing or as an event (or
//! both; the desired state recognises the same file twice by its inode).
//! Names starting with `.` and anything that is not a Unix socket are
//! ignored. A move into the tree counts as a creation, a move out as a
//! deletion; a directory moved out takes every socket below it along. If the
//! kernel's event queue overflows, the whole tree is listed again.
//!
//! The root itself is also watched from its parent directory: a root that is
//! removed while plugins still hold sockets bound in it reports no
//! `DELETE_SELF` until the last of them closes (a bound socket pins its
//! directory), but its parent sees the removal at once. The watcher then
//! re-creates the root and watches the new directory.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use futures::StreamExt;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::state::FileIdentity;

/// What the watcher tells the reconciler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchEvent {
    /// A socket appeared (or was found by a walk).
    Added {
        path: PathBuf,
        identity: Option<FileIdentity>,
    },
    /// A path disappeared.
    Removed { path: PathBuf },
    /// A directory disappeared with everything in it.
    RemovedTree { dir: PathBuf },
    /// After an event queue overflow: exactly these sockets exist.
    Resync {
        sockets: Vec<(PathBuf, Option<FileIdentity>)>,
    },
    /// The initial walk is complete.
    Ready,
}

/// Why the watcher could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The plugin registry directory could not be created.
    #[error("cannot create plugin registry directory {dir:?}: {source}")]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// inotify could not be set up.
    #[error("cannot watch {dir:?}: {source}")]
    Inotify {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn dir_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
        | WatchMask::DONT_FOLLOW
}

fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.as_encoded_bytes().first() == Some(&b'.'))
}

/// The identity of the directory at `path`.
fn dir_identity(path: &Path) -> Option<FileIdentity> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    meta.is_dir().then(|| (meta.dev(), meta.ino()))
}

/// The identity of `path` if it is a Unix socket.
fn socket_identity(path: &Path) -> Option<FileIdentity> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    meta.file_type()
        .is_socket()
        .then(|| (meta.dev(), meta.ino()))
}

struct Tree {
    root: PathBuf,
    watches: Watches,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// The watch on the root's parent, for the root's removal and creation.
    parent: Option<WatchDescriptor>,
    /// The directory being watched as the root.
    root_identity: Option<FileIdentity>,
}

impl Tree {
    /// Watches `dir` and everything below it, collecting the sockets found.
    fn add(&mut self, dir: &Path, found: &mut Vec<(PathBuf, Option<FileIdentity>)>) {
        match self.watches.add(dir, dir_mask()) {
            Ok(wd) => {
                self.dirs.insert(wd, dir.to_owned());
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch directory");
                return;
            }
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot list directory");
                return;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if is_hidden(&path) {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => self.add(&path, found),
                Ok(t) if t.is_socket() => found.push((path.clone(), socket_identity(&path))),
                _ => {}
            }
        }
    }

    /// Stops watching `dir` and everything below it (after it moved away).
    fn forget(&mut self, dir: &Path) {
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, p)| p.starts_with(dir))
            .map(|(wd, _)| wd.clone())
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            let _ = self.watches.remove(wd);
        }
    }

    /// Forgets every watch and watches and lists the whole tree again, so no
    /// watch survives under a path that no longer describes its directory.
    fn rescan(&mut self) -> Vec<(PathBuf, Option<FileIdentity>)> {
        for (wd, _) in self.dirs.drain() {
            let _ = self.watches.remove(wd);
        }
        let root = self.root.clone();
        if let Err(e) = std::fs::create_dir_all(&root) {
            tracing::error!(dir = %root.display(), error = %e, "cannot recreate plugin registry directory");
        }
        self.root_identity = dir_identity(&root);
        let mut found = Vec::new();
        self.add(&root, &mut found);
        found
    }

    /// Watches the root's parent for the root's own removal and creation.
    fn watch_parent(&mut self) {
        let Some(parent) = self.root.parent() else {
            return;
        };
        let mask = WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::ONLYDIR
            | WatchMask::DONT_FOLLOW;
        match self.watches.add(parent, mask) {
            Ok(wd) => self.parent = Some(wd),
            Err(e) => {
                tracing::warn!(dir = %parent.display(), error = %e, "cannot watch the plugin registry's parent directory");
            }
        }
    }
}

/// Watches `root` until `shutdown`, sending what it sees to `events`. Sends
/// every socket already present, then [`WatchEvent::Ready`].
pub(crate) async fn watch(
    root: PathBuf,
    events: mpsc::Sender<WatchEvent>,
    shutdown: CancellationToken,
) -> Result<(), WatchError> {
    std::fs::create_dir_all(&root).map_err(|source| WatchError::CreateDir {
        dir: root.clone(),
        source,
    })?;
    let inotify = Inotify::init().map_err(|source| WatchError::Inotify {
        dir: root.clone(),
        source,
    })?;
    let mut stream = inotify
        .into_event_stream([0u8; 64 * 1024])
        .map_err(|source| WatchError::Inotify {
            dir: root.clone(),
            source,
        })?;
    let mut tree = Tree {
        root: root.clone(),
        watches: stream.watches(),
        dirs: HashMap::new(),
        parent: None,
        root_identity: dir_identity(&root),
    };
    tree.watch_parent();
    tree.watches
        .add(&root, dir_mask())
        .map_err(|source| WatchError::Inotify {
            dir: root.clone(),
            source,
        })?;

    let mut found = Vec::new();
    tree.add(&root, &mut found);
    for (path, identity) in found {
        if events
            .send(WatchEvent::Added { path, identity })
            .await
            .is_err()
        {
            return Ok(());
        }
    }
    if events.send(WatchEvent::Ready).await.is_err() {
        return Ok(());
    }

    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = stream.next() => event,
        };
        let event = match event {
            Some(Ok(event)) => event,
            Some(Err(e)) => {
                tracing::error!(dir = %root.display(), error = %e, "inotify read failed; rescanning");
                // Pace repeated failures instead of rescanning in a tight loop.
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
                }
                let sockets = tree.rescan();
                if events.send(WatchEvent::Resync { sockets }).await.is_err() {
                    return Ok(());
                }
                continue;
            }
            None => return Ok(()),
        };
        let mut out = Vec::new();
        handle(&mut tree, event.wd, event.mask, event.name, &mut out);
        for event in out {
            if events.send(event).await.is_err() {
                return Ok(());
            }
        }
    }
}

fn handle(
    tree: &mut Tree,
    wd: WatchDescriptor,
    mask: EventMask,
    name: Option<OsString>,
    out: &mut Vec<WatchEvent>,
) {
    if mask.contains(EventMask::Q_OVERFLOW) {
        tracing::warn!(dir = %tree.root.display(), "inotify queue overflowed; rescanning");
        out.push(WatchEvent::Resync {
            sockets: tree.rescan(),
        });
        return;
    }
    if tree.parent.as_ref() == Some(&wd) {
        root_changed(tree, mask, name, out);
        return;
    }
    let Some(dir) = tree.dirs.get(&wd).cloned() else {
        return;
    };
    if mask.contains(EventMask::IGNORED) {
        tree.dirs.remove(&wd);
        if dir == tree.root {
            // The root's watch is gone (removed, unmounted): watch it again.
            tracing::error!(dir = %dir.display(), "plugin registry watch lost; rescanning");
            out.push(WatchEvent::Resync {
                sockets: tree.rescan(),
            });
        }
        return;
    }
    if mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
        if dir == tree.root {
            tracing::error!(dir = %dir.display(), "plugin registry directory removed; recreating");
            tree.forget(&dir);
            out.push(WatchEvent::Resync {
                sockets: tree.rescan(),
            });
        }
        return;
    }
    let Some(name) = name else { return };
    let path = dir.join(name);
    if is_hidden(&path) {
        return;
    }
    let is_dir = mask.contains(EventMask::ISDIR);
    if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
        if is_dir {
            let mut found = Vec::new();
            tree.add(&path, &mut found);
            out.extend(
                found
                    .into_iter()
                    .map(|(path, identity)| WatchEvent::Added { path, identity }),
            );
        } else if let Some(identity) = socket_identity(&path) {
            out.push(WatchEvent::Added {
                path,
                identity: Some(identity),
            });
        } else if mask.contains(EventMask::MOVED_TO) {
            // Something that is not a socket replaced whatever was there.
            out.push(WatchEvent::Removed { path });
        }
    } else if mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
        if is_dir {
            tree.forget(&path);
            out.push(WatchEvent::RemovedTree { dir: path });
        } else {
            out.push(WatchEvent::Removed { path });
        }
    }
}

/// An event on the root's parent: the root was removed or moved away (its
/// sockets with it), or a directory other than the watched one now has its
/// name. Either way the root is watched and listed afresh.
fn root_changed(
    tree: &mut Tree,
    mask: EventMask,
    name: Option<OsString>,
    out: &mut Vec<WatchEvent>,
) {
    if name.as_deref() != tree.root.file_name() || !mask.contains(EventMask::ISDIR) {
        return;
    }
    // The directory now at the root's path is the one watched: nothing to
    // do (this event is about one already handled, or the watcher's own
    // re-creation).
    if tree.root_identity.is_some() && dir_identity(&tree.root) == tree.root_identity {
        return;
    }
    let gone = mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM);
    if gone {
        tracing::error!(dir = %tree.root.display(), "plugin registry directory removed; recreating it");
    } else {
        tracing::warn!(dir = %tree.root.display(), "plugin registry directory replaced; watching the new one");
    }
    let root = tree.root.clone();
    tree.forget(&root);
    out.push(WatchEvent::Resync {
        sockets: tree.rescan(),
    });
}
