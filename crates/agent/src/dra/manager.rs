//! The DRA manager: per driver, its instances in registration order (one per
//! service endpoint), the connection each keeps to its plugin, and the
//! cleanup scheduled while none of them is connected.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use nodeplugins_api::dra_health::v1 as health_v1;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::calls::{self, CALL_TIMEOUT};
use super::cleanup::{
    CLEANUP_CALL_TIMEOUT, CLEANUP_GRACE, CLEANUP_RETRY_INITIAL, CLEANUP_RETRY_MAX, DriverCleanup,
};
use super::connection::{Connection, MonitorConfig, RECONNECT_INITIAL, RECONNECT_MAX};
use super::health::{self, DEFAULT_HEALTH_TIMEOUT, HealthReports};
use super::service::{DraService, HealthService, choose_health_service, choose_service};
use super::status::{
    ClaimRef, DraDriverStatus, DraEvent, DraEventKind, DraInstanceStatus, PendingCleanup,
    PreparedClaim, UnpreparedClaim,
};
use crate::metrics::{DEFAULT_BUCKETS, HistogramVec};
use crate::registry::backoff::delay_after;
use crate::registry::status::unix_ms;

/// Dialing a DRA plugin's service socket, one attempt.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of the DRA manager.
#[derive(Debug, Clone)]
pub struct DraManagerConfig {
    /// See [`CLEANUP_GRACE`].
    pub cleanup_grace: Duration,
    /// Deadline of prepare and unprepare calls; see [`CALL_TIMEOUT`].
    pub call_timeout: Duration,
    /// See [`DIAL_TIMEOUT`].
    pub dial_timeout: Duration,
    /// How long a device health report counts when the driver sets no
    /// timeout; see [`DEFAULT_HEALTH_TIMEOUT`].
    pub health_timeout: Duration,
    /// The first wait after a failed connection attempt; see [`RECONNECT_INITIAL`].
    pub reconnect_initial: Duration,
    /// The longest wait between connection attempts; see [`RECONNECT_MAX`].
    pub reconnect_max: Duration,
}

impl Default for DraManagerConfig {
    fn default() -> Self {
        Self {
            cleanup_grace: CLEANUP_GRACE,
            call_timeout: CALL_TIMEOUT,
            dial_timeout: DIAL_TIMEOUT,
            health_timeout: DEFAULT_HEALTH_TIMEOUT,
            reconnect_initial: RECONNECT_INITIAL,
            reconnect_max: RECONNECT_MAX,
        }
    }
}

/// Why a DRA operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DraError {
    /// The plugin lists no usable service.
    #[error("{0}")]
    Service(String),
    /// The endpoint is not an absolute path.
    #[error("DRA driver {driver}: endpoint {endpoint:?} is not an absolute socket path")]
    BadEndpoint {
        /// The driver.
        driver: String,
        /// The endpoint.
        endpoint: String,
    },
    /// Another instance of the driver already uses this endpoint.
    #[error("endpoint {endpoint} already registered for DRA driver plugin {driver}")]
    AlreadyRegistered {
        /// The driver.
        driver: String,
        /// The endpoint.
        endpoint: String,
    },
    /// No driver name was given.
    #[error("DRA driver name is empty")]
    EmptyName,
    /// No instance of the driver is registered.
    #[error("DRA driver {0} is not registered")]
    NotRegistered(String),
    /// The call failed as a whole; per-claim errors are in the results instead.
    #[error("DRA driver {driver} at {endpoint}: {operation} failed: {code:?}: {message}")]
    Call {
        /// The driver.
        driver: String,
        /// The instance called.
        endpoint: String,
        /// `NodePrepareResources` or `NodeUnprepareResources`.
        operation: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// The manager is shutting down.
    #[error("the DRA manager is stopping")]
    Stopping,
}

struct Instance {
    endpoint: String,
    service: DraService,
    health_service: Option<HealthService>,
    registered_at: SystemTime,
    connection: Connection,
    health: HealthReports,
    /// Stops the health stream.
    cancel: CancellationToken,
}

impl Instance {
    fn connected(&self) -> bool {
        self.connection.state().connected()
    }
}

struct Scheduled {
    /// Identifies this schedule, so a finished cleanup does not clear a newer one.
    seq: u64,
    deadline: Instant,
    deadline_wall: SystemTime,
    cancel: CancellationToken,
    failures: u32,
    last_error: Option<String>,
}

