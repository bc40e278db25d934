//! A real kube-apiserver on loopback with its own etcd, for tests of what a
//! node writes to the Kubernetes API: the Node authorizer and the
//! NodeRestriction admission plugin judge the node's requests as they do in a
//! cluster. Both programs are built from the versions pinned in
//! `interop/go.mod` (Kubernetes v1.37, etcd v3.7).
//!
//! The API server accepts two bearer tokens: an admin (group
//! `system:masters`) and one node (`system:node:<name>`, group
//! `system:nodes`). It serves HTTPS with a certificate it signs itself at
//! start; the kubeconfigs trust that certificate's CA. Tests send requests
//! with [`KubeApi::request`], which runs `curl` (nothing in the workspace
//! speaks TLS).
//!
//! etcd serves the API server on a Unix socket in the fixture's directory, so
//! the only TCP port is the API server's. The aggregation layer is set up
//! (a front proxy CA and client certificate), so that an aggregated API
//! such as the metrics server's can be registered.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

use crate::client_certificates::ClientCa;
use crate::go_programs::go_program;

const ADMIN_USER: &str = "admin";
const ADMIN_TOKEN: &str = "admin-token";
const NODE_TOKEN: &str = "node-token";
/// A bootstrap identity (`system:bootstrap:abcdef` in
/// `system:bootstrappers`), as a kubeadm bootstrap token authenticates.
const BOOTSTRAP_TOKEN: &str = "bootstrap-token";
/// The name in the front proxy's client certificate, the one name
/// aggregated API servers accept the proxied user from.
const FRONT_PROXY_USER: &str = "front-proxy-client";

/// The deadline for etcd and the API server to become ready. About 6 s on
/// an idle 2-core machine; this allows for one that is busy building.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How often `/readyz` is asked while the API server starts. Bounds the
/// start-up latency only.
const READY_POLL: Duration = Duration::from_millis(50);
/// The deadline for one request to the API server.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// Who sends a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// `admin` in group `system:masters`: allowed everything.
    Admin,
    /// `system:node:<node name>` in group `system:nodes`: what a kubelet is.
    Node,
}

/// An answer from the API server.
#[derive(Debug)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// The body as JSON, or as a JSON string when it is not JSON.
    pub body: Value,
}

/// A running etcd and kube-apiserver, both killed on drop.
pub struct KubeApi {
    // The processes are declared before `dir` so that they are killed before
    // their directory is removed.
    apiserver: Child,
    etcd: Child,
    /// Kept open: a Go program that writes to a closed stdout dies of SIGPIPE.
    _etcd_stdout: Lines<BufReader<ChildStdout>>,
    url: String,
    node_name: String,
    /// To start the API server again after [`KubeApi::stop_apiserver`].
    apiserver_bin: PathBuf,
    apiserver_args: Vec<std::ffi::OsString>,
    /// The CA of the client certificates the API server accepts.
    client_ca: ClientCa,
    /// The readiness check to wait for.
    readyz: &'static str,
    dir: TempDir,
}

pub mod hand_allocated;
mod kubeconfig;
pub mod kubectl;
pub mod requests;
use crate::control_process::{free_port, next_event, spawn, startup_failed};

impl KubeApi {
    /// Starts etcd and kube-apiserver with a node identity for `node_name`
    /// and returns once `/readyz` answers 200. Builds the Go programs first
    /// if they are missing or stale. Fails the test with the command line and
    /// the tail of the log when either program does not come up.
    pub async fn start(node_name: &str) -> Self {
        Self::start_with(node_name, &[]).await
    }

