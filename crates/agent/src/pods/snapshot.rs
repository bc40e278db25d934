//! What the pods owner publishes after every change: each pod bound to the
//! node with where it is in its life here and, once admitted, what each of
//! its containers got.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::pod::PodRef;
use crate::pods::admit::container::ContainerResources;

/// Where a pod is in its life on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PodPhase {
    /// Seen; its admission has not started yet.
    Pending,
    /// Its claims are not created, allocated or reserved for it yet (or a
    /// claim it names does not exist yet): admission is tried again when
    /// the pod changes and with backoff.
    Waiting,
    /// Its devices are being allocated and its claims prepared.
    Admitting,
    /// Every container has what it asked for.
    Admitted,
    /// Admission failed (an Event on the pod says why); tried again when
    /// the pod changes and with backoff.
    Failed,
    /// It ended or went: what it holds is being given back.
    Releasing,
    /// It ended: it holds nothing here any more.
    Released,
}

impl PodPhase {
    /// The phase's name, as the JSON shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Waiting => "waiting",
            Self::Admitting => "admitting",
            Self::Admitted => "admitted",
            Self::Failed => "failed",
            Self::Releasing => "releasing",
            Self::Released => "released",
        }
    }
}

/// One pod bound to the node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodStatus {
    /// The pod.
    #[serde(flatten)]
    pub pod: PodRef,
    /// Where it is.
    pub phase: PodPhase,
    /// Why it waits, failed, or could not give back what it holds: the
    /// reason of its Event (`UnexpectedAdmissionError`,
    /// `FailedPrepareDynamicResources`), or what it waits for.
    #[serde(default)]
    pub reason: Option<String>,
    /// The message that goes with `reason`.
    #[serde(default)]
    pub message: Option<String>,
    /// Failed attempts in a row (admitting, or giving back).
    #[serde(default)]
    pub failures: u32,
    /// When the next attempt is due, after a failure (Unix milliseconds).
    #[serde(default)]
    pub retry_at_unix_ms: Option<u64>,
    /// When the pod was first seen bound to the node (Unix microseconds).
    pub seen_at_unix_us: u64,
    /// When every container had its resources (Unix microseconds).
    #[serde(default)]
    pub ready_at_unix_us: Option<u64>,
    /// Whether the API still has the pod (a pod gone keeps its row while
    /// what it held is given back).
    pub in_api: bool,
    /// The phase the node last wrote to the pod's status (`Pending`,
    /// `Running`, `Succeeded`, `Failed`), once its containers run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_phase: Option<String>,
    /// Once admitted, each container (init containers first) with what it
    /// got.
    #[serde(default)]
    pub containers: Vec<ContainerResources>,
    /// Its volumes as the volume manager last set them up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeStatus>,
}

/// One volume of a pod.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VolumeStatus {
    /// Its name in the pod.
    pub name: String,
    /// Its kind, as the pod's spec names it (`projected`, `emptyDir`).
    pub kind: String,
    /// Where it is on the host.
    pub path: String,
    /// Why it is not set up; none: it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every pod the owner follows, after its latest change.
#[derive(Debug, Default)]
pub struct PodsSnapshot {
    /// Published by the running owner (the first snapshot, before it runs,
    /// is empty).
    pub(crate) running: bool,
    /// Whether the pods bound to the node were listed once: until then
    /// nothing is given back by the reconcile.
    pub(crate) listed: bool,
    /// How many snapshots were published before this one.
    pub(crate) generation: u64,
    /// Pod UID → its row; shared between snapshots while it does not
    /// change.
    pub(crate) pods: BTreeMap<String, Arc<PodStatus>>,
}

impl crate::published::Ready for PodsSnapshot {
    fn ready(&self) -> bool {
        self.running
    }
}

impl PodsSnapshot {
    /// Published by the running owner.
    pub fn running(&self) -> bool {
        self.running
    }

    /// Whether the pods bound to the node were listed at least once.
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// Every pod, sorted by namespace and name.
    pub fn pods(&self) -> Vec<Arc<PodStatus>> {
        let mut pods: Vec<Arc<PodStatus>> = self.pods.values().cloned().collect();
        pods.sort_by(|a, b| {
            (&a.pod.namespace, &a.pod.name, &a.pod.uid).cmp(&(
                &b.pod.namespace,
                &b.pod.name,
                &b.pod.uid,
            ))
        });
        pods
    }

    /// The pod of UID `uid`.
    pub fn get(&self, uid: &str) -> Option<&Arc<PodStatus>> {
        self.pods.get(uid)
    }

    /// The admitted pods, by UID.
    pub fn admitted(&self) -> impl Iterator<Item = &Arc<PodStatus>> {
        self.pods.values().filter(|p| p.phase == PodPhase::Admitted)
    }
}
