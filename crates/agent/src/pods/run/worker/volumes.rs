//! Setting up the pod's volumes, as the kubelet's `WaitForAttachAndMount`
//! at the start of each pod sync: asked of the volume manager before the
//! sandbox is made (and again when the resync is due, which writes changed
//! objects and renewed tokens); a failure said once as the kubelet's
//! `FailedMount` Event and tried again on its operation back-off, and after
//! 2m3s the kubelet's `Unable to attach or mount volumes`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::Said;

use super::Worker;
use crate::pods::admit::spec::is_static;
use crate::volumes::FAILED_MOUNT;

/// A pod's volumes that failed to be set up are tried again on the
/// kubelet's operation backoff (`exponentialbackoff`: 500 ms doubling to
/// 2m2s).
const VOLUME_BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(122));
/// How long a pod waits for its volumes before the kubelet says it could
/// not mount them (`podAttachAndMountTimeout`).
const ATTACH_AND_MOUNT_TIMEOUT: Duration = Duration::from_secs(123);

impl Worker {
    /// Whether the pod's volumes are set up: set up now when they are not
    /// (or written again when their resync is due). A failure is said
    /// once as the kubelet's `FailedMount` Event, and tried again on its
    /// backoff.
    pub(super) async fn volumes_ready(&mut self, pod: &Pod) -> bool {
        let Some(handle) = self.context.volumes.clone() else {
            return true;
        };
        let now = tokio::time::Instant::now();
        let due = match (&self.volumes, self.volumes_resync_at) {
            (None, _) => !self.volume_setup.waiting(now),
            (Some(_), Some(at)) => at <= now,
            (Some(_), None) => true,
        };
        if !due {
            return self.volumes.is_some();
        }
        // A static pod does not wait for the Node (the API server may be
        // one of them).
        let node = if is_static(pod) {
            self.context.informers.node_now()
        } else {
            self.context.informers.node().await.ok().flatten()
        };
        let set_up = handle.set_up(pod, node.as_deref()).await;
        for warning in handle.take_warnings(&self.pod_ref.uid) {
            self.event(warning.reason, warning.message);
        }
        match set_up {
            Ok(volumes) => {
                if self.volumes.is_none() && !volumes.is_empty() {
                    tracing::info!(volumes = volumes.len(), "the pod's volumes are set up");
                }
                self.volume_setup.succeeded();
                self.volumes_failing_since = None;
                self.volumes = Some(volumes);
                self.volumes_resync_at = Some(now + self.context.resync.delay(1));
                true
            }
            Err(e) if self.volumes.is_some() => {
                // Set up before: what the containers have stays; written
                // again at the next resync.
                tracing::warn!(error = %e, "cannot write the pod's volumes again; they keep what they hold");
                self.volumes_resync_at = Some(now + self.context.resync.delay(1));
                true
            }
            Err(e) => {
                let (since, said) = self.volumes_failing_since.get_or_insert((now, false));
                let timed_out = !*said && now.duration_since(*since) >= ATTACH_AND_MOUNT_TIMEOUT;
                if timed_out {
                    *said = true;
                }
                let message = e.to_string();
                let unable = e.unable_to_mount();
                if self.volume_setup.failed(e, &VOLUME_BACKOFF, now) == Said::NewError {
                    tracing::warn!(error = %message, "cannot set up the pod's volumes; trying again with backoff");
                    self.event(FAILED_MOUNT, message);
                }
                if timed_out {
                    self.event(FAILED_MOUNT, unable);
                }
                false
            }
        }
    }

    /// The pod's object changed: an update (its spec, labels or
    /// annotations, not its status alone) makes its volumes due at once,
    /// as an update makes the kubelet sync the pod and its volume manager
    /// read the pod's volumes again (a grown claim, changed content).
    /// Whether the pod is to be synced: an update, a deletion, or a phase
    /// another writer set (the kubelet's reconcile); not a status alone.
    pub(super) fn pod_updated(&mut self) -> bool {
        let pod = self.pod.borrow().clone();
        let (old, new) = (&self.last_seen, &pod);
        let updated = old.spec != new.spec
            || old.metadata.labels != new.metadata.labels
            || old.metadata.annotations != new.metadata.annotations;
        if updated && self.volumes.is_some() {
            self.volumes_resync_at = Some(tokio::time::Instant::now());
        }
        let deleted = old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
            || old.metadata.deletion_grace_period_seconds
                != new.metadata.deletion_grace_period_seconds;
        let phase = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.clone());
        let deleted = deleted || phase(old) != phase(new);
        // A readiness gate's condition, written by its owner, changes
        // the pod's Ready.
        let gated = gate_conditions(old) != gate_conditions(new);
        self.last_seen = pod;
        updated || deleted || gated
    }

    /// Records a `Warning` Event on the pod, on a task of its own.
    pub(super) fn event(&self, reason: &'static str, message: String) {
        let events = self.context.pod_events.clone();
        let pod = self.pod_ref.clone();
        tokio::spawn(async move { events.warning(&pod, reason, &message).await });
    }
}

/// The statuses of the conditions `pod`'s readiness gates name.
fn gate_conditions(pod: &Pod) -> Vec<Option<String>> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .map(|gate| {
            conditions
                .into_iter()
                .flatten()
                .find(|c| c.type_ == gate.condition_type)
                .map(|c| c.status.clone())
        })
        .collect()
}
