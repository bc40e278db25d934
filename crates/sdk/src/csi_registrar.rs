//! A replacement for the node-driver-registrar sidecar: learns the CSI
//! driver's name with GetPluginInfo (waiting for the driver to come up),
//! serves `<registration dir>/<driver>-reg.sock` with type `CSIPlugin`,
//! endpoint `--kubelet-registration-path` and versions `["1.0.0"]`, and
//! reports its state on an optional `/healthz` endpoint.
//!
//! Like node-driver-registrar it gives up when the kubelet rejects the
//! plugin ([`Outcome::Rejected`]; the binary exits 1 so the pod restarts).
//!
//! Whether the kubelet registered the driver is also kept in a marker file
//! ([`registration_marker`]) for an exec probe in the same container to
//! check ([`probe_registered`]): `--mode=kubelet-registration-probe`.
//! node-driver-registrar made its probe succeed unconditionally in later
//! releases, because its file lived beside `--kubelet-registration-path`,
//! a host path most DaemonSets do not mount into the container; the
//! marker here lives in the container's own temporary directory, which
//! every exec probe of the container sees, so the probe keeps its meaning:
//! it passes once the kubelet registered the driver, and fails before and
//! after.

use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Retry, Said};
use nodeplugins_api::timer::sleep_until;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

use nodeplugins_api::call;
use nodeplugins_api::constants::{CSI_REGISTRATION_VERSION, plugin_type};
use nodeplugins_api::csi::v1::GetPluginInfoRequest;
use nodeplugins_api::csi::v1::identity_client::IdentityClient;
use nodeplugins_api::text_server::{TextAnswer, serve_text};
use nodeplugins_api::transport::{TransportError, dial, root_cause};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::registrar::{PluginRegistration, Registrar, RegistrarError, RegistrationState};

/// Settings, mirroring node-driver-registrar's flags; ends in
/// [`start`](Self::start).
#[derive(Debug, Clone)]
pub struct CsiRegistrarBuilder {
    csi_address: PathBuf,
    kubelet_registration_path: String,
    plugin_registration_path: PathBuf,
    http_endpoint: Option<SocketAddr>,
    timeout: Duration,
    marker: Option<PathBuf>,
}

impl CsiRegistrarBuilder {
    /// Serve `/healthz` on `addr` (`--http-endpoint`): 200 once registered,
    /// 503 with the reason otherwise.
    pub fn http_endpoint(mut self, addr: SocketAddr) -> Self {
        self.http_endpoint = Some(addr);
        self
    }

    /// Timeout of each call to the driver (`--timeout`, default 1 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Keep the registration's outcome in `marker` (by default
    /// [`registration_marker`] of the kubelet registration path): made once
    /// the kubelet registers the driver, removed at start, on a rejection
    /// and when the registrar stops.
    pub fn marker(mut self, marker: impl Into<PathBuf>) -> Self {
        self.marker = Some(marker.into());
        self
    }

    /// Binds the health endpoint, if any, and runs in the background until
    /// `shutdown` or a rejection.
    pub async fn start(
        self,
        shutdown: CancellationToken,
    ) -> Result<CsiRegistrar, CsiRegistrarError> {
        let (health_tx, health_rx) =
            watch::channel(Health::WaitingForDriver("not contacted yet".into()));
        // Ends the health endpoint too once the registrar has ended.
        let shutdown = shutdown.child_token();
        let tasks = TaskTracker::new();
        if let Some(addr) = self.http_endpoint {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| CsiRegistrarError::Health { addr, source })?;
            tasks.spawn(serve_health(listener, health_rx, shutdown.clone()));
        }
        let run = tasks.spawn(run(self, health_tx, shutdown.clone()));
        tasks.close();
        Ok(CsiRegistrar {
            run,
            tasks,
            shutdown,
        })
    }
}

