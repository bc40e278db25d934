//! Why a DRA driver could not be served.

use std::path::PathBuf;

use nodeplugins_api::transport::TransportError;

use crate::registrar::RegistrarError;

/// Why the driver could not be served.
#[derive(Debug, thiserror::Error)]
pub enum DraDriverError {
    /// Neither API version is enabled.
    #[error("no supported DRA gRPC API is implemented and enabled")]
    NoService,
    /// Resources to publish, but no API client to publish them with.
    #[error("resources to publish need an API client (DraDriverBuilder::kube)")]
    ResourcesWithoutKube,
    /// The plugin or registry directory could not be created.
    #[error("cannot create the directory {dir:?}: {source}")]
    PluginDir {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The service socket could not be served.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The registration socket could not be served.
    #[error(transparent)]
    Registrar(#[from] RegistrarError),
}
