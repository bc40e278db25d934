//! What callers hold: a cheap handle to the DRA manager's task. Prepare and
//! unprepare run in the caller's task over the instance's connection
//! ([`ClaimCalls`]), deciding and recording in the claim book; the
//! manager's task registers and follows the drivers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::claim::{ClaimPod, ClaimRef, PreparedClaim, UnpreparedClaim};
use super::command::{Command, Shared};
use super::config::DraManagerConfig;
use super::error::DraError;
use super::metrics::DraMetrics;
use super::snapshot::DraSnapshot;
use super::status::DraDriverStatus;
use crate::checkpoint::CheckpointProblem;
use crate::common::owner::Mailbox;
use crate::dra::prepare::claim_calls::ClaimCalls;
use crate::dra::prepare::pod::{PodClaim, PodClaimResult, PodClaimUnprepared};
use crate::dra::prepare::records::{PreparedClaims, RecordedClaim};
use crate::event::AgentEvent;
use crate::published::Store;
use nodeplugins_api::dra_client::{
    DraService, HealthService, choose_health_service, choose_service,
};

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

    /// The steps of prepares and unprepares, in the caller's task.
    fn calls(&self) -> ClaimCalls<'_> {
        ClaimCalls::new(&self.commands, &self.shared)
    }

    /// The manager's metrics.
    pub fn metrics(&self) -> &DraMetrics {
        &self.shared.metrics
    }

    /// A counter that increases on every change, for waiting on state.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.store.changes()
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

    /// What a registration of `driver` at `endpoint`, offering `services`,
    /// is checked for before anything changes (the one check, whether the
    /// driver comes through `plugins_registry` or is registered by hand): a
    /// name, an absolute endpoint, and a DRA service this side speaks.
    /// Returns the service calls go to and the health service, if offered.
    pub(crate) fn check_registration(
        driver: &str,
        endpoint: &str,
        services: &[String],
    ) -> Result<(DraService, Option<HealthService>), DraError> {
        if driver.is_empty() {
            return Err(DraError::EmptyName);
        }
        let service = choose_service(services)?;
        if !endpoint.starts_with('/') {
            return Err(DraError::BadEndpoint {
                driver: driver.into(),
                endpoint: endpoint.into(),
            });
        }
        Ok((service, choose_health_service(services)))
    }

    async fn add_instance(
        &self,
        driver: &str,
        endpoint: &str,
        services: &[String],
        connect_now: bool,
    ) -> Result<(), DraError> {
        let (service, health_service) = Self::check_registration(driver, endpoint, services)?;
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
        self.calls().prepare_with(driver, claims, None).await
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
        self.calls().prepare_with(driver, claims, Some(pod)).await
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
    #[tracing::instrument(name = "claims", skip_all, fields(call = "prepare", claims = claims.len()))]
    pub async fn prepare_pod(&self, claims: &[PodClaim]) -> Result<Vec<PodClaimResult>, DraError> {
        self.calls().prepare_pod(claims).await
    }

    /// After the node rebooted: the claims pod `pod_uid` uses (every
    /// claim, with `None`) are prepared again, drivers called, by the next
    /// prepare for them (they stay recorded, to be unprepared when their
    /// pods go). Returns once that is on disk.
    pub async fn prepare_again(&self, pod_uid: Option<&str>) -> Result<(), DraManagerStopped> {
        self.calls()
            .prepare_again(pod_uid)
            .await
            .map_err(|_| DraManagerStopped)
    }

    /// Unprepares what pod `pod_uid` uses, as recorded. A claim no other pod
    /// uses is unprepared by every driver that recorded it (prepared, or
    /// pending after a prepare that failed); one that others still use only
    /// forgets this pod. A claim a driver failed to unprepare stays recorded
    /// for the pod (with its error here), so that unpreparing the pod again
    /// tries again. No pod may start using a claim while it is unprepared.
    #[tracing::instrument(name = "claims", skip_all, fields(call = "unprepare"))]
    pub async fn unprepare_pod(&self, pod_uid: &str) -> Result<Vec<PodClaimUnprepared>, DraError> {
        self.calls().unprepare_pod(pod_uid).await
    }

    /// Unprepares `claims` with `driver`'s instance in use, and forgets what
    /// `driver` prepared of the claims it unprepared (other drivers' records
    /// of the same claims stay).
    pub async fn unprepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<UnpreparedClaim>, DraError> {
        self.calls().unprepare(driver, claims).await
    }

    /// Unprepares each of `claims` with every driver that prepared it, as
    /// recorded. A claim with no record gets an error; so does a claim that
    /// any of its drivers failed to unprepare (per claim or as a whole call),
    /// naming each such driver. What the others unprepared is forgotten.
    pub async fn unprepare_recorded(&self, claims: &[ClaimRef]) -> Vec<UnpreparedClaim> {
        self.calls().unprepare_recorded(claims).await
    }

    /// The prepared claims, one record per claim and driver that prepared
    /// it, sorted by claim UID, then driver.
    pub fn prepared_claims(&self) -> Vec<RecordedClaim> {
        self.shared.prepared.get().list()
    }

    /// The prepared claims once the checkpoint was read; each change is a
    /// new `Arc`.
    pub(crate) async fn loaded_claims(&self) -> Result<Arc<PreparedClaims>, DraManagerStopped> {
        self.shared
            .prepared
            .wait_until_ready()
            .await
            .map_err(|_| DraManagerStopped)
    }

    #[cfg(feature = "kube")]
    /// The drivers calls can go to now (an instance of each connected or
    /// being connected); ticks when one comes or goes.
    pub(crate) fn registered(&self) -> watch::Receiver<Arc<super::command::Routes>> {
        self.shared.routes.subscribe()
    }

    /// The prepared claims as published, loaded or not; ticks on every
    /// change.
    pub(crate) fn claims(&self) -> watch::Receiver<Arc<PreparedClaims>> {
        self.shared.prepared.subscribe()
    }

    /// What is wrong with the prepared claims' checkpoint, if anything.
    pub async fn checkpoint_problem(&self) -> Result<Option<CheckpointProblem>, DraManagerStopped> {
        Ok(self.running_snapshot().await?.checkpoint_problem().cloned())
    }

    /// The drivers after the latest change (empty, and not
    /// [`running`](DraSnapshot::running), before the manager runs).
    pub fn snapshot(&self) -> Arc<DraSnapshot> {
        self.shared.store.get()
    }

    /// The drivers' published snapshots, for following them.
    pub fn store(&self) -> Store<DraSnapshot> {
        self.shared.store.clone()
    }

    /// The drivers after the latest change, once the manager runs.
    pub async fn running_snapshot(&self) -> Result<Arc<DraSnapshot>, DraManagerStopped> {
        self.shared
            .store
            .wait_until_ready()
            .await
            .map_err(|_| DraManagerStopped)
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

    /// The drivers, sorted by name.
    pub async fn status(&self) -> Result<Vec<DraDriverStatus>, DraManagerStopped> {
        Ok(self.running_snapshot().await?.status_at(Instant::now()))
    }

    /// Waits until the drivers satisfy `pred`, re-checking after every
    /// change, and returns them; `None` after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&[DraDriverStatus]) -> bool,
    ) -> Result<Option<Vec<DraDriverStatus>>, DraManagerStopped> {
        self.shared
            .store
            .wait_for(timeout, |s| s.status_at(Instant::now()), |d| pred(d))
            .await
            .map_err(|_| DraManagerStopped)
    }
}
