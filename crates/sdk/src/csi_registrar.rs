//! A replacement for the node-driver-registrar sidecar: learns the CSI
//! driver's name with GetPluginInfo (waiting for the driver to come up),
//! serves `<registration dir>/<driver>-reg.sock` with type `CSIPlugin`,
//! endpoint `--kubelet-registration-path` and versions `["1.0.0"]`, and
//! reports its state on an optional `/healthz` endpoint.
//!
//! Like node-driver-registrar it gives up when the kubelet rejects the
//! plugin ([`Outcome::Rejected`]; the binary exits 1 so the pod restarts).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use nodeplugins_api::constants::{CSI_REGISTRATION_VERSION, plugin_type};
use nodeplugins_api::csi::v1::GetPluginInfoRequest;
use nodeplugins_api::csi::v1::identity_client::IdentityClient;
use nodeplugins_api::transport::{TransportError, dial, root_cause};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::registrar::{PluginRegistration, Registrar, RegistrarError, RegistrationState};

/// Settings, mirroring node-driver-registrar's flags.
#[derive(Debug, Clone)]
pub struct CsiRegistrarConfig {
    /// The driver's CSI socket as seen by this process (`--csi-address`).
    pub csi_address: PathBuf,
    /// The driver's CSI socket as the kubelet sees it (`--kubelet-registration-path`).
    pub kubelet_registration_path: String,
    /// The kubelet's plugin registration directory as seen by this process
    /// (`--plugin-registration-path`).
    pub plugin_registration_path: PathBuf,
    /// Where to serve `/healthz` (`--http-endpoint`).
    pub http_endpoint: Option<SocketAddr>,
    /// Timeout of each call to the driver (`--timeout`).
    pub timeout: Duration,
}

/// How the registrar ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Shut down on request; the socket was removed.
    Stopped,
    /// The kubelet rejected the driver, with its reason.
    Rejected(String),
}

/// Why the registrar failed.
#[derive(Debug, thiserror::Error)]
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
}

/// What `/healthz` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Health {
    WaitingForDriver(String),
    Registering(String),
    Registered(String),
    Rejected(String),
}

/// Runs until `shutdown` or a rejection.
pub async fn run(
    config: CsiRegistrarConfig,
    shutdown: CancellationToken,
) -> Result<Outcome, CsiRegistrarError> {
    let (health_tx, health_rx) =
        watch::channel(Health::WaitingForDriver("not contacted yet".into()));
    let health_tx = Arc::new(health_tx);
    if let Some(addr) = config.http_endpoint {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| CsiRegistrarError::Health { addr, source })?;
        tokio::spawn(serve_health(listener, health_rx, shutdown.clone()));
    }

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
                        health_tx.send_replace(Health::Registered(driver.clone()));
                    }
                    RegistrationState::Rejected(reason) => {
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
    config: &CsiRegistrarConfig,
    health: &watch::Sender<Health>,
    shutdown: &CancellationToken,
) -> Option<String> {
    let mut pause = Duration::from_millis(100);
    let mut last_error = String::new();
    loop {
        let attempt = async {
            let channel = dial(&config.csi_address, config.timeout)
                .await
                .map_err(|e| root_cause(&e))?;
            let mut client = IdentityClient::new(channel);
            let call = client.get_plugin_info(GetPluginInfoRequest {});
            match tokio::time::timeout(config.timeout, call).await {
                Ok(Ok(info)) if !info.get_ref().name.is_empty() => Ok(info.into_inner().name),
                Ok(Ok(_)) => Err("GetPluginInfo returned an empty driver name".to_string()),
                Ok(Err(status)) => Err(format!("GetPluginInfo failed: {}", status.message())),
                Err(_) => Err(format!(
                    "GetPluginInfo did not answer within {:?}",
                    config.timeout
                )),
            }
        };
        match attempt.await {
            Ok(name) => {
                tracing::info!(driver = %name, csi_address = %config.csi_address.display(), "CSI driver found");
                return Some(name);
            }
            Err(error) => {
                if error != last_error {
                    tracing::warn!(csi_address = %config.csi_address.display(), %error, "waiting for the CSI driver");
                    last_error = error.clone();
                }
                health.send_replace(Health::WaitingForDriver(error));
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

async fn serve_health(
    listener: tokio::net::TcpListener,
    health: watch::Receiver<Health>,
    shutdown: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let health = health.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let state = health.borrow().clone();
                async move {
                    Ok::<_, std::convert::Infallible>(health_response(request.uri().path(), &state))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn health_response(path: &str, state: &Health) -> hyper::Response<Full<Bytes>> {
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
        _ => (404, "not found\n".to_string()),
    };
    let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    response
}
