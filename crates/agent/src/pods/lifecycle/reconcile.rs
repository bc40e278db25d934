//! The owner's reconcile: what the managers hold (devices, claims), what
//! the runtime runs and what volumes are left on disk for pods the owner
//! does not follow (gone while the agent was away, made again under the
//! same name, left by the kubelet before it) is found and given back.

use std::time::SystemTime;

use super::owner::Owner;
use super::report::Report;
use super::tracked::Tracked;
use crate::pods::admit::held::held_pods;
use crate::pods::pod::PodRef;

impl Owner {
    /// Lists the runtime's sandboxes on a task of its own: a pod the
    /// runtime runs that the owner does not follow (deleted while the
    /// agent was away) is stopped. At every listing of the watch and every
    /// reconcile period, not before each admission (the answer would wake
    /// the owner, which would list again).
    pub(super) fn list_runtime_pods(&mut self) {
        let runtime = self.operations.worker_context.runtime.clone();
        let reports = self.operations.worker_context.reports.clone();
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            let listed = tokio::select! {
                () = shutdown.cancelled() => return,
                listed = runtime.sandboxes() => listed,
            };
            match listed {
                Ok(sandboxes) => {
                    let pods = sandboxes
                        .into_iter()
                        .map(|s| PodRef {
                            namespace: s.pod.namespace,
                            name: s.pod.name,
                            uid: s.pod.uid,
                        })
                        .collect();
                    let _ = reports.send(Report::RuntimePods(pods));
                }
                Err(e) => tracing::debug!(error = %e, "cannot list the runtime's sandboxes"),
            }
        });
    }

    /// Gives back what the managers hold for pods that are not active:
    /// every pod UID their records name that the API does not have (gone
    /// while the agent was away, made again under the same name) or no
    /// longer runs.
    pub(super) fn reconcile(&mut self) {
        if !self.listed {
            return;
        }
        let devices = self.operations.admitter.devices.snapshot();
        let claims = self.operations.admitter.dra.claims().borrow().clone();
        for (uid, pod_ref) in held_pods(&devices, &claims) {
            match self.tracked.get_mut(&uid) {
                Some(tracked) => {
                    if !tracked.wants_admission() && !tracked.running() {
                        tracked.holds_again();
                        self.dirty.insert(uid);
                    }
                }
                None => {
                    let _pod = pod_ref.span("owner").entered();
                    tracing::info!(
                        "a pod the API no longer has holds devices or claims; giving them back"
                    );
                    let tracked = Tracked::orphan(pod_ref, SystemTime::now());
                    self.tracked.insert(uid.clone(), tracked);
                    self.dirty.insert(uid);
                }
            }
        }
        // Volumes on disk of a pod the API no longer has (gone while the
        // agent was away, or left by the kubelet before it).
        let on_disk = self
            .operations
            .releaser
            .volumes
            .as_ref()
            .map(|v| v.pods_on_disk())
            .unwrap_or_default();
        for uid in on_disk {
            if self.tracked.contains_key(&uid) {
                continue;
            }
            let pod_ref = PodRef {
                namespace: String::new(),
                name: String::new(),
                uid: uid.clone(),
            };
            let _pod = pod_ref.span("owner").entered();
            tracing::info!("a pod the API no longer has left volumes on disk; tearing them down");
            let tracked = Tracked::orphan(pod_ref, SystemTime::now());
            self.tracked.insert(uid.clone(), tracked);
            self.dirty.insert(uid);
        }
    }
}