#[derive(Default)]
struct Driver {
    /// Oldest registration first.
    instances: Vec<(u64, Instance)>,
    cleanup: Option<Scheduled>,
    /// Set when the cleanup ran; cleared when an instance connects.
    cleaned_up_at: Option<SystemTime>,
}

impl Driver {
    /// The instance calls go to: the newest connected one, else the newest.
    fn in_use(&self) -> Option<&(u64, Instance)> {
        self.instances
            .iter()
            .rev()
            .find(|(_, i)| i.connected())
            .or(self.instances.last())
    }

    fn is_empty(&self) -> bool {
        self.instances.is_empty() && self.cleanup.is_none()
    }
}

#[derive(Default)]
struct State {
    drivers: BTreeMap<String, Driver>,
    next_id: u64,
}

struct Inner {
    config: DraManagerConfig,
    cleanup: Arc<dyn DriverCleanup>,
    state: Mutex<State>,
    changes: watch::Sender<u64>,
    events: broadcast::Sender<DraEvent>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    /// `dra_operations_duration_seconds`.
    operations: HistogramVec,
    /// `dra_grpc_operations_duration_seconds`.
    grpc_operations: HistogramVec,
}

/// The DRA manager. Cheap to clone.
#[derive(Clone)]
pub struct DraManager {
    inner: Arc<Inner>,
}

impl DraManager {
    /// A manager with no drivers, calling `cleanup` when a driver stays unusable.
    pub fn new(config: DraManagerConfig, cleanup: Arc<dyn DriverCleanup>) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                cleanup,
                state: Mutex::new(State::default()),
                changes: watch::channel(0).0,
                events: broadcast::channel(1024).0,
                tasks: TaskTracker::new(),
                shutdown: CancellationToken::new(),
                operations: HistogramVec::new(
                    "dra_operations_duration_seconds",
                    "Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops.",
                    &["operation_name", "is_error"],
                    DEFAULT_BUCKETS,
                ),
                grpc_operations: HistogramVec::new(
                    "dra_grpc_operations_duration_seconds",
                    "Duration in seconds of the DRA gRPC operations.",
                    &["driver_name", "method_name", "grpc_status_code"],
                    DEFAULT_BUCKETS,
                ),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &DraManagerConfig {
        &self.inner.config
    }

    /// Appends the DRA manager's metrics to `out`.
    pub fn render_metrics(&self, out: &mut String) {
        self.inner.operations.render(out);
        self.inner.grpc_operations.render(out);
    }