    /// As [`start`](Self::start), with `args` added to the API server's
    /// command line (such as `--runtime-config=...`). With APIs turned off
    /// the server may never sync its own informers of them, so readiness
    /// leaves out its `informer-sync` check.
    pub async fn start_with(node_name: &str, args: &[&str]) -> Self {
        let (etcd_bin, apiserver_bin) =
            tokio::task::spawn_blocking(|| (go_program("etcd"), go_program("kube-apiserver")))
                .await
                .expect("build interop programs");

        let started = Instant::now();
        let deadline = started + START_TIMEOUT;
        let dir = tempfile::Builder::new()
            .prefix("kube-api-")
            .tempdir()
            .expect("create kube-api temp dir");
        let path = dir.path();
        let socket = path.join("etcd.sock");

        let mut etcd_command = Command::new(&etcd_bin);
        etcd_command
            .arg("--data-dir")
            .arg(path.join("etcd"))
            .arg("--client-socket")
            .arg(&socket)
            // Nothing here outlives the test.
            .arg("--unsafe-no-fsync");
        let etcd_log = path.join("etcd.log");
        let mut etcd = spawn(&mut etcd_command, Stdio::piped(), &etcd_log);
        let mut etcd_stdout = BufReader::new(etcd.stdout.take().expect("piped stdout")).lines();

        // Written while etcd starts.
        write_token_file(&path.join("tokens.csv"), node_name);
        let client_ca = ClientCa::new();
        client_ca.write(&path.join("client-ca.crt"));
        client_ca.write_key(&path.join("client-ca.key"));
        // The aggregation layer's front proxy, as kubeadm sets it up: the
        // API server proxies `metrics.k8s.io` and other APIServices to their
        // servers with a client certificate of its own CA, and the user in
        // headers those servers trust because of it.
        let front_proxy_ca = ClientCa::new();
        front_proxy_ca.write(&path.join("front-proxy-ca.crt"));
        let front_proxy_client = path.join("front-proxy-client.pem");
        front_proxy_ca.issue(
            FRONT_PROXY_USER,
            "",
            Duration::from_secs(24 * 3600),
            &front_proxy_client,
        );
        let service_account_key = path.join("service-account.key");
        generate_service_account_key(&service_account_key).await;

        let ready = tokio::time::timeout_at(deadline, next_event(&mut etcd_stdout, "ready")).await;
        let client_url = match ready {
            Ok(Some(event)) => event["client_url"].as_str().unwrap_or_default().to_string(),
            Ok(None) => startup_failed("etcd exited", &etcd_command, &etcd_log),
            Err(_) => startup_failed("etcd was not ready in time", &etcd_command, &etcd_log),
        };

        let port = free_port();
        let mut apiserver_command = Command::new(&apiserver_bin);
        apiserver_command
            .arg(format!("--etcd-servers={client_url}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", path.join("certs").display()))
            .arg(format!(
                "--token-auth-file={}",
                path.join("tokens.csv").display()
            ))
            .arg(format!(
                "--client-ca-file={}",
                path.join("client-ca.crt").display()
            ))
            .arg("--authorization-mode=Node,RBAC")
            // As a kubeadm cluster runs: privileged pods (CSI node plugins,
            // CNI agents) are allowed.
            .arg("--allow-privileged=true")
            .arg("--enable-admission-plugins=NodeRestriction")
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!(
                "--service-account-key-file={}",
                service_account_key.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                service_account_key.display()
            ))
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg(format!(
                "--requestheader-client-ca-file={}",
                path.join("front-proxy-ca.crt").display()
            ))
            .arg(format!("--requestheader-allowed-names={FRONT_PROXY_USER}"))
            .arg("--requestheader-username-headers=X-Remote-User")
            .arg("--requestheader-group-headers=X-Remote-Group")
            .arg("--requestheader-extra-headers-prefix=X-Remote-Extra-")
            .arg(format!(
                "--proxy-client-cert-file={}",
                front_proxy_client.display()
            ))
            .arg(format!(
                "--proxy-client-key-file={}",
                front_proxy_client.display()
            ))
            // The default reconciler complains every 10 s that 127.0.0.1 is
            // a loopback address.
            .arg("--endpoint-reconciler-type=none")
            .args(args);
        let apiserver_log = path.join("kube-apiserver.log");
        let apiserver = spawn(&mut apiserver_command, Stdio::null(), &apiserver_log);

