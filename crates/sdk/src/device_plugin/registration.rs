//! How a device plugin registers with the kubelet.

use std::path::PathBuf;

/// How the plugin registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// Through `<dir>/kubelet.sock`.
    KubeletSocket,
    /// Through a registration socket in this `plugins_registry` directory.
    Registry(PathBuf),
}
