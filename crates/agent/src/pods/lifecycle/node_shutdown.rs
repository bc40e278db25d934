//! How the pods owner answers what the node shutdown manager asks: while
//! the node shuts down every pod due for admission is refused
//! (`NodeShutdown`, as the kubelet's admit handler refuses it);
//! the active pods are listed with their priorities; a group of them is
//! stopped for good with a grace period each, their statuses as the
//! kubelet's after a node shutdown, and the answer comes once all of them
//! gave back what they held (the kubelet waits for the group's kills and
//! its volumes).

use std::collections::HashSet;

use super::operation::Start;
use super::owner::Owner;
use super::shutdown_requests::{
    ActivePod, KillWait, NODE_SHUTDOWN_EVENT_REASON, NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE,
    NODE_SHUTDOWN_NOT_ADMITTED_REASON, ShutdownRequest,
};
use super::tracked::Next;

impl Owner {
    /// Answers the shutdown manager.
    pub(super) fn on_shutdown_request(&mut self, request: ShutdownRequest) {
        match request {
            ShutdownRequest::ShuttingDown(now) => {
                if self.node_shutting_down != now {
                    self.node_shutting_down = now;
                    let message = if now {
                        "Shutdown manager detected shutdown event"
                    } else {
                        "Shutdown manager detected shutdown cancellation"
                    };
                    let warnings = self.warnings.clone();
                    let shutdown = self.shutdown.clone();
                    self.tasks.spawn(async move {
                        tokio::select! {
                            () = shutdown.cancelled() => {}
                            () = warnings.on_node("Normal", NODE_SHUTDOWN_EVENT_REASON, message) => {}
                        }
                    });
                }
            }
            ShutdownRequest::ActivePods(answer) => {
                let active = self
                    .tracked
                    .values()
                    .filter(|t| t.active())
                    .filter_map(|t| {
                        let spec = t.pod()?.spec.as_ref();
                        Some(ActivePod {
                            pod: t.pod_ref().clone(),
                            priority: spec.and_then(|s| s.priority).unwrap_or(0),
                            termination_grace_period: spec
                                .and_then(|s| s.termination_grace_period_seconds),
                        })
                    })
                    .collect();
                let _ = answer.send(active);
            }
            ShutdownRequest::Kill { pods, done } => {
                let mut pending = HashSet::new();
                for (uid, grace) in pods {
                    let Some(tracked) = self.tracked.get_mut(&uid) else {
                        continue;
                    };
                    if tracked.given_back() {
                        continue;
                    }
                    {
                        let _pod = tracked.pod_ref().span("owner").entered();
                        tracing::info!(?grace, "the node shuts down: the pod is stopped");
                    }
                    self.operations.kills.insert(uid.clone(), grace);
                    tracked.kill();
                    self.dirty.insert(uid.clone());
                    self.cancel_unwanted(&uid);
                    pending.insert(uid);
                }
                self.kill_waits.push(KillWait {
                    pending,
                    done: Some(done),
                });
                self.settle_kill_waits();
            }
        }
    }

    /// Answers the kills whose pods all gave back what they held (or are
    /// no longer followed).
    pub(super) fn settle_kill_waits(&mut self) {
        if self.kill_waits.is_empty() {
            return;
        }
        let tracked = &self.tracked;
        let kills = &self.operations.kills;
        for wait in &mut self.kill_waits {
            wait.pending.retain(|uid| {
                let back = tracked.get(uid).is_none_or(|t| t.given_back());
                if back {
                    kills.forget(uid);
                }
                !back
            });
            if wait.pending.is_empty()
                && let Some(done) = wait.done.take()
            {
                let _ = done.send(());
            }
        }
        self.kill_waits.retain(|w| w.done.is_some());
    }

    /// While the node shuts down, the pod `uid` due for admission is
    /// refused instead; whether it was.
    pub(super) fn refuse_while_shutting_down(&mut self, uid: &str) -> bool {
        if !self.node_shutting_down {
            return false;
        }
        let Some(tracked) = self.tracked.get_mut(uid) else {
            return false;
        };
        tracked.started(Next::Admit);
        self.start(
            uid.to_string(),
            Start::Reject {
                reason: NODE_SHUTDOWN_NOT_ADMITTED_REASON,
                message: NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE,
            },
            Next::Admit,
            false,
            None,
        );
        true
    }
}
