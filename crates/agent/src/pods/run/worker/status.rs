//! The pod's status written when it changed, as the kubelet's status
//! manager writes it: to the pod itself, as the API has it, or, for a
//! static pod, to its mirror pod (kept while the mirror is not made yet).

use std::time::SystemTime;

use k8s_openapi::api::core::v1::Pod;
use nodeplugins_api::retry::{Classify, RetryClass};

use super::Worker;
use crate::pods::admit::spec::is_static;
use crate::pods::lifecycle::report::Report;
use crate::pods::pod::PodRef;
use crate::pods::run::pod_sync::{ApiPhase, SyncPlan};
use crate::pods::status::api_status::{StatusInputs, api_status};

/// The pod a status is written to.
enum StatusTarget {
    /// The pod, if still at this version (`None`: any).
    Pod(PodRef, Option<String>),
    /// A static pod with no mirror pod yet: kept, and written once the
    /// mirror is made (the pods owner wakes the worker then).
    Kept,
}

impl Worker {
    /// Writes the pod's status when it changed; the phase written.
    pub(super) async fn write_status(&mut self, pod: &Pod, decided: &SyncPlan) -> Option<ApiPhase> {
        // Without a mirror pod nothing is written (and the API may be
        // away: nothing is asked of it either).
        let (target, version) = match self.status_target(pod) {
            StatusTarget::Pod(target, version) => (target, version),
            StatusTarget::Kept => {
                if self.written_to.is_some() || self.written.is_none() {
                    tracing::debug!("the static pod has no mirror pod yet; its status is kept");
                }
                self.written = Some(serde_json::Value::Null);
                self.written_to = None;
                self.phase_reached(decided.phase);
                return self.phase;
            }
        };
        let runtime_name = match self
            .context
            .node
            .runtime_name(self.context.runtime.as_ref())
            .await
        {
            Ok(name) => name,
            Err(e) => {
                tracing::warn!(error = %e, "the runtime does not tell its name; the status waits");
                self.written = None;
                return None;
            }
        };
        let node_ip = self.context.node.node_ip().await;
        let resource_health = self.current_resource_health(pod);
        let recursive_read_only = self
            .context
            .node
            .recursive_read_only(self.context.runtime.as_ref())
            .await;
        let inputs = StatusInputs {
            runtime: &runtime_name,
            recursive_read_only,
            node_ip: node_ip.as_deref(),
            start_time: self.start_time,
            generation: pod.metadata.generation,
            conditions: &self.conditions,
            pod,
            resource_health: &resource_health,
            disruption: self.disruption,
            now: SystemTime::now(),
        };
        let (status, conditions) = api_status(decided, &inputs);
        self.resource_health = resource_health;
        if self.written.as_ref() == Some(&status) && self.written_to.as_ref() == Some(&target.uid) {
            return self.phase;
        }
        match self
            .context
            .writer
            .patch_status(&target, version.as_deref(), &status)
            .await
        {
            Ok(now_at) => {
                // Until the pod's watch shows this write, the next one
                // goes against the version it made.
                self.own_write = version.zip(now_at);
                self.written = Some(status);
                self.written_to = Some(target.uid);
                self.conditions = conditions;
                self.phase_reached(decided.phase);
                self.phase
            }
            Err(e) if e.class() == RetryClass::Conflict => {
                // Changed meanwhile (our own last write, or another
                // writer's): written again from the pod as it is now.
                tracing::debug!("the pod changed since it was read; its status is made again");
                self.written = None;
                None
            }
            Err(e) => {
                self.pod_gone = e.is_not_found();
                if !self.pod_gone {
                    tracing::warn!(error = %e, "cannot write the pod's status; trying again");
                }
                self.written = None;
                None
            }
        }
    }

    /// The pod's status shows `phase` now: the owner is told when it
    /// changed.
    fn phase_reached(&mut self, phase: ApiPhase) {
        if self.phase != Some(phase) {
            tracing::info!(phase = phase.as_str(), "pod status written");
            let _ = self.context.reports.send(Report::Phase {
                uid: self.pod_ref.uid.clone(),
                phase,
            });
        }
        self.phase = Some(phase);
    }

    /// Where pod `pod`'s status goes.
    fn status_target(&self, pod: &Pod) -> StatusTarget {
        if !is_static(pod) {
            let seen = pod.metadata.resource_version.clone();
            let version = match &self.own_write {
                Some((from, to)) if seen.as_ref() == Some(from) => Some(to.clone()),
                _ => seen,
            };
            return StatusTarget::Pod(self.pod_ref.clone(), version);
        }
        match self.context.mirrors.mirror_of(pod) {
            Some(mirror) => StatusTarget::Pod(mirror, None),
            None => StatusTarget::Kept,
        }
    }
}