        let mut api = Self {
            apiserver,
            etcd,
            _etcd_stdout: etcd_stdout,
            url: format!("https://127.0.0.1:{port}"),
            node_name: node_name.to_string(),
            apiserver_bin,
            apiserver_args: apiserver_command
                .as_std()
                .get_args()
                .map(|a| a.to_os_string())
                .collect(),
            client_ca,
            readyz: match args {
                [] => "/readyz",
                _ => "/readyz?exclude=informer-sync",
            },
            dir,
        };
        if let Err(failure) = api.wait_ready(deadline).await {
            startup_failed(&failure, &apiserver_command, &apiserver_log);
        }
        if let Ok(Some(status)) = api.etcd.try_wait() {
            startup_failed(&format!("etcd exited ({status})"), &etcd_command, &etcd_log);
        }
        let token = |token| serde_json::json!({ "token": token });
        api.write_kubeconfig(&api.admin_kubeconfig(), ADMIN_USER, token(ADMIN_TOKEN));
        api.write_kubeconfig(&api.node_kubeconfig(), &api.node_user(), token(NODE_TOKEN));
        tracing::info!(url = %api.url, elapsed = ?started.elapsed(), "kube-apiserver ready");
        api
    }

    /// Stops the API server (etcd keeps running): clients get connection
    /// errors until [`start_apiserver`](Self::start_apiserver).
    pub async fn stop_apiserver(&mut self) {
        let _ = self.apiserver.kill().await;
    }

    /// Starts the API server again, on the same port with the same
    /// certificate and data, and returns once it is ready.
    pub async fn start_apiserver(&mut self) {
        let mut command = Command::new(&self.apiserver_bin);
        command.args(&self.apiserver_args);
        let log = self.dir.path().join("kube-apiserver.log");
        self.apiserver = spawn(&mut command, Stdio::null(), &log);
        if let Err(failure) = self.wait_ready(Instant::now() + START_TIMEOUT).await {
            startup_failed(&failure, &command, &log);
        }
    }

    /// The API server's base URL, `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bearer token of `admin` (group `system:masters`).
    pub fn admin_token(&self) -> &str {
        ADMIN_TOKEN
    }

    /// The bearer token of `system:node:<node name>` (group `system:nodes`).
    pub fn node_token(&self) -> &str {
        NODE_TOKEN
    }

    /// The name of the node whose identity [`Self::node_token`] is.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// The PEM file with the CA that signed the API server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        // The API server writes its self-signed certificate followed by the
        // CA that signed it; trusting the file trusts that CA.
        self.dir.path().join("certs/apiserver.crt")
    }

    /// A kubeconfig for `admin`.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// A kubeconfig for the node identity.
    pub fn node_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("node.kubeconfig")
    }

    /// Sends `method path` as `identity`, with `body` as JSON if given (as a
    /// JSON merge patch for `PATCH`), and returns the answer. Fails the test
    /// when the API server cannot be reached.
    pub async fn request(
        &self,
        identity: Identity,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Response {
        let token = match identity {
            Identity::Admin => ADMIN_TOKEN,
            Identity::Node => NODE_TOKEN,
        };
        self.request_as(token, method, path, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path} as {identity:?}: {e}"))
    }

    /// As [`request`](Self::request), with bearer token `token` (such as
    /// one from [`service_account_token`](Self::service_account_token));
    /// an error says why there was no answer.
    pub async fn request_as(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response, String> {
        let (status, text) = self.send(token, method, path, body).await?;
        Ok(Response {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        })
    }

    /// Sends a request as the admin and returns the body of its 2xx answer;
    /// any other answer fails the test, naming the request.
    pub async fn admin(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let response = self.request(Identity::Admin, method, path, body).await;
        assert!(
            (200..300).contains(&response.status),
            "{method} {path}: {} {}",
            response.status,
            response.body
        );
        response.body
    }

    /// A client of the API server with `identity`'s kubeconfig.
    pub async fn client(&self, identity: Identity) -> kube::Client {
        let path = match identity {
            Identity::Admin => self.admin_kubeconfig(),
            Identity::Node => self.node_kubeconfig(),
        };
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("read kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("kubeconfig");
        kube::Client::try_from(config).expect("client")
    }

    /// Freezes the API server (SIGSTOP): connections stay open and nothing
    /// is answered, as when it hangs, until
    /// [`resume_apiserver`](Self::resume_apiserver).
    pub async fn pause_apiserver(&self) {
        self.signal_apiserver("-STOP").await;
    }

    /// Lets a frozen API server go on (SIGCONT).
    pub async fn resume_apiserver(&self) {
        self.signal_apiserver("-CONT").await;
    }

    async fn signal_apiserver(&self, signal: &str) {
        let pid = self.apiserver.id().expect("the API server is running");
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .await
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    fn node_user(&self) -> String {
        format!("system:node:{}", self.node_name)
    }

    /// Polls `/readyz` until it answers 200; an error says why it never did.
    async fn wait_ready(&mut self, deadline: Instant) -> Result<(), String> {
        loop {
            if let Ok(Some(status)) = self.apiserver.try_wait() {
                return Err(format!("kube-apiserver exited ({status})"));
            }
            let last = match self.send(ADMIN_TOKEN, "GET", self.readyz, None).await {
                Ok((200, _)) => return Ok(()),
                Ok((status, text)) => format!("{} answered {status}: {text}", self.readyz),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "kube-apiserver was not ready within {START_TIMEOUT:?}; last: {last}"
                ));
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// One request through `curl`: the status and the body, or why there
    /// was no answer.
    async fn send(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, String), String> {
        let mut command = Command::new("curl");
        command
            .args(["--silent", "--show-error", "--max-time"])
            .arg(REQUEST_TIMEOUT.as_secs().to_string())
            .arg("--cacert")
            .arg(self.ca_file())
            .args(["--request", method])
            .arg("--header")
            .arg(format!("Authorization: Bearer {token}"))
            .args(["--header", "Accept: application/json"])
            .args(["--write-out", "\n%{http_code}"])
            .arg(format!("{}{path}", self.url))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if body.is_some() {
            let content_type = match method {
                "PATCH" => "application/merge-patch+json",
                _ => "application/json",
            };
            command
                .arg("--header")
                .arg(format!("Content-Type: {content_type}"))
                .args(["--data-binary", "@-"]);
        }
        let mut child = command.spawn().map_err(|e| format!("run curl: {e}"))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        if let Some(body) = body {
            let data = serde_json::to_vec(body).expect("serialize request body");
            stdin
                .write_all(&data)
                .await
                .map_err(|e| format!("write request body to curl: {e}"))?;
        }
        drop(stdin);
        let output = tokio::time::timeout(REQUEST_TIMEOUT * 2, child.wait_with_output())
            .await
            .map_err(|_| "curl did not finish".to_string())?
            .map_err(|e| format!("wait for curl: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "curl failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let (text, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
        let status = code
            .trim()
            .parse()
            .map_err(|_| format!("curl printed no status code: {stdout}"))?;
        Ok((status, text.to_string()))
    }
}

/// The token file of `--token-auth-file`: `token,user,uid,group`.
fn write_token_file(file: &Path, node_name: &str) {
    let text = format!(
        "{ADMIN_TOKEN},{ADMIN_USER},{ADMIN_USER},system:masters\n\
         {NODE_TOKEN},system:node:{node_name},{node_name},system:nodes\n\
         {BOOTSTRAP_TOKEN},system:bootstrap:abcdef,abcdef,system:bootstrappers\n"
    );
    std::fs::write(file, text).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
}

/// An ECDSA P-256 key to sign and verify service-account tokens. Generated in
/// milliseconds, where RSA takes most of a second; in SEC 1 form because
/// `--service-account-key-file` reads EC private keys only in that form.
async fn generate_service_account_key(file: &Path) {
    let output = Command::new("openssl")
        .args([
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
        ])
        .arg(file)
        .output()
        .await
        .expect("run openssl");
    assert!(
        output.status.success(),
        "openssl ecparam -genkey failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Binds pod `name` of `pods` to node `node`, as the scheduler does;
/// returns when the binding was sent (a benchmark's start).
pub async fn bind(
    pods: &kube::Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
    node: &str,
) -> std::time::SystemTime {
    use k8s_openapi::api::core::v1::{Binding, ObjectReference};
    let binding = Binding {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            api_version: Some("v1".into()),
            ..Default::default()
        },
    };
    let sent = std::time::SystemTime::now();
    pods.create_subresource::<Binding, Value>(
        "binding",
        name,
        &kube::api::PostParams::default(),
        &binding,
    )
    .await
    .expect("bind the pod");
    sent
}