/// A running CSI registrar.
pub struct CsiRegistrar {
    run: tokio::task::JoinHandle<Result<Outcome, CsiRegistrarError>>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl CsiRegistrar {
    /// A registrar for the CSI driver at `csi_address` (`--csi-address`,
    /// as seen by this process), registered with endpoint
    /// `kubelet_registration_path` (`--kubelet-registration-path`, the same
    /// socket as the kubelet sees it) in `plugin_registration_path`
    /// (`--plugin-registration-path`).
    pub fn builder(
        csi_address: impl Into<PathBuf>,
        kubelet_registration_path: impl Into<String>,
        plugin_registration_path: impl Into<PathBuf>,
    ) -> CsiRegistrarBuilder {
        let kubelet_registration_path = kubelet_registration_path.into();
        CsiRegistrarBuilder {
            csi_address: csi_address.into(),
            marker: Some(registration_marker(&kubelet_registration_path)),
            kubelet_registration_path,
            plugin_registration_path: plugin_registration_path.into(),
            http_endpoint: None,
            timeout: Duration::from_secs(1),
        }
    }

    /// Waits until the registrar stops (on shutdown or a rejection) and its
    /// socket and health endpoint are closed.
    pub async fn wait(self) -> Result<Outcome, CsiRegistrarError> {
        let outcome = match self.run.await {
            Ok(outcome) => outcome,
            Err(e) => Err(CsiRegistrarError::Panicked(e)),
        };
        self.shutdown.cancel();
        self.tasks.wait().await;
        outcome
    }
}

/// How the registrar ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Shut down on request; the socket was removed.
    Stopped,
    /// The kubelet rejected the driver, with its reason.
    Rejected(String),
}

