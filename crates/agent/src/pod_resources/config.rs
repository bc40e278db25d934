//! Settings of the pod-resources server.

use crate::fs_watch::FsWatcher;
use std::path::{Path, PathBuf};

use nodeplugins_api::constants::pod_resources::{DEFAULT_BURST, DEFAULT_QPS, DIR, SOCKET};

/// The socket's mode unless configured otherwise: the agent's user only.
pub(super) const DEFAULT_SOCKET_MODE: u32 = 0o600;

/// How many calls the server answers: a token bucket shared by every client
/// and method, as the kubelet's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Calls per second, sustained.
    pub qps: u32,
    /// Calls at once above that rate.
    pub burst: u32,
}

impl Default for RateLimit {
    /// The kubelet's: 100 calls per second, bursts of 10.
    fn default() -> Self {
        Self {
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
        }
    }
}

/// Settings of the pod-resources server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResourcesConfig {
    /// The socket (`<root>/pod-resources/kubelet.sock`).
    pub socket: PathBuf,
    /// The socket's mode; its directory gets the same permissions plus
    /// search (0600 → 0700, 0660 → 0770).
    pub mode: u32,
    /// The rate limit; `None` for none.
    pub rate_limit: Option<RateLimit>,
    /// Notices the socket's removal (the agent shares one among all its
    /// parts).
    pub fs_watcher: FsWatcher,
}

impl PodResourcesConfig {
    /// The kubelet's socket under `root_dir`, mode 0600, the kubelet's rate
    /// limit.
    pub fn new(root_dir: &Path) -> Self {
        Self {
            socket: root_dir.join(DIR).join(SOCKET),
            mode: DEFAULT_SOCKET_MODE,
            rate_limit: Some(RateLimit::default()),
            fs_watcher: FsWatcher::new(),
        }
    }

    /// The directory's mode: the socket's, plus search wherever it grants read.
    pub fn dir_mode(&self) -> u32 {
        let mode = self.mode & 0o777;
        mode | ((mode & 0o444) >> 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_can_be_searched_by_whoever_may_read_the_socket() {
        let mut config = PodResourcesConfig::new(Path::new("/var/lib/kubelet"));
        assert_eq!(
            config.socket,
            Path::new("/var/lib/kubelet/pod-resources/kubelet.sock")
        );
        assert_eq!(config.dir_mode(), 0o700);
        config.mode = 0o660;
        assert_eq!(config.dir_mode(), 0o770);
        config.mode = 0o666;
        assert_eq!(config.dir_mode(), 0o777);
    }
}
