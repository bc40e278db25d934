//! What handles and the DRA manager's task exchange.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{broadcast, oneshot, watch};

use super::checkpoint::{ClaimPods, PreparedClaims};
use super::claim::PreparedClaim;
use super::config::DraManagerConfig;
use super::connection::Channel;
use super::error::DraError;
use super::metrics::DraMetrics;
use super::service::{DraService, HealthService};
use super::snapshot::DraSnapshot;
use super::state::InstanceId;
use crate::checkpoint::WrittenReply;
use crate::event::AgentEvent;

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
    /// A driver prepared claims: record the successes; answered once the
    /// record is on disk.
    Prepared {
        driver: String,
        results: Vec<PreparedClaim>,
        /// Claim UID → the pod it was prepared for, if named.
        pods: ClaimPods,
        reply: WrittenReply,
    },
    /// Pod `pod_uid` no longer uses the claims `claim_uids` (which other
    /// pods still use): forget that it did; answered once that is on disk.
    PodReleased {
        pod_uid: String,
        claim_uids: Vec<String>,
        reply: WrittenReply,
    },
    /// A driver unprepared claims: forget its records of them; answered
    /// once that is on disk.
    Unprepared {
        driver: String,
        uids: Vec<String>,
        reply: WrittenReply,
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
    pub(crate) changes: watch::Receiver<u64>,
    pub(crate) routes: watch::Receiver<Arc<Routes>>,
    /// The prepared claims, as the task last recorded them.
    pub(crate) prepared: watch::Receiver<Arc<PreparedClaims>>,
    /// The drivers after the latest change.
    pub(crate) snapshot: watch::Receiver<Arc<DraSnapshot>>,
    pub(crate) metrics: DraMetrics,
}
