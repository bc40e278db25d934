//! Serving a DRA driver: `DRAPlugin` v1 and v1beta1 (and optionally device
//! health) on the service socket, registered through `plugins_registry`.
//!
//! The author implements [`DraDriver`] (prepare and unprepare) and, for
//! health, reports through a [`HealthReporter`]. [`DraDriverServer::builder`]
//! serves the service socket first and only then the registration socket,
//! so the agent never sees a driver that cannot answer yet. On shutdown it
//! goes the other way: the registration socket goes first (the agent
//! deregisters this instance), then the service finishes the calls it is
//! running and removes its socket.
//!
//! For seamless upgrades give each instance an id (the pod UID): both
//! sockets get per-instance names, so the old and the new instance run side
//! by side and the agent calls the newest. Instances must keep no state
//! between calls, since a claim may be prepared by one and unprepared by
//! another; with `serialize` on (the default), calls are serialized across
//! instances by an exclusive lock on `<plugin dir>/serialize.lock`.

mod builder;
mod health;
mod serializer;
mod server;
mod service;

use std::collections::HashMap;
use std::path::PathBuf;

use nodeplugins_api::dra::v1;
use nodeplugins_api::transport::TransportError;

pub use builder::DraDriverBuilder;
pub use health::{HEALTH_RESEND_INTERVAL, HEALTH_TIMEOUT_SECONDS, HealthReporter};
pub use server::DraDriverServer;

use crate::registrar::RegistrarError;

/// What a DRA driver author implements. Results are keyed by claim UID; a
/// claim without a result counts as failed for the agent.
#[async_trait::async_trait]
pub trait DraDriver: Send + Sync + 'static {
    /// Prepares `claims`: per claim, its devices or why it failed.
    async fn prepare(
        &self,
        claims: Vec<v1::Claim>,
    ) -> HashMap<String, Result<Vec<v1::Device>, String>>;

    /// Unprepares `claims`: per claim, success or why it failed. Must succeed
    /// for claims that were never prepared.
    async fn unprepare(&self, claims: Vec<v1::Claim>) -> HashMap<String, Result<(), String>>;
}

/// Which DRAPlugin versions to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersions {
    /// `v1.DRAPlugin`.
    pub v1: bool,
    /// `v1beta1.DRAPlugin`.
    pub v1beta1: bool,
}

impl Default for ApiVersions {
    fn default() -> Self {
        Self {
            v1: true,
            v1beta1: true,
        }
    }
}

/// Why the driver could not be served.
#[derive(Debug, thiserror::Error)]
pub enum DraDriverError {
    /// Neither API version is enabled.
    #[error("no supported DRA gRPC API is implemented and enabled")]
    NoService,
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
