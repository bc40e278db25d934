//! Why a DRA driver could not be served.

use std::path::PathBuf;

use nodeplugins_api::transport::TransportError;

use crate::registrar::RegistrarError;

/// Why the driver could not be served, or what went wrong while it runs
/// (given to the driver's [`on_error`](super::DraDriverBuilder::on_error)
/// handler, recoverable or fatal as the Go helper's errors are).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The service stopped serving while the driver runs, without an
    /// error: the agent can no longer call it (fatal).
    #[error("the DRA service stopped serving")]
    ServiceStopped,
    /// Publishing ResourceSlices failed; it is retried (recoverable).
    #[cfg(feature = "kube")]
    #[error(transparent)]
    Publish(#[from] crate::dra_driver::PublishError),
}

impl DraDriverError {
    /// Whether the driver goes on after it, the failed work retried in the
    /// background (the Go helper's `ErrRecoverable`); a fatal error means
    /// the driver can no longer serve, and should exit to be restarted.
    pub fn is_recoverable(&self) -> bool {
        #[cfg(feature = "kube")]
        if matches!(self, Self::Publish(_)) {
            return true;
        }
        false
    }
}

/// What the driver does with each error while it runs.
pub type DraDriverErrorHandler = std::sync::Arc<dyn Fn(&DraDriverError) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_service_is_fatal() {
        assert!(!DraDriverError::ServiceStopped.is_recoverable());
        assert!(!DraDriverError::NoService.is_recoverable());
    }
}
