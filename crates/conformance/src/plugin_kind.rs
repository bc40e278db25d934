//! The kinds of plugin a run checks through a registration socket.

use nodeplugins_api::constants::plugin_type;

/// What a plugin registers as, in its GetInfo answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PluginKind {
    /// A CSI driver (`CSIPlugin`): its registration and NodeGetInfo.
    Csi,
    /// A device plugin (`DevicePlugin`), met through `plugins_registry`
    /// or on `kubelet.sock`.
    DevicePlugin,
    /// A DRA driver (`DRAPlugin`).
    Dra,
}

impl PluginKind {
    /// The plugin type it registers with, as on the wire.
    pub fn plugin_type(self) -> &'static str {
        match self {
            Self::Csi => plugin_type::CSI,
            Self::DevicePlugin => plugin_type::DEVICE,
            Self::Dra => plugin_type::DRA,
        }
    }
}
