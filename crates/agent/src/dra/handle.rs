//! What callers hold: a cheap handle to the DRA manager's task. Prepare and
//! unprepare run in the caller's task over the instance's connection; the
//! manager's task only says which instance to use.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::calls;
use super::calls::Operation;
use super::checkpoint::{ClaimPods, PreparedClaims, RecordedClaim};
use super::claim::{ClaimPod, ClaimRef, ClaimResult, PreparedClaim, UnpreparedClaim};
use super::command::{Command, Route, Shared};
use super::config::DraManagerConfig;
use super::connection::Channel;
use super::error::DraError;
use super::metrics::DraMetrics;
use super::service::{DraService, choose_health_service, choose_service};
use super::snapshot::DraSnapshot;
use super::status::DraDriverStatus;
use crate::checkpoint::{CheckpointProblem, WrittenReply};
use crate::event::AgentEvent;
use crate::owner::{self, Mailbox};

/// The DRA manager has stopped.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the DRA manager is not running")]
pub struct DraManagerStopped;

/// Registers driver instances, prepares and unprepares claims, and reads the
/// DRA manager's state. Cheap to clone; valid while the manager runs.
#[derive(Clone)]
pub struct DraHandle {
    pub(crate) commands: Mailbox<Command>,
    pub(crate) shared: Arc<Shared>,
}

impl DraHandle {
    /// The settings.
    pub fn config(&self) -> &DraManagerConfig {
        &self.shared.config
    }

    /// The manager's metrics.
    pub fn metrics(&self) -> &DraMetrics {
        &self.shared.metrics
    }

