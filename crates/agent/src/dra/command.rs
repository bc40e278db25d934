//! What handles and the DRA manager's task exchange and share.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{broadcast, oneshot};

use super::config::DraManagerConfig;
use super::error::DraError;
use super::metrics::DraMetrics;
use super::snapshot::DraSnapshot;
use crate::dra::drivers::connection::Channel;
use crate::dra::drivers::state::InstanceId;
use crate::dra::prepare::claim_book::ClaimBook;
use crate::dra::prepare::records::PreparedClaims;
use crate::event::AgentEvent;
use crate::published::Store;
use nodeplugins_api::dra_client::{DraService, HealthService};

/// What the manager's task is told by handles.
pub(crate) enum Command {
    Register {
        driver: String,
        endpoint: String,
        service: DraService,
        health_service: Option<HealthService>,
        /// Whether the instance connects at once, or waits for a
        /// [`Command::Connect`] (or a call).
        connect_now: bool,
        reply: oneshot::Sender<Result<(), DraError>>,
    },
    /// Start connecting the instance of `driver` at `endpoint` if it waits.
    Connect { driver: String, endpoint: String },
    /// Answered once the instance is gone from the routes.
    Deregister {
        driver: String,
        endpoint: String,
        reply: oneshot::Sender<()>,
    },
}

/// Where calls to a driver go: its instance in use.
#[derive(Clone)]
pub(crate) struct Route {
    pub(crate) instance: InstanceId,
    pub(crate) endpoint: String,
    pub(crate) service: DraService,
    pub(crate) channel: Channel,
}

/// Driver → where its calls go, as the manager's task last decided. Calls
/// read it without a round trip to the task; the task publishes a new table
/// before it answers a registration or deregistration.
pub(crate) type Routes = BTreeMap<String, Route>;

/// What the handle and the manager's task share.
pub(crate) struct Shared {
    pub(crate) config: DraManagerConfig,
    pub(crate) events: broadcast::Sender<AgentEvent>,
    pub(crate) routes: Store<Routes>,
    /// The prepared claims, changed by the callers that prepare and
    /// unprepare them.
    pub(crate) claims: Arc<ClaimBook>,
    /// The prepared claims as last changed.
    pub(crate) prepared: Store<PreparedClaims>,
    /// The drivers after the latest change.
    pub(crate) store: Store<DraSnapshot>,
    pub(crate) metrics: DraMetrics,
}
