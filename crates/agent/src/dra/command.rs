//! What handles and the DRA manager's task exchange.

use tokio::sync::{broadcast, oneshot, watch};

use super::config::DraManagerConfig;
use super::connection::{Channel, Link};
use super::error::DraError;
use super::event::DraEvent;
use super::metrics::DraMetrics;
use super::service::{DraService, HealthService};
use super::status::DraDriverStatus;

/// What the manager's task is told by handles.
pub(crate) enum Command {
    Register {
        driver: String,
        endpoint: String,
        service: DraService,
        health_service: Option<HealthService>,
        /// The new instance's connection state, to wait for its first attempt.
        reply: oneshot::Sender<Result<watch::Receiver<Link>, DraError>>,
    },
    Deregister {
        driver: String,
        endpoint: String,
    },
    /// The instance calls for a driver go to.
    Pick {
        driver: String,
        reply: oneshot::Sender<Result<(String, DraService, Channel), DraError>>,
    },
    Status {
        reply: oneshot::Sender<Vec<DraDriverStatus>>,
    },
}

/// What the handle and the manager's task share.
pub(crate) struct Shared {
    pub(crate) config: DraManagerConfig,
    pub(crate) events: broadcast::Sender<DraEvent>,
    pub(crate) changes: watch::Receiver<u64>,
    pub(crate) metrics: DraMetrics,
}
