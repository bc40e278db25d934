//! The task that registers the node and keeps its status as the kubelet's
//! node status loop does (`syncNodeStatus`):
//!
//! - until the Node is registered: made with its status (a Create), or,
//!   when it exists, reconciled ([`registration`]); tried again 100 ms
//!   doubling to 7 s. Once registered it is never made again while the
//!   agent runs: a Node deleted under it stays deleted (the kubelet's
//!   behaviour), each status write failing until the agent restarts;
//! - every `status_update_frequency` (10 s, up to 4% later at random) and
//!   at once when the runtime's state changes, the status is computed
//!   ([`kubelet_status`]) and written when the Node does not show it, or
//!   when the report period (5 min) is out; after a write that a change
//!   made (and the first), the next unchanged write is due a report period
//!   shifted by up to half of one either way, so that the nodes of a
//!   cluster restarted together do not write together.
//!
//! [`registration`]: super::registration
//! [`kubelet_status`]: super::kubelet_status

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::timer::sleep_until;
use rand::Rng;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::addresses::{NodeAddress, node_addresses};
use super::kubelet_status::{self, StatusInputs};
use super::machine::MachineInfo;
use super::node_status::FIELD_MANAGER;
use super::registration::{self, NodeRegistration};
use super::runtime_state::RuntimeReport;
use crate::kube_api::client::credentials::Connection;
use crate::kube_api::error::{KubeApiError, request};
use crate::kube_api::observe::observed::NodeSeen;

/// The retries of a registration.
const REGISTER_BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(7));
/// Each status computation up to this fraction of the period later.
const UPDATE_JITTER: f64 = 0.04;

/// The node's registration and status.
pub(in crate::kube_api) struct KubeletNode {
    node_name: String,
    registration: NodeRegistration,
    machine: MachineInfo,
    addresses: Option<Vec<NodeAddress>>,
    runtime: watch::Receiver<RuntimeReport>,
    /// Whether the node is shutting down (never, without its manager).
    shutting_down: watch::Receiver<bool>,
    registered: bool,
    /// When an unchanged status is next written.
    report_due: Option<Instant>,
    /// Whether the last write failed (logged once per streak).
    failing: bool,
}

impl KubeletNode {
    /// Registers node `node_name` as `registration` asks, with the
    /// runtime as `runtime` reports it.
    pub(in crate::kube_api) fn new(
        node_name: String,
        registration: NodeRegistration,
        runtime: watch::Receiver<RuntimeReport>,
        shutting_down: Option<watch::Receiver<bool>>,
    ) -> Self {
        let machine = MachineInfo::read(&registration.root_dir);
        let addresses = node_addresses(&node_name, &registration.node_ips);
        if addresses.is_none() {
            tracing::warn!(node = %node_name, "can't get ip address of node: the Node is written without addresses");
        }
        Self {
            node_name,
            registration,
            machine,
            addresses,
            runtime,
            // A sender dropped at once: the receiver stays false.
            shutting_down: shutting_down.unwrap_or_else(|| watch::channel(false).1),
            registered: false,
            report_due: None,
            failing: false,
        }
    }

