//! Desired and actual state of the world, keyed by socket path.

use crate::plugin_description::PluginDescription;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::plugin_manager::handler::PluginHandler;

/// Identifies one appearance of a socket at a path: a socket re-created at
/// the same path is a new plugin with a new generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub(crate) struct Generation(pub u64);

/// Device and inode of a socket file, to tell a re-created socket from a
/// second report of the same one.
pub(crate) type FileIdentity = (u64, u64);

#[derive(Debug, Clone, Copy)]
pub(crate) struct DesiredEntry {
    pub(crate) generation: Generation,
    pub(crate) identity: Option<FileIdentity>,
    /// When the watcher reported this socket.
    pub(crate) seen_at: tokio::time::Instant,
}

/// The sockets that exist: what the watcher reports.
#[derive(Debug, Default)]
pub(crate) struct DesiredState {
    entries: HashMap<PathBuf, DesiredEntry>,
    next_generation: u64,
}

impl DesiredState {
    /// Records a socket at `path`. A new socket (or a different file at a
    /// known path) gets a fresh generation; a second report of the same file
    /// changes nothing. Returns whether anything changed.
    pub(crate) fn add_or_update(&mut self, path: &Path, identity: Option<FileIdentity>) -> bool {
        if let Some(entry) = self.entries.get(path)
            && identity.is_some()
            && entry.identity == identity
        {
            return false;
        }
        self.next_generation += 1;
        let generation = Generation(self.next_generation);
        self.entries.insert(
            path.to_owned(),
            DesiredEntry {
                generation,
                identity,
                seen_at: tokio::time::Instant::now(),
            },
        );
        true
    }

    /// Forgets `path`; returns whether it was known.
    pub(crate) fn remove(&mut self, path: &Path) -> bool {
        self.entries.remove(path).is_some()
    }

    /// Forgets every socket under `dir`; returns the removed paths.
    pub(crate) fn remove_tree(&mut self, dir: &Path) -> Vec<PathBuf> {
        let gone: Vec<PathBuf> = self
            .entries
            .keys()
            .filter(|p| p.starts_with(dir))
            .cloned()
            .collect();
        for path in &gone {
            self.entries.remove(path);
        }
        gone
    }

    pub(crate) fn get(&self, path: &Path) -> Option<&DesiredEntry> {
        self.entries.get(path)
    }

    pub(crate) fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.entries.keys()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// A registered plugin.
#[derive(Clone)]
pub(crate) struct ActualEntry {
    pub(crate) generation: Generation,
    pub(crate) info: PluginDescription,
    pub(crate) handler: Arc<dyn PluginHandler>,
    pub(crate) registered_at: SystemTime,
}

/// The plugins registered with their handlers.
/// The operation running for a socket path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Running {
    /// Registering this appearance of the socket.
    Register(Generation),
    /// Deregistering the plugin registered there.
    Unregister,
}

#[derive(Default)]
pub(crate) struct ActualState {
    entries: HashMap<PathBuf, ActualEntry>,
}

impl ActualState {
    pub(crate) fn insert(&mut self, path: PathBuf, entry: ActualEntry) {
        self.entries.insert(path, entry);
    }

    pub(crate) fn remove(&mut self, path: &Path) -> Option<ActualEntry> {
        self.entries.remove(path)
    }

    pub(crate) fn get(&self, path: &Path) -> Option<&ActualEntry> {
        self.entries.get(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_adding_the_same_file_keeps_its_generation() {
        let mut desired = DesiredState::default();
        let path = Path::new("/r/a.sock");
        assert!(desired.add_or_update(path, Some((1, 10))));
        let first = desired.get(path).unwrap().generation;
        assert!(!desired.add_or_update(path, Some((1, 10))));
        assert_eq!(desired.get(path).unwrap().generation, first);
    }

    #[test]
    fn a_different_file_at_the_same_path_gets_a_newer_generation() {
        let mut desired = DesiredState::default();
        let path = Path::new("/r/a.sock");
        desired.add_or_update(path, Some((1, 10)));
        let first = desired.get(path).unwrap().generation;
        assert!(desired.add_or_update(path, Some((1, 11))));
        assert!(desired.get(path).unwrap().generation > first);
        assert_eq!(desired.len(), 1);
    }

    #[test]
    fn removing_a_tree_removes_only_paths_below_it() {
        let mut desired = DesiredState::default();
        for p in ["/r/a/x.sock", "/r/a/b/y.sock", "/r/ab.sock", "/r/c.sock"] {
            desired.add_or_update(Path::new(p), None);
        }
        let mut gone = desired.remove_tree(Path::new("/r/a"));
        gone.sort();
        assert_eq!(
            gone,
            [PathBuf::from("/r/a/b/y.sock"), PathBuf::from("/r/a/x.sock")]
        );
        assert_eq!(desired.len(), 2);
    }
}
