//! What the node's Ready condition knows of the container runtime, as the
//! kubelet's runtime state holds it: the runtime's status is asked every
//! 5 s (the kubelet's `updateRuntimeUp`), and its answer, its version and
//! its handlers are kept for the node status.
//!
//! - The runtime is up while its last good answer (`RuntimeReady` true) is
//!   under 30 s old; before the first, "container runtime status check may
//!   not have completed yet", after 30 s without one, "container runtime
//!   is down".
//! - `RuntimeReady` false (or missing): `container runtime not ready:
//!   RuntimeReady=false reason:<r> message:<m>`; `NetworkReady` the same
//!   as "container runtime network not ready: ...", and "network state
//!   unknown" until the first answer.
//! - A failed status call changes nothing (the last answer stands, and
//!   ages).

use std::sync::Arc;
use std::time::Duration;

use nodeplugins_api::timer::sleep_until;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::runtime::{ContainerRuntime, RuntimeCondition, RuntimeHandler};

/// How often the runtime's status is asked (the kubelet's
/// `updateRuntimeUp` period).
const RUNTIME_UP_PERIOD: Duration = Duration::from_secs(5);
/// A runtime whose last good answer is this old is down (the kubelet's
/// `baseRuntimeSyncThreshold`).
const RUNTIME_SYNC_THRESHOLD: Duration = Duration::from_secs(30);

/// The runtime as its last answers showed it.
#[derive(Debug, Clone)]
pub(in crate::kube_api) struct RuntimeReport {
    /// When it last answered ready.
    last_sync: Option<Instant>,
    /// Why it is not ready, from its last answer.
    runtime_error: Option<String>,
    /// Why its network is not ready.
    network_error: Option<String>,
    /// `<name>://<version>`, once known.
    pub(in crate::kube_api) version: Option<String>,
    /// Its handlers, sorted by name.
    pub(in crate::kube_api) handlers: Vec<RuntimeHandler>,
    /// Whether it honours `supplementalGroupsPolicy`.
    pub(in crate::kube_api) supplemental_groups_policy: bool,
}

impl Default for RuntimeReport {
    fn default() -> Self {
        Self {
            last_sync: None,
            runtime_error: None,
            network_error: Some("network state unknown".into()),
            version: None,
            handlers: Vec::new(),
            supplemental_groups_policy: false,
        }
    }
}

impl RuntimeReport {
    /// Why the node is not ready on the runtime's account at `now`: the
    /// runtime's errors, then its network's.
    pub(in crate::kube_api) fn errors(&self, now: Instant) -> Vec<String> {
        let mut errors = Vec::new();
        match self.last_sync {
            None => errors.push("container runtime status check may not have completed yet".into()),
            Some(at) if at + RUNTIME_SYNC_THRESHOLD <= now => {
                errors.push("container runtime is down".into());
            }
            Some(_) => {}
        }
        errors.extend(self.runtime_error.clone());
        errors.extend(self.network_error.clone());
        errors
    }

    /// The report after the runtime answered its status at `now`.
    pub(in crate::kube_api) fn answered(
        &mut self,
        conditions: &[RuntimeCondition],
        mut handlers: Vec<RuntimeHandler>,
        supplemental_groups_policy: bool,
        now: Instant,
    ) {
        handlers.sort_by(|a, b| a.name.cmp(&b.name));
        self.handlers = handlers;
        self.supplemental_groups_policy = supplemental_groups_policy;
        let find = |kind: &str| conditions.iter().find(|c| c.kind == kind);
        self.network_error = not_ready("container runtime network not ready", find("NetworkReady"));
        self.runtime_error = not_ready("container runtime not ready", find("RuntimeReady"));
        if self.runtime_error.is_none() {
            self.last_sync = Some(now);
        }
    }
}

