//! What handles and the DRA manager's task exchange.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{broadcast, oneshot, watch};

use super::claim::PreparedClaim;
use super::config::DraManagerConfig;
use super::connection::Channel;
use super::error::DraError;
use super::metrics::DraMetrics;
use super::records::{ClaimToPrepare, PreparePlan, PreparedClaims, UnpreparePlan};
use super::snapshot::DraSnapshot;
use super::state::InstanceId;
use crate::checkpoint::{CheckpointError, WrittenReply};
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
    /// Prepare, first step: check the claims and record them as used by
    /// their pods (pending where not yet prepared); answered with the calls
    /// to make and, when the records changed, the end of their write. No
    /// driver may be called before that.
    BeginPrepare {
        claims: Vec<ClaimToPrepare>,
        reply: oneshot::Sender<Result<(PreparePlan, Option<WriteDone>), DraError>>,
    },
    /// Prepare, last step: what each driver answered (claim results of the
    /// drivers whose call succeeded); answered once recorded on disk.
    FinishPrepare {
        results: Vec<(String, Vec<PreparedClaim>)>,
        reply: WrittenReply,
    },
    /// After a reboot: the claims of pod `pod_uid` (all, with `None`)
    /// are prepared again by the next prepare; answered once on disk.
    PrepareAgain {
        pod_uid: Option<String>,
        reply: WrittenReply,
    },
    /// Unprepare a pod, first step: forget it where other pods still use a
    /// claim, and mark the claims it used last as being unprepared;
    /// answered with the calls to make and the end of the write.
    BeginUnprepare {
        pod_uid: String,
        reply: oneshot::Sender<(UnpreparePlan, Option<WriteDone>)>,
    },
    /// Unprepare, last step: forget what each driver unprepared (driver →
    /// claim UIDs); the claims of `ended` are no longer being unprepared.
    /// Answered once that is on disk.
    FinishUnprepare {
        unprepared: Vec<(String, Vec<String>)>,
        ended: Vec<String>,
        reply: WrittenReply,
    },
}

/// The end of a checkpoint write a caller waits for.
pub(crate) type WriteDone = oneshot::Receiver<Result<(), Arc<CheckpointError>>>;

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
    pub(crate) routes: watch::Receiver<Arc<Routes>>,
    /// The prepared claims, as the task last recorded them.
    pub(crate) prepared: watch::Receiver<Arc<PreparedClaims>>,
    /// The drivers after the latest change.
    pub(crate) store: Store<DraSnapshot>,
    pub(crate) metrics: DraMetrics,
}