    /// Registers, then keeps the status, through the current client until
    /// `stop`; `seen` is the Node as the agent's watch shows it.
    pub(in crate::kube_api) async fn run(
        mut self,
        connection: watch::Receiver<Connection>,
        mut seen: watch::Receiver<NodeSeen>,
        stop: CancellationToken,
    ) {
        let mut failures = 0u32;
        while !self.registered {
            let client = connection.borrow().client.clone();
            let attempt = tokio::select! {
                () = stop.cancelled() => return,
                attempt = self.register(&client) => attempt,
            };
            match attempt {
                Ok(()) => self.registered = true,
                Err(error) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(node = %self.node_name, %error, "unable to register the node with the API server");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = sleep_until(Some(Instant::now() + REGISTER_BACKOFF.delay(failures))) => {}
                    }
                }
            }
        }
        tracing::info!(node = %self.node_name, "node registered");
        let period = self.registration.status_update_frequency;
        let mut runtime = self.runtime.clone();
        let mut shutting_down = self.shutting_down.clone();
        let mut shutdown_followed = true;
        loop {
            let client = connection.borrow().client.clone();
            let node = match &*seen.borrow_and_update() {
                NodeSeen::Now(node) => node.clone(),
                NodeSeen::NotYet => None,
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.sync(&client, node.as_deref()) => {}
            }
            let jitter = period.mul_f64(rand::rng().random_range(0.0..UPDATE_JITTER));
            tokio::select! {
                () = stop.cancelled() => return,
                Ok(()) = runtime.changed() => {}
                // The node's shutdown is written at once, as the kubelet's
                // shutdown manager syncs the status.
                changed = shutting_down.changed(), if shutdown_followed => {
                    shutdown_followed = changed.is_ok();
                }
                () = sleep_until(Some(Instant::now() + period + jitter)) => {}
            }
        }
    }

    /// The status as it should be now, over `seen`.
    fn desired(&self, seen: Option<&Node>) -> Value {
        let stamp = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let runtime = self.runtime.borrow().clone();
        let inputs = StatusInputs {
            machine: &self.machine,
            addresses: self.addresses.as_deref(),
            runtime: &runtime,
            max_pods: self.registration.max_pods,
            kubelet_port: self.registration.kubelet_port,
            now: Instant::now(),
            now_rfc3339: &stamp,
            shutting_down: *self.shutting_down.borrow(),
        };
        kubelet_status::desired(&inputs, seen)
    }

    /// Makes the Node, or reconciles it when it exists.
    async fn register(&self, client: &kube::Client) -> Result<(), KubeApiError> {
        let nodes: Api<Node> = Api::all(client.clone());
        let name = &self.node_name;
        let status = self.desired(None);
        let node = registration::initial_node(name, &self.registration, &status);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let created = request(
            || format!("create node {name}"),
            nodes.create(
                &params,
                &serde_json::from_value(node).map_err(|e| {
                    KubeApiError::from_request(
                        format!("create node {name}"),
                        kube::Error::SerdeError(e),
                    )
                })?,
            ),
        )
        .await;
        match created {
            Ok(_) => Ok(()),
            Err(e) if e.is_conflict() => {
                let existing = request(|| format!("get node {name}"), nodes.get(name)).await?;
                let Some(patch) = registration::reconcile(name, &existing) else {
                    return Ok(());
                };
                request(
                    || format!("patch node {name} status"),
                    nodes.patch_status(name, &patch_params(), &Patch::Strategic(&patch)),
                )
                .await
                .map(drop)
            }
            Err(e) => Err(e),
        }
    }

    /// One status sync over `seen`: written when the Node does not show it
    /// or the report period is out.
    async fn sync(&mut self, client: &kube::Client, seen: Option<&Node>) {
        let desired = self.desired(seen);
        let now = Instant::now();
        let unshown = kubelet_status::unshown(seen, &desired);
        if let Some(field) = &unshown {
            tracing::debug!(node = %self.node_name, %field, "the Node does not show the status");
        }
        let shown = unshown.is_none();
        if shown && self.report_due.is_some_and(|due| now < due) {
            return;
        }
        let nodes: Api<Node> = Api::all(client.clone());
        let name = &self.node_name;
        let patch = kubelet_status::patch(seen, &desired);
        let written = request(
            || format!("patch node {name} status"),
            nodes.patch_status(name, &patch_params(), &Patch::Strategic(&patch)),
        )
        .await;
        match written {
            Ok(_) => {
                if self.failing {
                    tracing::info!(node = %name, "node status written again");
                }
                self.failing = false;
                let report = self.registration.status_report_frequency;
                self.report_due = Some(if shown && self.report_due.is_some() {
                    now + report
                } else {
                    // A change (or the first write): shifted by up to half
                    // a period either way.
                    now + report.mul_f64(rand::rng().random_range(0.5..1.5))
                });
            }
            Err(error) => {
                if !self.failing {
                    tracing::warn!(node = %name, %error, "error updating node status, will retry");
                }
                self.failing = true;
            }
        }
    }
}

/// The agent's status patches.
fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}
