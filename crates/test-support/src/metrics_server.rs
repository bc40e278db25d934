//! The metrics server (`sigs.k8s.io/metrics-server` v0.8.0, built from
//! `interop/go.mod`), the consumer of the kubelets'
//! `/metrics/resource`: it scrapes every Node's kubelet port and serves the
//! `metrics.k8s.io` API that `kubectl top` and the autoscalers read,
//! registered as an APIService behind a [`KubeApi`]'s aggregation layer.
//!
//! Opt-in per test: `let _metrics = MetricsServer::start(&api, &cert).await;`.
//! It listens on a loopback port; the APIService names a Service of type
//! `ExternalName` (`localhost`), which the aggregator resolves to the host
//! name and the APIService's port, as no kube-proxy or cluster IP is
//! needed for that.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::control_process::{free_port, spawn, startup_failed, wait_healthy};
use crate::go_programs::go_program;
use crate::kube_api::{Identity, KubeApi};

/// The deadline for the server to answer `/livez` and for its APIService
/// to become Available.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How often the APIService is read while it becomes Available.
const AVAILABLE_POLL: Duration = Duration::from_millis(200);
/// How often the kubelets are scraped: the server's smallest resolution.
pub const RESOLUTION: Duration = Duration::from_secs(10);
/// The namespace and name of its Service and of the APIService's group.
const NAMESPACE: &str = "kube-system";
const SERVICE: &str = "metrics-server";
const API_SERVICE: &str = "v1beta1.metrics.k8s.io";

/// A running metrics server, registered as `v1beta1.metrics.k8s.io`;
/// killed on drop.
pub struct MetricsServer {
    // Declared before `dir`: killed before its directory is removed.
    _child: Child,
    dir: TempDir,
}

impl MetricsServer {
    /// Starts the metrics server against `api` as its admin, scraping the
    /// kubelets with the client certificate and key in the PEM file
    /// `kubelet_client` (their serving certificates are not verified: each
    /// is self-signed), at the port each Node's status names, on its
    /// `InternalIP`. Returns once `metrics.k8s.io` is Available through the
    /// API server; its first numbers come one or two
    /// [`RESOLUTION`]s later.
    pub async fn start(api: &KubeApi, kubelet_client: &Path) -> Self {
        let bin = tokio::task::spawn_blocking(|| go_program("metrics-server"))
            .await
            .expect("build the metrics server");
        let dir = tempfile::Builder::new()
            .prefix("metrics-server-")
            .tempdir()
            .expect("create the metrics server's temp dir");
        let started = Instant::now();
        let deadline = started + START_TIMEOUT;
        let kubeconfig = api.admin_kubeconfig();
        let kubeconfig = kubeconfig.display();
        let client = kubelet_client.display();
        let port = free_port();
        let mut command = Command::new(&bin);
        command
            .arg(format!("--kubeconfig={kubeconfig}"))
            .arg(format!("--authentication-kubeconfig={kubeconfig}"))
            .arg(format!("--authorization-kubeconfig={kubeconfig}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", dir.path().join("certs").display()))
            .arg(format!("--metric-resolution={}s", RESOLUTION.as_secs()))
            // Below the resolution, as the server requires.
            .arg("--kubelet-request-timeout=5s")
            .arg("--kubelet-use-node-status-port")
            .arg("--kubelet-preferred-address-types=InternalIP")
            .arg("--kubelet-insecure-tls")
            .arg(format!("--kubelet-client-certificate={client}"))
            .arg(format!("--kubelet-client-key={client}"));
        let log = dir.path().join("metrics-server.log");
        let mut child = spawn(&mut command, Stdio::null(), &log);
        if let Err(failure) = wait_healthy(&mut child, port, "/livez", deadline).await {
            startup_failed(&failure, &command, &log);
        }
        register(api, port).await;
        if let Err(failure) = wait_available(api, deadline).await {
            startup_failed(&failure, &command, &log);
        }
        tracing::info!(
            dir = %dir.path().display(),
            elapsed = ?started.elapsed(),
            "metrics server available"
        );
        Self { _child: child, dir }
    }

    /// The server's log so far, for a failing test to show.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("metrics-server.log")).unwrap_or_default()
    }
}

/// Creates the Service and the APIService that send `metrics.k8s.io` to
/// the server on `port` of this host.
async fn register(api: &KubeApi, port: u16) {
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    });
    let path = format!("/api/v1/namespaces/{NAMESPACE}/services");
    api.admin("POST", &path, Some(&service)).await;
    let api_service = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": API_SERVICE},
        "spec": {
            "group": "metrics.k8s.io",
            "version": "v1beta1",
            "service": {"namespace": NAMESPACE, "name": SERVICE, "port": port},
            // Its serving certificate is self-signed, as the upstream
            // manifest's.
            "insecureSkipTLSVerify": true,
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    });
    let path = "/apis/apiregistration.k8s.io/v1/apiservices";
    api.admin("POST", path, Some(&api_service)).await;
}

/// Waits for the APIService's `Available` condition to be `True`; an error
/// carries its last conditions.
async fn wait_available(api: &KubeApi, deadline: Instant) -> Result<(), String> {
    let path = format!("/apis/apiregistration.k8s.io/v1/apiservices/{API_SERVICE}");
    loop {
        let found = api.request(Identity::Admin, "GET", &path, None).await;
        let conditions = found.body["status"]["conditions"].clone();
        let available = conditions
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        if available {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{API_SERVICE} did not become Available in time: {}",
                pretty(&conditions)
            ));
        }
        tokio::time::sleep(AVAILABLE_POLL).await;
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}