/// `what` with the condition as the kubelet prints it, unless it holds.
fn not_ready(what: &str, condition: Option<&RuntimeCondition>) -> Option<String> {
    match condition {
        Some(c) if c.status => None,
        Some(c) => Some(format!(
            "{what}: {}={} reason:{} message:{}",
            c.kind, c.status, c.reason, c.message
        )),
        None => Some(format!("{what}: <nil>")),
    }
}

/// The runtime's report, shared between its poller and the node status.
#[derive(Debug, Clone)]
pub(in crate::kube_api) struct RuntimeState {
    report: watch::Sender<RuntimeReport>,
}

impl RuntimeState {
    /// Nothing known yet.
    pub(in crate::kube_api) fn new() -> Self {
        Self {
            report: watch::Sender::new(RuntimeReport::default()),
        }
    }

    /// The report, told of each change.
    pub(in crate::kube_api) fn subscribe(&self) -> watch::Receiver<RuntimeReport> {
        self.report.subscribe()
    }

    /// Asks `runtime` for its status and version every 5 s until `stop`.
    pub(in crate::kube_api) async fn poll(
        self,
        runtime: Arc<dyn ContainerRuntime>,
        stop: CancellationToken,
    ) {
        let mut failing = false;
        loop {
            let asked = async {
                let version = runtime.version().await;
                (version, runtime.status().await)
            };
            let (version, status) = tokio::select! {
                () = stop.cancelled() => return,
                answers = asked => answers,
            };
            let now = Instant::now();
            match status {
                Ok(status) => {
                    failing = false;
                    self.report.send_modify(|report| {
                        if let Ok(version) = &version {
                            // The kubelet's `containerRuntimeVersion`:
                            // the version without a leading "v".
                            let number = version.version.trim_start_matches('v');
                            report.version = Some(format!("{}://{number}", version.name));
                        }
                        report.answered(
                            &status.conditions,
                            status.handlers,
                            status.supplemental_groups_policy,
                            now,
                        );
                    });
                }
                Err(error) => {
                    if !failing {
                        tracing::warn!(%error, "container runtime sanity check failed");
                    }
                    failing = true;
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = sleep_until(Some(now + RUNTIME_UP_PERIOD)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(kind: &str, status: bool) -> RuntimeCondition {
        RuntimeCondition {
            kind: kind.into(),
            status,
            reason: if status { "" } else { "NetworkPluginNotReady" }.into(),
            message: if status {
                ""
            } else {
                "Network plugin returns error: cni plugin not initialized"
            }
            .into(),
        }
    }

    #[test]
    fn before_an_answer_the_runtime_and_network_are_unknown() {
        let report = RuntimeReport::default();
        assert_eq!(
            report.errors(Instant::now()),
            [
                "container runtime status check may not have completed yet",
                "network state unknown"
            ]
        );
    }

    #[test]
    fn a_network_not_ready_says_so_in_the_kubelets_words() {
        let mut report = RuntimeReport::default();
        let now = Instant::now();
        report.answered(
            &[
                condition("RuntimeReady", true),
                condition("NetworkReady", false),
            ],
            Vec::new(),
            false,
            now,
        );
        assert_eq!(
            report.errors(now),
            [
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"
            ]
        );
        report.answered(
            &[
                condition("RuntimeReady", true),
                condition("NetworkReady", true),
            ],
            Vec::new(),
            false,
            now,
        );
        assert!(report.errors(now).is_empty());
        assert_eq!(
            report.errors(now + RUNTIME_SYNC_THRESHOLD),
            ["container runtime is down"]
        );
    }

    #[test]
    fn a_missing_runtime_condition_is_nil_and_not_a_sync() {
        let mut report = RuntimeReport::default();
        let now = Instant::now();
        report.answered(&[condition("NetworkReady", true)], Vec::new(), false, now);
        assert_eq!(
            report.errors(now),
            [
                "container runtime status check may not have completed yet",
                "container runtime not ready: <nil>"
            ]
        );
    }
}
