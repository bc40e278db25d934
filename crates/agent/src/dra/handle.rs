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
use super::claim::{ClaimPod, ClaimRef, ClaimResult, PreparedClaim, UnpreparedClaim};
use super::command::{Command, Route, Shared, WriteDone};
use super::config::DraManagerConfig;
use super::connection::Channel;
use super::error::{DraError, RecordError};
use super::metrics::DraMetrics;
use super::pod::{PodClaim, PodClaimResult, PodClaimUnprepared};
use super::records::{ClaimToPrepare, PreparedClaims, RecordedClaim};
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

    /// Prepares `claims` with `driver`'s instance in use. Each claim is
    /// recorded before the driver is called, so that one the driver fails
    /// (or a call cut short) can still be unprepared; one it prepared
    /// before (and nobody unprepared since) gets its recorded result
    /// without a call. A failed call is an error; otherwise each claim has
    /// its own result, in request order.
    pub async fn prepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<PreparedClaim>, DraError> {
        self.prepare_with(driver, claims, None).await
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
        self.prepare_with(driver, claims, Some(pod)).await
    }

    async fn prepare_with(
        &self,
        driver: &str,
        claims: &[ClaimRef],
        pod: Option<&ClaimPod>,
    ) -> Result<Vec<PreparedClaim>, DraError> {
        self.pick(driver)?;
        let requests = claims
            .iter()
            .map(|claim| ClaimToPrepare {
                claim: claim.clone(),
                drivers: vec![driver.to_string()],
                user: pod.cloned(),
            })
            .collect();
        let done = self.run_prepare(requests).await?;
        let mut results: HashMap<String, PreparedClaim> = done
            .recorded
            .into_iter()
            .map(|(_, result)| (result.claim.uid.clone(), result))
            .collect();
        for (_, _, outcome) in done.called {
            for result in outcome? {
                results.insert(result.claim.uid.clone(), result);
            }
        }
        Ok(claims
            .iter()
            .filter_map(|claim| results.remove(&claim.uid))
            .collect())
    }

    /// Prepares a pod's claims, each with every driver of its allocation,
    /// as the kubelet's DRA manager does: refuses (before anything is
    /// recorded or any driver called) a claim replaced by another of the
    /// same name while the old one is still prepared here, a claim being
    /// unprepared, a pod recorded under another name and a driver that is
    /// not registered; then records the pod as using each claim and calls
    /// each driver once with all its claims that are not prepared yet. A
    /// driver's failed call fails each of its claims. One result per claim
    /// and driver, in claim order, then driver.
    pub async fn prepare_pod(&self, claims: &[PodClaim]) -> Result<Vec<PodClaimResult>, DraError> {
        let requests = claims
            .iter()
            .map(|c| ClaimToPrepare {
                claim: c.claim.clone(),
                drivers: c.drivers.clone(),
                user: Some(c.user.clone()),
            })
            .collect();
        let done = self.run_prepare(requests).await?;
        // (claim UID, driver) → result.
        let mut results: BTreeMap<(String, String), PreparedClaim> = done
            .recorded
            .into_iter()
            .map(|(driver, result)| ((result.claim.uid.clone(), driver), result))
            .collect();
        for (driver, called, outcome) in done.called {
            match outcome {
                Ok(done) => {
                    for result in done {
                        results.insert((result.claim.uid.clone(), driver.clone()), result);
                    }
                }
                Err(e) => {
                    for claim in called {
                        let failed = PreparedClaim {
                            devices: Vec::new(),
                            error: Some(e.to_string()),
                            claim,
                        };
                        results.insert((failed.claim.uid.clone(), driver.clone()), failed);
                    }
                }
            }
        }
        Ok(claims
            .iter()
            .flat_map(|claim| claim.drivers.iter().map(move |d| (claim, d)))
            .filter_map(|(claim, driver)| {
                let result = results.remove(&(claim.claim.uid.clone(), driver.clone()))?;
                Some(PodClaimResult {
                    driver: driver.clone(),
                    result,
                })
            })
            .collect())
    }

    /// A prepare's three steps: the owner checks and records the claims
    /// (the caller waits until that is on disk), the drivers are called,
    /// each at once, and the owner records what they prepared.
    async fn run_prepare(&self, claims: Vec<ClaimToPrepare>) -> Result<PrepareDone, DraError> {
        let (plan, written) = self
            .commands
            .ask(|reply| Command::BeginPrepare { claims, reply })
            .await
            .map_err(|_| DraError::Stopping)??;
        on_disk(written).await?;
        let calls = plan.calls.into_iter().map(|(driver, claims)| async move {
            let outcome = self
                .call(&driver, &claims, Operation::Prepare, calls::prepare)
                .await;
            (driver, claims, outcome)
        });
        let called = futures::future::join_all(calls).await;
        let results = called
            .iter()
            .filter_map(|(driver, _, outcome)| {
                Some((driver.clone(), outcome.as_ref().ok()?.clone()))
            })
            .collect();
        self.finish(|reply| Command::FinishPrepare { results, reply })
            .await;
        Ok(PrepareDone {
            recorded: plan.recorded,
            called,
        })
    }

    /// Unprepares what pod `pod_uid` uses, as recorded. A claim no other pod
    /// uses is unprepared by every driver that recorded it (prepared, or
    /// pending after a prepare that failed); one that others still use only
    /// forgets this pod. A claim a driver failed to unprepare stays recorded
    /// for the pod (with its error here), so that unpreparing the pod again
    /// tries again. No pod may start using a claim while it is unprepared.
    pub async fn unprepare_pod(&self, pod_uid: &str) -> Result<Vec<PodClaimUnprepared>, DraError> {
        let pod_uid = pod_uid.to_string();
        let (plan, written) = self
            .commands
            .ask(|reply| Command::BeginUnprepare { pod_uid, reply })
            .await
            .map_err(|_| DraError::Stopping)?;
        if let Err(e) = on_disk(written).await {
            // Only the pod's place among a shared claim's users changed.
            tracing::error!(error = %e, "prepared claims not recorded on disk");
        }
        // Claim UID → (claim, drivers).
        let mut claims: BTreeMap<String, (ClaimRef, Vec<String>)> = BTreeMap::new();
        for (driver, called) in &plan.calls {
            for claim in called {
                let entry = claims
                    .entry(claim.uid.clone())
                    .or_insert_with(|| (claim.clone(), Vec::new()));
                entry.1.push(driver.clone());
            }
        }
        let calls = plan.calls.iter().map(|(driver, claims)| async move {
            let outcome = self
                .call(driver, claims, Operation::Unprepare, calls::unprepare)
                .await;
            (driver, claims, outcome)
        });
        let called = futures::future::join_all(calls).await;
        // Claim UID → why each driver that failed it did.
        let mut failures: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut unprepared = Vec::new();
        for (driver, claims, outcome) in called {
            match outcome {
                Ok(results) => {
                    let mut done = Vec::new();
                    for result in results {
                        match result.error {
                            None => done.push(result.claim.uid),
                            Some(error) => failures
                                .entry(result.claim.uid)
                                .or_default()
                                .push(format!("DRA driver {driver}: {error}")),
                        }
                    }
                    unprepared.push((driver.clone(), done));
                }
                Err(e) => {
                    for claim in claims {
                        let failed = failures.entry(claim.uid.clone()).or_default();
                        failed.push(e.to_string());
                    }
                }
            }
        }
        let ended = claims.keys().cloned().collect();
        self.finish(|reply| Command::FinishUnprepare {
            unprepared,
            ended,
            reply,
        })
        .await;
        let shared = plan
            .shared
            .into_iter()
            .map(|(claim, drivers)| PodClaimUnprepared {
                claim,
                drivers,
                unprepared: false,
                error: None,
            });
        let mut done: Vec<PodClaimUnprepared> = claims
            .into_iter()
            .map(|(uid, (claim, drivers))| PodClaimUnprepared {
                claim,
                drivers,
                unprepared: true,
                error: failures.get(&uid).map(|f| f.join("; ")),
            })
            .chain(shared)
            .collect();
        done.sort_by(|a, b| a.claim.uid.cmp(&b.claim.uid));
        Ok(done)
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
        self.finish(|reply| Command::FinishUnprepare {
            unprepared: vec![(driver.to_string(), uids)],
            ended: Vec::new(),
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

    /// Tells the task what the drivers did and waits until it is on disk; a
    /// failed write is logged (the drivers did it either way) and shows in
    /// [`checkpoint_problem`](Self::checkpoint_problem).
    async fn finish(&self, command: impl FnOnce(WrittenReply) -> Command) {
        if let Ok(Err(e)) = self.commands.ask(command).await {
            tracing::error!(error = %e, "prepared claims not recorded on disk");
        }
    }

    /// The UIDs of the pods named `namespace/name` that the prepared claims
    /// record (more than one when a pod was made again under its name).
    pub async fn recorded_pod_uids(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<String>, DraManagerStopped> {
        let claims = self.loaded_claims().await?;
        Ok(claims
            .pod_uids_named(namespace, name)
            .into_iter()
            .map(str::to_string)
            .collect())
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

/// What a prepare found recorded and what its calls came to.
struct PrepareDone {
    /// (driver, result) of claims prepared before.
    recorded: Vec<(String, PreparedClaim)>,
    /// Each driver called.
    called: Vec<DriverCall>,
}

/// One driver called by a prepare: the driver, its claims, and the call's
/// outcome.
type DriverCall = (String, Vec<ClaimRef>, Result<Vec<PreparedClaim>, DraError>);

/// Waits for the write a change needs before the drivers are called.
async fn on_disk(written: Option<WriteDone>) -> Result<(), DraError> {
    match written {
        None => Ok(()),
        Some(written) => match written.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(DraError::Record(RecordError(e))),
            Err(_) => Err(DraError::Stopping),
        },
    }
}
