//! Why a device plugin stopped.

use std::path::PathBuf;

use nodeplugins_api::transport::TransportError;

use crate::registrar::RegistrarError;

/// Why the plugin stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DevicePluginError {
    /// The socket could not be served.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The registration socket could not be served.
    #[error(transparent)]
    Registrar(#[from] RegistrarError),
    /// The device plugin directory could not be watched.
    #[error("cannot watch {dir:?}: {source}")]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The CDI spec could not be written before serving.
    #[error("cannot write the CDI spec {path:?}: {source}")]
    Cdi {
        /// The spec file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The plugin's task ended abnormally.
    #[error("the device plugin's task ended abnormally: {0}")]
    Panicked(#[source] tokio::task::JoinError),
}
