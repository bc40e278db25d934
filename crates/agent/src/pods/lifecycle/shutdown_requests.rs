//! What the node shutdown manager asks of the pods owner, and what the
//! owner and the operations share to answer it: the kubelet's words for a
//! pod refused or stopped by the node's shutdown, the active pods as the
//! manager groups them, and the pods being stopped for good with their
//! grace periods.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::pods::pod::PodRef;

/// The reason of a pod refused while the node shuts down.
pub(crate) const NODE_SHUTDOWN_NOT_ADMITTED_REASON: &str = "NodeShutdown";
/// ...and its message.
pub(crate) const NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE: &str =
    "Pod was rejected as the node is shutting down.";
/// The reason of the Events on the Node when its shutdown starts or is
/// cancelled.
pub(crate) const NODE_SHUTDOWN_EVENT_REASON: &str = "Shutdown";
/// The reason of a pod stopped by the node's shutdown.
pub(crate) const NODE_SHUTDOWN_REASON: &str = "Terminated";
/// ...and its message (its `DisruptionTarget` condition's too).
pub(crate) const NODE_SHUTDOWN_MESSAGE: &str =
    "Pod was terminated in response to imminent node shutdown.";

/// A pod the node runs, as the shutdown manager groups it.
#[derive(Debug, Clone)]
pub(crate) struct ActivePod {
    pub(crate) pod: PodRef,
    /// `spec.priority`, 0 when unset.
    pub(crate) priority: i32,
    /// `spec.terminationGracePeriodSeconds`.
    pub(crate) termination_grace_period: Option<i64>,
}

/// What the shutdown manager asks.
#[derive(Debug)]
pub(crate) enum ShutdownRequest {
    /// The node is shutting down (`true`), or no longer (`false`): pods are
    /// refused while it is, and an Event on the Node says so.
    ShuttingDown(bool),
    /// The active pods.
    ActivePods(oneshot::Sender<Vec<ActivePod>>),
    /// Stop these pods (UID, grace period) for good; answered once all gave
    /// back what they held.
    Kill {
        pods: Vec<(String, Duration)>,
        done: oneshot::Sender<()>,
    },
}

/// The pods being stopped for good, with their grace periods, shared by
/// the owner (which adds them) and the operations (whose workers stop
/// them so).
#[derive(Debug, Clone, Default)]
pub(crate) struct Kills(Arc<Mutex<HashMap<String, Duration>>>);

impl Kills {
    pub(crate) fn insert(&self, uid: String, grace: Duration) {
        if let Ok(mut kills) = self.0.lock() {
            kills.insert(uid, grace);
        }
    }

    /// The grace period pod `uid` is stopped with, when it is killed.
    pub(crate) fn grace_of(&self, uid: &str) -> Option<Duration> {
        self.0.lock().ok()?.get(uid).copied()
    }

    pub(crate) fn forget(&self, uid: &str) {
        if let Ok(mut kills) = self.0.lock() {
            kills.remove(uid);
        }
    }
}

/// One group's kill being waited for: the pods not given back yet.
#[derive(Debug)]
pub(crate) struct KillWait {
    pub(crate) pending: HashSet<String>,
    pub(crate) done: Option<oneshot::Sender<()>>,
}