/// Why the registrar failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CsiRegistrarError {
    /// The registration socket could not be served.
    #[error(transparent)]
    Registrar(#[from] RegistrarError),
    /// The health endpoint could not be served.
    #[error("cannot serve /healthz on {addr}: {source}")]
    Health {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an error.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The registrar's task ended abnormally.
    #[error("the registrar's task ended abnormally: {0}")]
    Panicked(#[source] tokio::task::JoinError),
}

/// What `/healthz` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Health {
    WaitingForDriver(String),
    Registering(String),
    Registered(String),
    Rejected(String),
}

/// Where the registrar serving a driver registered with endpoint
/// `kubelet_registration_path` keeps whether the kubelet registered it: a
/// file in this process's temporary directory named after that path.
pub fn registration_marker(kubelet_registration_path: &str) -> PathBuf {
    let name: String = kubelet_registration_path
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    std::env::temp_dir()
        .join("nodeplugins-csi-registrar")
        .join(format!("{name}.registered"))
}

/// Why [`probe_registered`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The registrar has not been told the driver is registered (or it has
    /// stopped, or was rejected).
    #[error("kubelet plugin registration has not succeeded yet: {} does not exist", .0.display())]
    NotRegistered(PathBuf),
    /// The marker could not be read.
    #[error("cannot check {}: {source}", path.display())]
    Unreadable {
        /// The marker.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// `--mode=kubelet-registration-probe`: whether the registrar for
/// `kubelet_registration_path` running in this container was told by the
/// kubelet that the driver is registered. Returns the driver's name.
pub fn probe_registered(kubelet_registration_path: &str) -> Result<String, ProbeError> {
    let path = registration_marker(kubelet_registration_path);
    match std::fs::read_to_string(&path) {
        Ok(driver) => Ok(driver.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ProbeError::NotRegistered(path)),
        Err(source) => Err(ProbeError::Unreadable { path, source }),
    }
}

/// The marker file of one run: made when registered, removed otherwise.
struct Marker(Option<PathBuf>);

impl Marker {
    /// Registered (`Some(driver)`) or not.
    fn set(&self, registered: Option<&str>) {
        let Some(path) = &self.0 else {
            return;
        };
        let result = match registered {
            Some(driver) => write_marker(path, driver),
            None => match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
        };
        if let Err(e) = result {
            tracing::warn!(marker = %path.display(), error = %e, "cannot keep the registration probe's marker");
        }
    }
}

fn write_marker(path: &Path, driver: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let partial = path.with_extension("partial");
    std::fs::write(&partial, driver)?;
    std::fs::rename(&partial, path)
}

/// Runs until `shutdown` or a rejection, keeping the marker.
async fn run(
    config: CsiRegistrarBuilder,
    health_tx: watch::Sender<Health>,
    shutdown: CancellationToken,
) -> Result<Outcome, CsiRegistrarError> {
    let marker = Marker(config.marker.clone());
    marker.set(None);
    let outcome = register(config, health_tx, &marker, shutdown).await;
    marker.set(None);
    outcome
}

/// Registers the driver once it answers, until `shutdown` or a rejection.
async fn register(
    config: CsiRegistrarBuilder,
    health_tx: watch::Sender<Health>,
    marker: &Marker,
    shutdown: CancellationToken,
) -> Result<Outcome, CsiRegistrarError> {
    let Some(driver) = wait_for_driver(&config, &health_tx, &shutdown).await else {
        return Ok(Outcome::Stopped);
    };
    health_tx.send_replace(Health::Registering(driver.clone()));
    let registrar = Registrar::builder(PluginRegistration {
        plugin_type: plugin_type::CSI.into(),
        name: driver.clone(),
        endpoint: config.kubelet_registration_path.clone(),
        versions: vec![CSI_REGISTRATION_VERSION.into()],
    })
    .registry_dir(&config.plugin_registration_path)
    .mode(0o700)
    .start(shutdown.clone())
    .await?;

    let mut state = registrar.state();
    let outcome = loop {
        tokio::select! {
            () = shutdown.cancelled() => break Outcome::Stopped,
            changed = state.changed() => {
                if changed.is_err() {
                    break Outcome::Stopped;
                }
                match state.borrow_and_update().clone() {
                    RegistrationState::Registered => {
                        marker.set(Some(&driver));
                        health_tx.send_replace(Health::Registered(driver.clone()));
                    }
                    RegistrationState::Rejected(reason) => {
                        marker.set(None);
                        health_tx.send_replace(Health::Rejected(reason.clone()));
                        break Outcome::Rejected(reason);
                    }
                    RegistrationState::Pending => {}
                }
            }
        }
    };
    registrar.stop().await?;
    Ok(outcome)
}

/// Calls GetPluginInfo until the driver answers with a name; `None` on shutdown.
async fn wait_for_driver(
    config: &CsiRegistrarBuilder,
    health: &watch::Sender<Health>,
    shutdown: &CancellationToken,
) -> Option<String> {
    let schedule = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut retry: Retry<String> = Retry::default();
    loop {
        let attempt = async {
            let channel = dial(&config.csi_address, config.timeout)
                .await
                .map_err(|e| root_cause(&e))?;
            let mut client = IdentityClient::new(channel);
            let call = client.get_plugin_info(GetPluginInfoRequest {});
            match call::unary(config.timeout, call).await {
                Ok(info) if !info.name.is_empty() => Ok(info.name),
                Ok(_) => Err("GetPluginInfo returned an empty driver name".to_string()),
                Err(error) => Err(format!("GetPluginInfo failed: {error}")),
            }
        };
        match attempt.await {
            Ok(name) => {
                tracing::info!(driver = %name, csi_address = %config.csi_address.display(), "CSI driver found");
                return Some(name);
            }
            Err(error) => {
                health.send_replace(Health::WaitingForDriver(error.clone()));
                if retry.failed(error.clone(), &schedule, Instant::now()) == Said::NewError {
                    tracing::warn!(csi_address = %config.csi_address.display(), %error, "waiting for the CSI driver");
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = sleep_until(retry.due_at()) => {}
        }
    }
}

async fn serve_health(
    listener: tokio::net::TcpListener,
    health: watch::Receiver<Health>,
    shutdown: CancellationToken,
) {
    let answer = move |path: String| {
        let answer = health_response(&path, &health.borrow());
        async move { answer }
    };
    serve_text(listener, "CSI registrar health", answer, shutdown).await;
}

fn health_response(path: &str, state: &Health) -> TextAnswer {
    let (status, body) = match (path, state) {
        ("/healthz", Health::Registered(driver)) => {
            (200, format!("ok: {driver} registered with the kubelet\n"))
        }
        ("/healthz", Health::Registering(driver)) => (
            503,
            format!("{driver}: waiting for the kubelet to register it\n"),
        ),
        ("/healthz", Health::WaitingForDriver(error)) => {
            (503, format!("waiting for the CSI driver: {error}\n"))
        }
        ("/healthz", Health::Rejected(reason)) => {
            (503, format!("rejected by the kubelet: {reason}\n"))
        }
        _ => return TextAnswer::not_found(),
    };
    TextAnswer::plain(status, body)
}