    fn record(
        &self,
        operation: &str,
        driver: &str,
        service: DraService,
        started: Instant,
        code: tonic::Code,
        failed: bool,
    ) {
        let elapsed = started.elapsed();
        let package = match service {
            DraService::V1 => "k8s.io.kubelet.pkg.apis.dra.v1",
            DraService::V1beta1 => "k8s.io.kubelet.pkg.apis.dra.v1beta1",
        };
        // The kubelet's operation names are the RPC names without "Node".
        let method = format!("/{package}.DRAPlugin/Node{operation}");
        let code = grpc_code_name(code);
        self.inner
            .grpc_operations
            .observe(&[driver, &method, code], elapsed);
        let is_error = if failed { "true" } else { "false" };
        self.inner
            .operations
            .observe(&[operation, is_error], elapsed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.inner.changes.send_modify(|v| *v += 1);
    }

    fn event(
        &self,
        kind: DraEventKind,
        driver: &str,
        endpoint: Option<&str>,
        detail: Option<String>,
    ) {
        let _ = self.inner.events.send(DraEvent {
            kind,
            driver: driver.into(),
            endpoint: endpoint.map(Into::into),
            detail,
            at_unix_ms: unix_ms(SystemTime::now()),
        });
    }

    /// A counter that increases on every change, for waiting on state.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Follows DRA events.
    pub fn events(&self) -> broadcast::Receiver<DraEvent> {
        self.inner.events.subscribe()
    }

    /// Runs the start-up cleanup ([`DriverCleanup::node_started`]) in the
    /// background, retrying with backoff until it succeeds.
    pub fn start(&self) {
        let manager = self.clone();
        self.inner.tasks.spawn(async move {
            let mut failures = 0;
            loop {
                let result = tokio::time::timeout(
                    CLEANUP_CALL_TIMEOUT,
                    manager.inner.cleanup.node_started(),
                )
                .await;
                let error = match result {
                    Ok(Ok(())) => return,
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("no answer within {CLEANUP_CALL_TIMEOUT:?}"),
                };
                failures += 1;
                let delay = delay_after(failures, CLEANUP_RETRY_INITIAL, CLEANUP_RETRY_MAX);
                tracing::warn!(%error, retry_in = ?delay, "start-up DRA cleanup failed");
                tokio::select! {
                    () = manager.inner.shutdown.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        });
    }

    /// Registers an instance of `driver` serving at `endpoint`, using the
    /// first of `services` the agent supports. It starts a monitored
    /// connection and returns after the first connection attempt (a plugin
    /// that is not up yet is still registered, and connected when it is).
    pub async fn register(
        &self,
        driver: &str,
        endpoint: &str,
        services: &[String],
    ) -> Result<(), DraError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(DraError::Stopping);
        }
        if driver.is_empty() {
            return Err(DraError::EmptyName);
        }
        let service = choose_service(services).map_err(|e| DraError::Service(e.to_string()))?;
        let health_service = choose_health_service(services);
        if !endpoint.starts_with('/') {
            return Err(DraError::BadEndpoint {
                driver: driver.into(),
                endpoint: endpoint.into(),
            });
        }
        let (id, connection, channel, cancel) = {
            let mut state = self.lock();
            let entry = state.drivers.entry(driver.to_string()).or_default();
            if entry.instances.iter().any(|(_, i)| i.endpoint == endpoint) {
                return Err(DraError::AlreadyRegistered {
                    driver: driver.into(),
                    endpoint: endpoint.into(),
                });
            }
            state.next_id += 1;
            let id = state.next_id;
            // Announced before the connection can report anything.
            self.event(
                DraEventKind::InstanceAdded,
                driver,
                Some(endpoint),
                Some(service.to_string()),
            );
            let manager = self.clone();
            let name = driver.to_string();
            let connection = Connection::start(
                PathBuf::from(endpoint),
                MonitorConfig {
                    dial_timeout: self.inner.config.dial_timeout,
                    drain_timeout: self.inner.config.call_timeout,
                    reconnect_initial: self.inner.config.reconnect_initial,
                    reconnect_max: self.inner.config.reconnect_max,
                    on_change: Arc::new(move |connected| {
                        manager.connection_changed(&name, id, connected);
                    }),
                    shutdown: self.inner.shutdown.clone(),
                },
                &self.inner.tasks,
            );
            let watch = connection.watch();
            let channel = connection.channel();
            let cancel = self.inner.shutdown.child_token();
            let instance = Instance {
                endpoint: endpoint.to_string(),
                service,
                health_service,
                registered_at: SystemTime::now(),
                connection,
                health: HealthReports::new(),
                cancel: cancel.clone(),
            };
            if let Some(entry) = state.drivers.get_mut(driver) {
                entry.instances.push((id, instance));
            }
            (id, watch, channel, cancel)
        };
        tracing::info!(%driver, %endpoint, %service, health = ?health_service.map(HealthService::as_str),
            "DRA plugin registered");
        if let Some(health_service) = health_service {
            let manager = self.clone();
            let name = driver.to_string();
            let follow = health::follow(
                channel,
                health_service,
                connection.clone(),
                endpoint.to_string(),
                move |devices| manager.health_update(&name, id, devices),
                cancel,
            );
            self.inner.tasks.spawn(follow);
        }
        let mut first = connection;
        let _ = tokio::time::timeout(
            self.inner.config.dial_timeout,
            first.wait_for(|s| s.attempts > 0),
        )
        .await;
        self.sync(driver);
        self.changed();
        Ok(())
    }

    /// Removes the instance of `driver` at `endpoint`; unknown ones are
    /// ignored. Calls still running on it may finish.
    pub fn deregister(&self, driver: &str, endpoint: &str) {
        let removed = {
            let mut state = self.lock();
            let Some(entry) = state.drivers.get_mut(driver) else {
                return;
            };
            let Some(at) = entry
                .instances
                .iter()
                .position(|(_, i)| i.endpoint == endpoint)
            else {
                return;
            };
            entry.instances.remove(at).1
        };
        removed.cancel.cancel();
        removed.connection.close();
        tracing::info!(%driver, %endpoint, "DRA plugin deregistered");
        self.event(DraEventKind::InstanceRemoved, driver, Some(endpoint), None);
        self.sync(driver);
        self.changed();
    }

    fn connection_changed(&self, driver: &str, id: u64, connected: bool) {
        let endpoint = {
            let state = self.lock();
            state
                .drivers
                .get(driver)
                .and_then(|d| d.instances.iter().find(|(i, _)| *i == id))
                .map(|(_, i)| (i.endpoint.clone(), i.connection.state().last_error))
        };
        let Some((endpoint, error)) = endpoint else {
            return;
        };
        if connected {
            self.event(DraEventKind::Connected, driver, Some(&endpoint), None);
        } else {
            self.event(DraEventKind::Disconnected, driver, Some(&endpoint), error);
        }
        self.sync(driver);
        self.changed();
    }

    /// Cancels the driver's cleanup if an instance is connected, or schedules
    /// one if none is and none is pending (a pending one keeps its deadline).
    fn sync(&self, driver: &str) {
        let grace = self.inner.config.cleanup_grace;
        let mut scheduled = None;
        let mut cancelled = false;
        {
            let mut state = self.lock();
            let next_seq = state.next_id + 1;
            let Some(entry) = state.drivers.get_mut(driver) else {
                return;
            };
            if entry.instances.iter().any(|(_, i)| i.connected()) {
                entry.cleaned_up_at = None;
                if let Some(pending) = entry.cleanup.take() {
                    pending.cancel.cancel();
                    cancelled = true;
                }
            } else if entry.cleanup.is_none() && entry.cleaned_up_at.is_none() {
                let cancel = self.inner.shutdown.child_token();
                let deadline_wall = SystemTime::now() + grace;
                entry.cleanup = Some(Scheduled {
                    seq: next_seq,
                    deadline: Instant::now() + grace,
                    deadline_wall,
                    cancel: cancel.clone(),
                    failures: 0,
                    last_error: None,
                });
                scheduled = Some((next_seq, cancel, deadline_wall));
            }
            if scheduled.is_some() {
                state.next_id = next_seq;
            }
            if state.drivers.get(driver).is_some_and(Driver::is_empty) {
                state.drivers.remove(driver);
            }
        }
        if cancelled {
            tracing::info!(%driver, "DRA driver usable again: cleanup cancelled");
            self.event(DraEventKind::CleanupCancelled, driver, None, None);
        }
        if let Some((seq, cancel, deadline)) = scheduled {
            tracing::info!(%driver, grace = ?grace, "no instance of the DRA driver is connected: cleanup scheduled");
            self.event(
                DraEventKind::CleanupScheduled,
                driver,
                None,
                Some(format!("deadline {} (unix ms)", unix_ms(deadline))),
            );
            let manager = self.clone();
            let driver = driver.to_string();
            self.inner.tasks.spawn(async move {
                tokio::select! {
                    () = cancel.cancelled() => {}
                    () = tokio::time::sleep(grace) => manager.run_cleanup(&driver, seq, cancel).await,
                }
            });
        }
    }

    async fn run_cleanup(&self, driver: &str, seq: u64, cancel: CancellationToken) {
        let mut failures: u32 = 0;
        loop {
            let result = tokio::select! {
                () = cancel.cancelled() => return,
                result = tokio::time::timeout(CLEANUP_CALL_TIMEOUT, self.inner.cleanup.driver_gone(driver)) => result,
            };
            let error = match result {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {CLEANUP_CALL_TIMEOUT:?}")),
            };
            let current = |state: &mut State| -> bool {
                state
                    .drivers
                    .get(driver)
                    .and_then(|d| d.cleanup.as_ref())
                    .is_some_and(|c| c.seq == seq)
            };
            match error {
                None => {
                    {
                        let mut state = self.lock();
                        if !current(&mut state) || cancel.is_cancelled() {
                            return;
                        }
                        if let Some(entry) = state.drivers.get_mut(driver) {
                            entry.cleanup = None;
                            entry.cleaned_up_at = Some(SystemTime::now());
                            if entry.instances.is_empty() {
                                state.drivers.remove(driver);
                            }
                        }
                    }
                    tracing::info!(%driver, "DRA driver cleaned up");
                    self.event(DraEventKind::CleanedUp, driver, None, None);
                    self.changed();
                    return;
                }
                Some(error) => {
                    failures = failures.saturating_add(1);
                    let delay = delay_after(failures, CLEANUP_RETRY_INITIAL, CLEANUP_RETRY_MAX);
                    {
                        let mut state = self.lock();
                        if !current(&mut state) {
                            return;
                        }
                        if let Some(pending) = state
                            .drivers
                            .get_mut(driver)
                            .and_then(|d| d.cleanup.as_mut())
                        {
                            pending.failures = failures;
                            pending.last_error = Some(error.clone());
                            pending.deadline = Instant::now() + delay;
                            pending.deadline_wall = SystemTime::now() + delay;
                        }
                    }
                    tracing::warn!(%driver, %error, retry_in = ?delay, "DRA driver cleanup failed");
                    self.event(DraEventKind::CleanupFailed, driver, None, Some(error));
                    self.changed();
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    fn health_update(&self, driver: &str, id: u64, devices: Vec<health_v1::DeviceHealth>) {
        {
            let mut state = self.lock();
            let Some((_, instance)) = state
                .drivers
                .get_mut(driver)
                .and_then(|d| d.instances.iter_mut().find(|(i, _)| *i == id))
            else {
                return;
            };
            health::apply(&mut instance.health, devices, Instant::now());
        }
        self.changed();
    }

    /// The instance calls for `driver` go to: its endpoint, service and channel.
    fn pick(
        &self,
        driver: &str,
    ) -> Result<(String, DraService, super::connection::Channel), DraError> {
        if driver.is_empty() {
            return Err(DraError::EmptyName);
        }
        let state = self.lock();
        let (_, instance) = state
            .drivers
            .get(driver)
            .and_then(Driver::in_use)
            .ok_or_else(|| DraError::NotRegistered(driver.into()))?;
        Ok((
            instance.endpoint.clone(),
            instance.service,
            instance.connection.channel(),
        ))
    }

    /// Prepares `claims` with `driver`'s instance in use. A failed call is an
    /// error; otherwise each claim has its own result.
    pub async fn prepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<PreparedClaim>, DraError> {
        let (endpoint, service, channel) = self.pick(driver)?;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let result = calls::prepare(channel, service, claims, self.inner.config.call_timeout).await;
        let (code, failed) = match &result {
            Ok(claims) => (tonic::Code::Ok, claims.iter().any(|c| c.error.is_some())),
            Err(status) => (status.code(), true),
        };
        self.record("PrepareResources", driver, service, started, code, failed);
        result.map_err(|status| DraError::Call {
            driver: driver.into(),
            endpoint,
            operation: "NodePrepareResources",
            code: status.code(),
            message: status.message().into(),
        })
    }

    /// Unprepares `claims` with `driver`'s instance in use.
    pub async fn unprepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<UnpreparedClaim>, DraError> {
        let (endpoint, service, channel) = self.pick(driver)?;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let result =
            calls::unprepare(channel, service, claims, self.inner.config.call_timeout).await;
        let (code, failed) = match &result {
            Ok(claims) => (tonic::Code::Ok, claims.iter().any(|c| c.error.is_some())),
            Err(status) => (status.code(), true),
        };
        self.record("UnprepareResources", driver, service, started, code, failed);
        result.map_err(|status| DraError::Call {
            driver: driver.into(),
            endpoint,
            operation: "NodeUnprepareResources",
            code: status.code(),
            message: status.message().into(),
        })
    }

    /// The drivers, sorted by name.
    pub fn status(&self) -> Vec<DraDriverStatus> {
        let state = self.lock();
        let now = Instant::now();
        state
            .drivers
            .iter()
            .map(|(name, d)| {
                let in_use = d.in_use().map(|(id, _)| *id);
                DraDriverStatus {
                    name: name.clone(),
                    instances: d
                        .instances
                        .iter()
                        .map(|(id, i)| {
                            let conn = i.connection.state();
                            DraInstanceStatus {
                                endpoint: i.endpoint.clone(),
                                service: i.service,
                                health_service: i.health_service,
                                connected: conn.connected(),
                                in_use: Some(*id) == in_use,
                                registered_at_unix_ms: unix_ms(i.registered_at),
                                connection_changed_at_unix_ms: unix_ms(conn.since),
                                last_error: conn.last_error,
                                connects: conn.connects,
                            }
                        })
                        .collect(),
                    pending_cleanup: d.cleanup.as_ref().map(|c| PendingCleanup {
                        deadline_unix_ms: unix_ms(c.deadline_wall),
                        in_ms: c.deadline.saturating_duration_since(now).as_millis() as u64,
                        failures: c.failures,
                        last_error: c.last_error.clone(),
                    }),
                    cleaned_up_at_unix_ms: d.cleaned_up_at.map(unix_ms),
                    devices: d
                        .in_use()
                        .map(|(_, i)| {
                            health::status(
                                &i.health,
                                i.connected(),
                                now,
                                self.inner.config.health_timeout,
                            )
                        })
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Stops all connections and cleanups.
    pub fn stop(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
    }

    /// Waits until every task has ended after [`stop`](Self::stop).
    pub async fn wait_stopped(&self) {
        self.inner.tasks.wait().await;
    }
}

/// The name grpc-go gives a status code, as the kubelet's metrics label it.
fn grpc_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}