    /// A counter that increases on every change, for waiting on state.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changes.clone()
    }

    /// Follows DRA events.
    pub fn events(&self) -> broadcast::Receiver<AgentEvent> {
        self.shared.events.subscribe()
    }

    /// Registers an instance of `driver` serving at `endpoint`, using the
    /// first of `services` the agent supports. It starts a monitored
    /// connection and returns at once, as the kubelet does: the connection
    /// is made beside the plugin's registration (a plugin that is not up yet
    /// is registered all the same, and connected when it is), and a call
    /// made before it is up waits for it.
    pub async fn register(
        &self,
        driver: &str,
        endpoint: &str,
        services: &[String],
    ) -> Result<(), DraError> {
        self.add_instance(driver, endpoint, services, true).await
    }

    /// [`register`](Self::register), except that the instance makes its
    /// first connection only when [`connect`](Self::connect) (or a call)
    /// asks: the plugin manager registers, tells the plugin, and only then
    /// connects, so the plugin hears back without waiting behind it.
    pub(crate) async fn register_unconnected(
        &self,
        driver: &str,
        endpoint: &str,
        services: &[String],
    ) -> Result<(), DraError> {
        self.add_instance(driver, endpoint, services, false).await
    }

    /// Starts connecting the instance of `driver` at `endpoint` if it was
    /// registered unconnected; otherwise nothing.
    pub(crate) fn connect(&self, driver: &str, endpoint: &str) {
        // A stopped manager has no instance to connect.
        let _ = self.commands.send(Command::Connect {
            driver: driver.to_string(),
            endpoint: endpoint.to_string(),
        });
    }

    async fn add_instance(
        &self,
        driver: &str,
        endpoint: &str,
        services: &[String],
        connect_now: bool,
    ) -> Result<(), DraError> {
        if driver.is_empty() {
            return Err(DraError::EmptyName);
        }
        let service = choose_service(services)?;
        let health_service = choose_health_service(services);
        if !endpoint.starts_with('/') {
            return Err(DraError::BadEndpoint {
                driver: driver.into(),
                endpoint: endpoint.into(),
            });
        }
        let (driver, endpoint) = (driver.to_string(), endpoint.to_string());
        self.commands
            .ask(|reply| Command::Register {
                driver,
                endpoint,
                service,
                health_service,
                connect_now,
                reply,
            })
            .await
            .unwrap_or(Err(DraError::Stopping))
    }

    /// Removes the instance of `driver` at `endpoint`; unknown ones are
    /// ignored. Calls still running on it may finish; calls made after this
    /// returns go elsewhere.
    pub async fn deregister(&self, driver: &str, endpoint: &str) {
        let (driver, endpoint) = (driver.to_string(), endpoint.to_string());
        let _ = self
            .commands
            .ask(|reply| Command::Deregister {
                driver,
                endpoint,
                reply,
            })
            .await;
    }

    /// The instance calls for `driver` go to: its endpoint, service and channel.
    pub(super) fn pick(&self, driver: &str) -> Result<Route, DraError> {
        if driver.is_empty() {
            return Err(DraError::EmptyName);
        }
        if self.commands.is_closed() {
            return Err(DraError::Stopping);
        }
        self.shared
            .routes
            .borrow()
            .get(driver)
            .cloned()
            .ok_or_else(|| DraError::NotRegistered(driver.into()))
    }

    /// Prepares `claims` with `driver`'s instance in use, and records what
    /// each got. A claim this driver prepared before (and nobody unprepared
    /// since) gets its recorded result without a call. A failed call is an
    /// error; otherwise each claim has its own result, in request order.
    pub async fn prepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<PreparedClaim>, DraError> {
        self.prepare_with_pods(driver, claims, &ClaimPods::new())
            .await
    }

    /// [`prepare`](Self::prepare) for `pod`, which is recorded as using the
    /// claims (all in its namespace) from the containers it names, for the
    /// pod-resources API.
    pub async fn prepare_for_pod(
        &self,
        driver: &str,
        claims: &[ClaimRef],
        pod: &ClaimPod,
    ) -> Result<Vec<PreparedClaim>, DraError> {
        let pods = claims
            .iter()
            .map(|c| (c.uid.clone(), pod.clone()))
            .collect();
        self.prepare_with_pods(driver, claims, &pods).await
    }

    /// [`prepare`](Self::prepare), each claim recorded as used by its pod
    /// in `pods` (claim UID → pod), if it has one there.
    pub(crate) async fn prepare_with_pods(
        &self,
        driver: &str,
        claims: &[ClaimRef],
        pods: &ClaimPods,
    ) -> Result<Vec<PreparedClaim>, DraError> {
        // Not before the checkpoint is read: a recorded claim is answered
        // from its record, never prepared twice.
        let recorded = self.loaded_claims().await.map_err(|_| DraError::Stopping)?;
        // As the device manager refuses a pod UID under a second name:
        // the pod-resources API would otherwise answer with either.
        for claim in claims {
            if let Some(pod) = pods.get(&claim.uid)
                && let Some(conflict) = recorded.pod_name_conflict(pod, &claim.namespace)
            {
                return Err(DraError::PodRenamed {
                    pod: pod.uid.clone(),
                    known: conflict.known,
                    given: conflict.given,
                });
            }
        }
        let known: Vec<Option<PreparedClaim>> = claims
            .iter()
            .map(|c| recorded.get(driver, &c.uid).map(RecordedClaim::result))
            .collect();
        let to_call: Vec<ClaimRef> = claims
            .iter()
            .zip(&known)
            .filter(|(_, known)| known.is_none())
            .map(|(claim, _)| claim.clone())
            .collect();
        let pods_known = recorded.knows_pods(driver, pods);
        // Not held while the manager records the result: it changes its
        // copy in place unless a reader still holds it.
        drop(recorded);
        if to_call.is_empty() && !claims.is_empty() && pods_known {
            return Ok(known.into_iter().flatten().collect());
        }
        let called = if to_call.is_empty() && !claims.is_empty() {
            Vec::new()
        } else {
            self.call(driver, &to_call, Operation::Prepare, calls::prepare)
                .await?
        };
        let mut called = called.into_iter();
        let results: Vec<PreparedClaim> = known
            .into_iter()
            .filter_map(|known| known.or_else(|| called.next()))
            .collect();
        self.record(|reply| Command::Prepared {
            driver: driver.to_string(),
            results: results.clone(),
            pods: pods.clone(),
            reply,
        })
        .await;
        Ok(results)
    }

    /// Unprepares `claims` with `driver`'s instance in use, and forgets what
    /// `driver` prepared of the claims it unprepared (other drivers' records
    /// of the same claims stay).
    pub async fn unprepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<UnpreparedClaim>, DraError> {
        let results = self
            .call(driver, claims, Operation::Unprepare, calls::unprepare)
            .await?;
        let uids = results
            .iter()
            .filter(|r| r.error.is_none())
            .map(|r| r.claim.uid.clone())
            .collect();
        self.record(|reply| Command::Unprepared {
            driver: driver.to_string(),
            uids,
            reply,
        })
        .await;
        Ok(results)
    }

    /// Unprepares each of `claims` with every driver that prepared it, as
    /// recorded. A claim with no record gets an error; so does a claim that
    /// any of its drivers failed to unprepare (per claim or as a whole call),
    /// naming each such driver. What the others unprepared is forgotten.
    pub async fn unprepare_recorded(&self, claims: &[ClaimRef]) -> Vec<UnpreparedClaim> {
        let recorded = self.shared.prepared.borrow().clone();
        let mut by_driver: BTreeMap<String, Vec<ClaimRef>> = BTreeMap::new();
        // Claim UID → why each driver that failed it did, in driver order.
        let mut failures: HashMap<String, Vec<String>> = HashMap::new();
        let mut unknown: HashSet<&str> = HashSet::new();
        for claim in claims {
            let mut drivers = recorded.drivers_of(&claim.uid).peekable();
            if drivers.peek().is_none() {
                unknown.insert(&claim.uid);
            }
            for record in drivers {
                by_driver
                    .entry(record.driver.clone())
                    .or_default()
                    .push(claim.clone());
            }
        }
        drop(recorded);
        for (driver, group) in by_driver {
            match self.unprepare(&driver, &group).await {
                Ok(done) => {
                    for result in done {
                        if let Some(error) = result.error {
                            let failed = failures.entry(result.claim.uid).or_default();
                            failed.push(format!("DRA driver {driver}: {error}"));
                        }
                    }
                }
                Err(e) => {
                    let error = match e {
                        // These name the driver already.
                        DraError::Call { .. } | DraError::NotRegistered(_) => e.to_string(),
                        e => format!("DRA driver {driver}: {e}"),
                    };
                    for claim in group {
                        failures.entry(claim.uid).or_default().push(error.clone());
                    }
                }
            }
        }
        claims
            .iter()
            .map(|claim| {
                let error = if unknown.contains(claim.uid.as_str()) {
                    Some("the claim is not prepared on this node; name its driver to unprepare it anyway".into())
                } else {
                    failures.get(&claim.uid).map(|failed| failed.join("; "))
                };
                UnpreparedClaim {
                    claim: claim.clone(),
                    error,
                }
            })
            .collect()
    }

    /// The prepared claims, one record per claim and driver that prepared
    /// it, sorted by claim UID, then driver.
    pub fn prepared_claims(&self) -> Vec<RecordedClaim> {
        self.shared.prepared.borrow().list()
    }

    /// The prepared claims once the checkpoint was read; each change is a
    /// new `Arc`.
    pub(crate) async fn loaded_claims(&self) -> Result<Arc<PreparedClaims>, DraManagerStopped> {
        let mut prepared = self.shared.prepared.clone();
        let claims = prepared
            .wait_for(|c| c.is_loaded())
            .await
            .map_err(|_| DraManagerStopped)?;
        Ok(claims.clone())
    }

    /// The prepared claims as published, loaded or not; ticks on every
    /// change.
    pub(crate) fn claims(&self) -> watch::Receiver<Arc<PreparedClaims>> {
        self.shared.prepared.clone()
    }

    /// What is wrong with the prepared claims' checkpoint, if anything.
    pub async fn checkpoint_problem(&self) -> Result<Option<CheckpointProblem>, DraManagerStopped> {
        Ok(self.running_snapshot().await?.checkpoint_problem().cloned())
    }

    /// The drivers after the latest change (empty, and not
    /// [`running`](DraSnapshot::running), before the manager runs).
    pub fn snapshot(&self) -> Arc<DraSnapshot> {
        self.shared.snapshot.borrow().clone()
    }

    /// The drivers after the latest change, once the manager runs.
    pub async fn running_snapshot(&self) -> Result<Arc<DraSnapshot>, DraManagerStopped> {
        let mut snapshot = self.shared.snapshot.clone();
        let running = snapshot
            .wait_for(|s| s.running())
            .await
            .map_err(|_| DraManagerStopped)?;
        Ok(running.clone())
    }

    /// Tells the task what changed in the prepared claims and waits until it
    /// is on disk; a failed write is logged (the claims are prepared either
    /// way) and shows in [`checkpoint_problem`](Self::checkpoint_problem).
    pub(super) async fn record(&self, command: impl FnOnce(WrittenReply) -> Command) {
        if let Ok(Err(e)) = self.commands.ask(command).await {
            tracing::error!(error = %e, "prepared claims not recorded on disk");
        }
    }

    /// One call to the instance in use, timed in the metrics.
    async fn call<R: ClaimResult, F>(
        &self,
        driver: &str,
        claims: &[ClaimRef],
        operation: Operation,
        call: impl FnOnce(Channel, DraService, Vec<ClaimRef>, Duration) -> F,
    ) -> Result<Vec<R>, DraError>
    where
        F: Future<Output = Result<Vec<R>, tonic::Status>>,
    {
        let Route {
            endpoint,
            service,
            channel,
            ..
        } = self.pick(driver)?;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let result = call(
            channel,
            service,
            claims.to_vec(),
            self.config().call_timeout,
        )
        .await;
        let (code, failed) = match &result {
            Ok(claims) => (tonic::Code::Ok, claims.iter().any(ClaimResult::failed)),
            Err(status) => (status.code(), true),
        };
        let took = started.elapsed();
        self.shared
            .metrics
            .call(operation.metric_name(), driver, service, took, code, failed);
        result.map_err(|status| DraError::Call {
            driver: driver.into(),
            endpoint,
            operation: operation.rpc_name(),
            code: status.code(),
            message: status.message().into(),
        })
    }

    /// The drivers, sorted by name.
    pub async fn status(&self) -> Result<Vec<DraDriverStatus>, DraManagerStopped> {
        Ok(self.running_snapshot().await?.status_at(Instant::now()))
    }

    /// Waits until the drivers satisfy `pred`, re-checking after every
    /// change, and returns them; `None` after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        pred: impl FnMut(&[DraDriverStatus]) -> bool,
    ) -> Result<Option<Vec<DraDriverStatus>>, DraManagerStopped> {
        let read = || self.status();
        owner::wait_for(&self.shared.changes, timeout, DraManagerStopped, read, pred).await
    }
}
