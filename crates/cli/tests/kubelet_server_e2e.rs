//! The kubelet's API served by the agent (`--kubelet-server`), reached the
//! way a cluster reaches it: `kubectl` (built from the Kubernetes module)
//! through a real API server, which dials the node at the address and port
//! the agent registered in its Node, authenticated by the API server's
//! kubelet client certificate and authorized through SubjectAccessReview.
//! The pods run on a real containerd, whose CRI streaming server the agent
//! hands exec, attach and port-forward to:
//!
//! - `kubectl logs` with `--tail`, `--timestamps`, `--limit-bytes`, `-f`
//!   (lines written after the request came) and `--previous` (the last
//!   instance's log after a restart);
//! - `kubectl exec` (the command's output, error and exit code; standard
//!   input), `kubectl attach` to a container reading its stdin, and
//!   `kubectl port-forward` to a port a container listens on;
//! - the port itself refuses an anonymous client (401) and a client
//!   certificate without the right (403, naming what was asked), and
//!   serves `/healthz` and `/pods` to the API server's certificate.
//!
//! And the oracle: the real kubelet v1.37.2 serving its API with the same
//! settings on a node of the same API server, the same pod on both. Both
//! ports give the same answers (status and body) to the same requests of
//! an anonymous client, of a certificate without rights and of the API
//! server's (refusals, unknown paths, missing pods and containers,
//! invalid log options, streaming requests without an upgrade, `/run`,
//! a log's tail), and `kubectl logs` and `kubectl exec` print the same.
//! The metrics server (v0.8.0) scrapes both ports' `/metrics/resource`:
//! `kubectl top pod` shows the pod on either node, `kubectl top node` both
//! nodes, and the metrics API has the same shape for both pods.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::kube::publishing_agent_as;
use common::two_nodes::without_ids;
use nodeplugins_test_support::client_certificates::ClientCa;
use nodeplugins_test_support::containerd::Containerd;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::metrics_server::MetricsServer;
use nodeplugins_test_support::oci_image::BUSYBOX;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::real_kubelet::{RealKubelet, Serving, kubelet_configuration};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

const NODE: &str = "node-ks";
/// The user of the API server's kubelet client certificate.
const API_SERVER_USER: &str = "kube-apiserver-kubelet-client";
/// Long enough for a first image unpack and a crash-loop back-off of 10 s.
const LONG: Duration = Duration::from_secs(120);

/// A port nothing listens on now.
fn free_port() -> u16 {
    let [port] = free_ports();
    port
}

/// `N` distinct ports nothing listens on now (all held while they are
/// picked, so that none is handed out twice).
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<_> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

/// A busybox container running `script`.
fn busybox(name: &str, script: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    })
}

/// A host-network pod bound to [`NODE`] (no scheduler: the node is named).
fn pod(name: &str, containers: Vec<Value>) -> Value {
    common::pods::bound_pod(NODE, name, containers)
}

async fn pod_when(api: &KubeApi, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    pod_in_when(api, "default", name, what, pred).await
}

async fn pod_in_when(
    api: &KubeApi,
    namespace: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
    eventually(&format!("pod {namespace}/{name} {what}"), LONG, || async {
        let pod = api.admin("GET", &path, None).await;
        pred(&pod).then_some(pod)
    })
    .await
}

fn all_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|all| all.iter().all(|c| c["state"]["running"].is_object()))
}

/// `curl` to the kubelet port (its certificate is the agent's own
/// self-signed one), as client certificate `cert` if given: the status
/// and the body.
async fn kubelet_get(port: u16, path: &str, cert: Option<&Path>) -> (u16, String) {
    kubelet_request(port, "GET", path, cert).await
}

/// [`kubelet_get`] with method `method`.
async fn kubelet_request(
    port: u16,
    method: &str,
    path: &str,
    cert: Option<&Path>,
) -> (u16, String) {
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--show-error", "--insecure", "--max-time", "10"])
        .args(["--request", method])
        .args(["--write-out", "\n%{http_code}"]);
    if let Some(cert) = cert {
        command.arg("--cert").arg(cert).arg("--key").arg(cert);
    }
    let output = command
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "curl {path}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

/// `curl` to a read-only port (plain HTTP, no credentials) with method
/// `method`: the status, the body and the content type.
async fn plain_request(port: u16, method: &str, path: &str) -> (u16, String, String) {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(["--request", method])
        .args(["--write-out", "\n%{content_type}\n%{http_code}"])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "curl {path}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let (rest, code) = text.rsplit_once('\n').unwrap();
    let (body, content_type) = rest.rsplit_once('\n').unwrap();
    (
        code.parse().unwrap(),
        body.to_string(),
        content_type.to_string(),
    )
}

/// The tick number of a `tick N` line.
fn tick(line: &str) -> u64 {
    line.strip_prefix("tick ")
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("not a tick line: {line:?}"))
}

/// The certificates of a test: the CA the kubelet port trusts, the API
/// server's client certificate (bound to `system:kubelet-api-admin`) and
/// a stranger's (no rights), each with its key in one file.
struct Certs {
    ca_file: std::path::PathBuf,
    api_server: std::path::PathBuf,
    stranger: std::path::PathBuf,
    _dir: TempDir,
}

/// An API server that reaches kubelets at their InternalIP with its
/// kubelet client certificate (of [`Certs`]), the certificate's user
/// allowed the kubelet API, and the default ServiceAccount.
async fn api_with_kubelet_client(node: &str) -> (KubeApi, Certs) {
    let dir = tempfile::tempdir().unwrap();
    let kubelet_ca = ClientCa::new();
    let ca_file = dir.path().join("kubelet-client-ca.crt");
    kubelet_ca.write(&ca_file);
    let day = Duration::from_secs(24 * 3600);
    let api_server = dir.path().join("apiserver-kubelet-client.pem");
    kubelet_ca.issue(API_SERVER_USER, "", day, &api_server);
    let stranger = dir.path().join("stranger.pem");
    kubelet_ca.issue("stranger", "", day, &stranger);
    let cert_flag = |flag: &str| format!("--{flag}={}", api_server.display());
    let api = KubeApi::start_with(
        node,
        &[
            &cert_flag("kubelet-client-certificate"),
            &cert_flag("kubelet-client-key"),
            "--kubelet-preferred-address-types=InternalIP",
        ],
    )
    .await;
    api.ensure_default_service_account("default").await;
    api.admin(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        Some(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "apiserver-kubelet-api-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:kubelet-api-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": API_SERVER_USER}],
        })),
    )
    .await;
    let certs = Certs {
        ca_file,
        api_server,
        stranger,
        _dir: dir,
    };
    (api, certs)
}

/// The agent for node `node` on `containerd`, registering its Node at
/// 127.0.0.1 and serving the kubelet's API on `port` to certificates of
/// `ca_file`; its root goes with it.
fn serving_agent(
    api: &KubeApi,
    node: &str,
    containerd: &Containerd,
    port: u16,
    ca_file: &Path,
) -> (ChildProcess, TempDir) {
    let root = tempfile::tempdir().unwrap();
    let logs = root.path().join("pod-logs");
    let listen = format!("127.0.0.1:{port}");
    let endpoint = containerd.endpoint();
    let agent = publishing_agent_as(
        &api.node_kubeconfig(),
        node,
        root.path(),
        &[
            "--register-node",
            "on",
            "--node-ip",
            "127.0.0.1",
            "--container-runtime-endpoint",
            &endpoint,
            "--pod-logs-dir",
            logs.to_str().unwrap(),
            "--kubelet-server",
            &listen,
            "--client-ca-file",
            ca_file.to_str().unwrap(),
        ],
    );
    (agent, root)
}

/// `nodeplugins kubelet` for node `node` with the real kubelet's command
/// line and configuration shape, its API served as `serving` says.
fn agent_as_kubelet(
    api: &KubeApi,
    node: &str,
    containerd: &Containerd,
    serving: &Serving,
) -> (ChildProcess, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        kubelet_configuration(dir.path(), &containerd.endpoint(), Some(serving)),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
    command
        .arg("kubelet")
        .arg("--config")
        .arg(&config)
        .arg("--kubeconfig")
        .arg(api.node_kubeconfig())
        .arg("--root-dir")
        .arg(dir.path().join("root"))
        .arg("--cert-dir")
        .arg(dir.path().join("pki"))
        .args(["--hostname-override", node, "--v", "2"])
        .env("RUST_LOG", "info");
    (ChildProcess::spawn("nodeplugins kubelet", command), dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_reaches_the_pods_of_the_agents_node_and_the_port_refuses_who_it_must() {
    nodeplugins_test_support::init_tracing();
    let (api, certs) = api_with_kubelet_client(NODE).await;
    let Certs {
        ca_file,
        api_server: api_server_cert,
        stranger: stranger_cert,
        ..
    } = &certs;
    let containerd = Containerd::start().await;
    let kubelet_port = free_port();
    let (_agent, _root) = serving_agent(&api, NODE, &containerd, kubelet_port, ca_file);
    // The API server finds the kubelet's port in the Node the agent made.
    eventually("the Node names the kubelet's port", TIMEOUT, || async {
        let answer = api
            .request(
                Identity::Admin,
                "GET",
                &format!("/api/v1/nodes/{NODE}"),
                None,
            )
            .await;
        (answer.body["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == kubelet_port)
            .then_some(())
    })
    .await;

    // The port refuses who it must, before anything else is asked of it.
    assert_eq!(
        kubelet_get(kubelet_port, "/pods", None).await,
        (401, "Unauthorized".to_string()),
        "anonymous access is off by default"
    );
    assert_eq!(
        kubelet_get(kubelet_port, "/healthz", None).await.0,
        401,
        "every path needs authentication"
    );
    assert_eq!(
        kubelet_get(kubelet_port, "/pods", Some(stranger_cert)).await,
        (
            403,
            "Forbidden (user=stranger, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
                .to_string()
        )
    );
    assert_eq!(
        kubelet_get(kubelet_port, "/healthz", Some(api_server_cert)).await,
        (200, "ok".to_string())
    );

    let http_port = free_port();
    let talker = pod(
        "talker",
        vec![
            busybox(
                "main",
                &format!(
                    "echo zero >&2; sleep 0.5; echo one; echo two; mkdir -p /tmp/www; \
                     echo served > /tmp/www/index.html; \
                     exec httpd -f -p 127.0.0.1:{http_port} -h /tmp/www"
                ),
            ),
            busybox(
                "ticker",
                "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done",
            ),
            {
                let mut reader = busybox(
                    "reader",
                    "while read line; do echo got $line; done; exec sleep 3600",
                );
                reader["stdin"] = json!(true);
                reader
            },
        ],
    );
    let mut restarter = pod(
        "restarter",
        vec![busybox(
            "main",
            "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; \
             echo run $n; if [ $n = 1 ]; then exit 1; fi; exec sleep 3600",
        )],
    );
    restarter["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    restarter["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}]);
    for p in [&talker, &restarter] {
        api.admin("POST", "/api/v1/namespaces/default/pods", Some(p))
            .await;
    }
    pod_when(&api, "talker", "running", all_running).await;

    // The API server's /pods through the kubelet port lists the pod.
    let (status, body) = kubelet_get(kubelet_port, "/pods", Some(api_server_cert)).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == "talker"),
        "{list}"
    );

    // Logs: the whole log once both lines are in, its tail, its timestamps
    // and its first bytes.
    let whole = eventually("talker's main logged its lines", TIMEOUT, || async {
        let out = api.kubectl(&["logs", "talker", "-c", "main"], "").await;
        (out.code == Some(0) && out.stdout.ends_with("two\n")).then_some(out.stdout)
    })
    .await;
    assert_eq!(whole, "zero\none\ntwo\n");
    let tail = api
        .kubectl(&["logs", "talker", "-c", "main", "--tail=1"], "")
        .await;
    assert_eq!(tail.stdout, "two\n", "{}", tail.stderr);
    let stamped = api
        .kubectl(&["logs", "talker", "-c", "main", "--timestamps"], "")
        .await;
    let lines: Vec<&str> = stamped.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", stamped.stdout);
    for (line, text) in lines.iter().zip(["zero", "one", "two"]) {
        let (stamp, rest) = line.split_once(' ').unwrap();
        assert_eq!(rest, text);
        time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|e| panic!("timestamp {stamp:?}: {e}"));
    }
    let first = api
        .kubectl(&["logs", "talker", "-c", "main", "--limit-bytes=4"], "")
        .await;
    assert_eq!(first.stdout, "zero");

    // Following: lines the container writes after the request came.
    let last = api
        .kubectl(&["logs", "talker", "-c", "ticker", "--tail=1"], "")
        .await;
    let before = tick(last.stdout.trim());
    let mut follow = ChildProcess::spawn(
        "kubectl logs -f",
        api.kubectl_command(&["logs", "-f", "talker", "-c", "ticker", "--tail=1"]),
    );
    let later = follow
        .wait_for_line(TIMEOUT, |line| tick(line) >= before + 5)
        .await;
    let seen: Vec<u64> = follow.output().iter().map(|l| tick(l)).collect();
    assert!(
        seen.windows(2).all(|w| w[1] == w[0] + 1),
        "followed lines come in order, none lost: {seen:?} (until {later})"
    );
    follow.kill().await;

    // Exec: output, error and exit code; then standard input.
    let exec = api
        .kubectl(
            &[
                "exec",
                "talker",
                "-c",
                "main",
                "--",
                "sh",
                "-c",
                "echo out; echo err >&2; exit 3",
            ],
            "",
        )
        .await;
    assert_eq!(exec.stdout, "out\n");
    assert!(exec.stderr.contains("err\n"), "{}", exec.stderr);
    assert_eq!(
        exec.code,
        Some(3),
        "the command's exit code: {}",
        exec.stderr
    );
    let cat = api
        .kubectl(
            &["exec", "-i", "talker", "-c", "main", "--", "cat"],
            "hello\nworld\n",
        )
        .await;
    assert_eq!(cat.stdout, "hello\nworld\n", "{}", cat.stderr);
    assert_eq!(cat.code, Some(0), "{}", cat.stderr);

    // Attach: what is typed reaches the container's stdin, and its output
    // comes back.
    let mut attach = ChildProcess::spawn_with_stdin(
        "kubectl attach",
        api.kubectl_command(&["attach", "-i", "talker", "-c", "reader"]),
    );
    attach.send_line("ping").await;
    attach.wait_for_line(TIMEOUT, |l| l == "got ping").await;
    attach.kill().await;

    // Port-forward: a local port relays to the container's.
    let mut forward = ChildProcess::spawn(
        "kubectl port-forward",
        api.kubectl_command(&["port-forward", "pod/talker", &format!(":{http_port}")]),
    );
    let line = forward
        .wait_for_line(TIMEOUT, |l| l.starts_with("Forwarding from 127.0.0.1:"))
        .await;
    let local: u16 = line
        .strip_prefix("Forwarding from 127.0.0.1:")
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(port, _)| port.parse().ok())
        .unwrap_or_else(|| panic!("no local port in {line:?}"));
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", local))
        .await
        .unwrap();
    stream
        .write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_string(&mut response))
        .await
        .expect("the forwarded answer")
        .unwrap();
    assert!(response.starts_with("HTTP/1."), "{response}");
    assert!(response.ends_with("served\n"), "{response}");
    forward.kill().await;

    // Previous: the log of the instance before the restart.
    pod_when(&api, "restarter", "restarted once and running", |p| {
        let status = &p["status"]["containerStatuses"][0];
        status["restartCount"] == 1 && status["state"]["running"].is_object()
    })
    .await;
    let current = api.kubectl(&["logs", "restarter"], "").await;
    assert_eq!(current.stdout, "run 2\n", "{}", current.stderr);
    let previous = api.kubectl(&["logs", "restarter", "--previous"], "").await;
    assert_eq!(previous.stdout, "run 1\n", "{}", previous.stderr);
}

/// The node of the real kubelet in the oracle test, and ours.
const KUBELET_NODE: &str = "kubelet-node";
const OUR_NODE: &str = "agent-node";

/// Creates namespace `name` with its default ServiceAccount.
async fn namespace(api: &KubeApi, name: &str) {
    api.admin(
        "POST",
        "/api/v1/namespaces",
        Some(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
    )
    .await;
    api.ensure_default_service_account(name).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agents_kubelet_port_answers_as_the_real_kubelets_own() {
    nodeplugins_test_support::init_tracing();
    let (api, certs) = api_with_kubelet_client(OUR_NODE).await;
    let kubelet_containerd = Containerd::start().await;
    let [their_port, their_read_only, our_port, our_read_only] = free_ports();
    let serving = Serving {
        port: their_port,
        client_ca_file: certs.ca_file.clone(),
        read_only_port: their_read_only,
    };
    let kubelet_config = api.kubeconfig_of_node(KUBELET_NODE);
    let kubelet =
        RealKubelet::start_serving(KUBELET_NODE, &kubelet_config, &kubelet_containerd, &serving)
            .await;
    // The agent started as the kubelet is: its command line and a
    // configuration file of the same shape.
    let our_containerd = Containerd::start().await;
    let (_agent, _root) = agent_as_kubelet(
        &api,
        OUR_NODE,
        &our_containerd,
        &Serving {
            port: our_port,
            client_ca_file: certs.ca_file.clone(),
            read_only_port: our_read_only,
        },
    );

    // The same pod on both nodes, in a namespace of each: the same paths
    // but for the namespace.
    let script = "echo zero >&2; sleep 0.5; echo one; echo two; exec sleep 3600";
    for (ns, node) in [("theirs", KUBELET_NODE), ("ours", OUR_NODE)] {
        namespace(&api, ns).await;
        let mut main = busybox("main", script);
        main["readinessProbe"] = json!({"exec": {"command": ["true"]}, "periodSeconds": 1});
        let talker = common::pods::bound_pod(node, "talker", vec![main]);
        api.admin(
            "POST",
            &format!("/api/v1/namespaces/{ns}/pods"),
            Some(&talker),
        )
        .await;
    }
    for ns in ["theirs", "ours"] {
        pod_in_when(&api, ns, "talker", "running", all_running).await;
        pod_in_when(&api, ns, "talker", "ready", |p| {
            p["status"]["containerStatuses"][0]["ready"] == true
        })
        .await;
        eventually(
            &format!("{ns}/talker logged its lines"),
            TIMEOUT,
            || async {
                let out = api.kubectl(&["logs", "-n", ns, "talker"], "").await;
                out.stdout.ends_with("two\n").then_some(())
            },
        )
        .await;
    }
    let ports = [("theirs", their_port), ("ours", our_port)];
    for (ns, port) in ports {
        eventually(
            &format!("the kubelet port of {ns} answers"),
            TIMEOUT,
            || async {
                let (status, _) = kubelet_get(port, "/healthz", Some(&certs.api_server)).await;
                (status == 200).then_some(())
            },
        )
        .await;
    }

    // Who asks, how, and for what; `{ns}` is the pod's namespace.
    let api_server = Some(certs.api_server.as_path());
    let stranger = Some(certs.stranger.as_path());
    let requests: &[(&str, Option<&Path>, &str, &str)] = &[
        ("anonymous", None, "GET", "/pods"),
        ("anonymous", None, "GET", "/healthz"),
        ("anonymous", None, "GET", "/no/such/path"),
        ("anonymous", None, "GET", "/healthz/nothing"),
        ("anonymous", None, "GET", "/pods/"),
        ("anonymous", None, "GET", "/podsx"),
        ("anonymous", None, "GET", "/stats"),
        ("anonymous", None, "GET", "/metrics/slis"),
        ("anonymous", None, "GET", "/metrics/nothing"),
        ("anonymous", None, "GET", "/debug/pprof/"),
        ("anonymous", None, "GET", "/debug/flags/v"),
        ("anonymous", None, "GET", "/flagz"),
        ("anonymous", None, "GET", "/statusz"),
        ("anonymous", None, "GET", "/runningpods/"),
        ("anonymous", None, "GET", "/checkpoint/{ns}/talker/main"),
        ("anonymous", None, "GET", "/logs"),
        ("anonymous", None, "GET", "/cri/exec/x"),
        ("anonymous", None, "GET", "/stats?x=1"),
        ("anonymous", None, "POST", "/logs"),
        ("anonymous", None, "GET", "/debug/pprof"),
        ("anonymous", None, "GET", "/runningpods"),
        ("anonymous", None, "GET", "/checkpoint"),
        ("anonymous", None, "GET", "/containerLogs"),
        ("anonymous", None, "GET", "/exec"),
        ("anonymous", None, "GET", "/attach"),
        ("anonymous", None, "GET", "/portForward"),
        ("anonymous", None, "GET", "/run"),
        ("anonymous", None, "GET", "/configz/"),
        ("anonymous", None, "GET", "/metrics/"),
        (
            "anonymous",
            None,
            "POST",
            "/exec/{ns}/talker/main?command=ls",
        ),
        ("stranger", stranger, "GET", "/pods"),
        ("stranger", stranger, "GET", "/healthz"),
        ("stranger", stranger, "GET", "/stats/summary"),
        ("stranger", stranger, "GET", "/metrics/resource"),
        ("stranger", stranger, "GET", "/metrics"),
        ("stranger", stranger, "GET", "/logs/"),
        ("stranger", stranger, "GET", "/configz"),
        (
            "stranger",
            stranger,
            "GET",
            "/containerLogs/{ns}/talker/main",
        ),
        (
            "stranger",
            stranger,
            "POST",
            "/exec/{ns}/talker/main?command=ls",
        ),
        ("stranger", stranger, "PUT", "/run/{ns}/talker/main?cmd=ls"),
        ("api server", api_server, "GET", "/healthz"),
        ("api server", api_server, "GET", "/healthz/ping"),
        ("api server", api_server, "GET", "/no/such/path"),
        ("api server", api_server, "GET", "/pods/x"),
        ("api server", api_server, "POST", "/pods"),
        ("api server", api_server, "POST", "/healthz"),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/talker/main",
        ),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/talker/main?tailLines=1",
        ),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/talker/main?limitBytes=4",
        ),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/talker/main?tail=2",
        ),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/talker/main?tailLines=x",
        ),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/talker/main?sinceSeconds=0",
        ),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/talker/main?previous=true",
        ),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/talker/nope",
        ),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/missing/main",
        ),
        (
            "api server",
            api_server,
            "GET",
            "/containerLogs/{ns}/talker",
        ),
        (
            "api server",
            api_server,
            "POST",
            "/run/{ns}/talker/main?cmd=echo+ran",
        ),
        (
            "api server",
            api_server,
            "POST",
            "/run/{ns}/missing/main?cmd=ls",
        ),
        (
            "api server",
            api_server,
            "POST",
            "/exec/{ns}/talker/main?command=ls&output=1",
        ),
        (
            "api server",
            api_server,
            "POST",
            "/exec/{ns}/missing/main?command=ls&output=1",
        ),
        (
            "api server",
            api_server,
            "POST",
            "/attach/{ns}/talker/main?output=1",
        ),
        ("api server", api_server, "POST", "/portForward/{ns}/talker"),
    ];
    let mut differences = Vec::new();
    for (who, cert, method, path) in requests {
        let mut answers = Vec::new();
        for (ns, port) in ports {
            let path = path.replace("{ns}", ns);
            let (status, body) = kubelet_request(port, method, &path, *cert).await;
            // The namespace and the node are the only names that differ.
            let body = body
                .replace(ns, "{ns}")
                .replace(KUBELET_NODE, "{node}")
                .replace(OUR_NODE, "{node}");
            answers.push((status, body));
        }
        if answers[0] != answers[1] {
            differences.push(format!(
                "{who} {method} {path}:\n  kubelet: {:?}\n  ours:    {:?}",
                answers[0], answers[1]
            ));
        }
    }

    // `/metrics`: each one's own families, the runtime operations under
    // the kubelet's name in both.
    for (ns, port) in ports {
        let (status, body) = kubelet_request(port, "GET", "/metrics", api_server).await;
        if status != 200 || !body.contains("# TYPE kubelet_runtime_operations_total counter") {
            differences.push(format!("{ns} GET /metrics: {status}\n{body}"));
        }
    }

    // The read-only port: plain HTTP, nobody asked who they are, no
    // debugging handlers. `true`: the body is compared too.
    let read_only: &[(&str, &str, bool)] = &[
        ("GET", "/healthz", true),
        ("GET", "/healthz/ping", true),
        ("POST", "/healthz", true),
        ("GET", "/pods", false),
        ("POST", "/pods", true),
        ("GET", "/pods/x", true),
        ("GET", "/metrics/resource", false),
        ("GET", "/metrics", false),
        ("GET", "/stats", true),
        ("GET", "/exec", true),
        ("GET", "/logs", true),
        ("GET", "/exec/{ns}/talker/main?command=ls", true),
        ("POST", "/exec/{ns}/talker/main?command=ls", true),
        ("POST", "/run/{ns}/talker/main?cmd=ls", true),
        ("GET", "/containerLogs/{ns}/talker/main", true),
        ("POST", "/attach/{ns}/talker/main?output=1", true),
        ("POST", "/portForward/{ns}/talker", true),
        ("GET", "/logs/", true),
        ("GET", "/debug/pprof/", true),
        ("GET", "/runningpods/", true),
        ("GET", "/configz", true),
        ("GET", "/flagz", true),
        ("GET", "/statusz", true),
        ("GET", "/debug/flags/v", true),
        ("GET", "/checkpoint/{ns}/talker/main", true),
        ("GET", "/no/such/path", true),
    ];
    let read_only_ports = [("theirs", their_read_only), ("ours", our_read_only)];
    for (ns, port) in read_only_ports {
        eventually(
            &format!("the read-only port of {ns} answers"),
            TIMEOUT,
            || async { (plain_request(port, "GET", "/healthz").await.0 == 200).then_some(()) },
        )
        .await;
    }
    for (method, path, with_body) in read_only {
        let mut answers = Vec::new();
        for (ns, port) in read_only_ports {
            let path = path.replace("{ns}", ns);
            let (status, body, content_type) = plain_request(port, method, &path).await;
            let body = if *with_body {
                body.replace(ns, "{ns}")
            } else {
                String::new()
            };
            answers.push((status, body, content_type));
        }
        if answers[0] != answers[1] {
            differences.push(format!(
                "read-only port {method} {path}:\n  kubelet: {:?}\n  ours:    {:?}",
                answers[0], answers[1]
            ));
        }
    }

    // kubectl prints the same for the same pod on either node.
    let commands: &[&[&str]] = &[
        &["logs", "talker"],
        &["logs", "talker", "--tail=1"],
        &["logs", "talker", "--limit-bytes=6"],
        &["logs", "talker", "--since=1h"],
        &["logs", "talker", "--previous"],
        &["logs", "talker", "-c", "nope"],
        &[
            "exec",
            "talker",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        &["exec", "talker", "--", "no-such-command"],
    ];
    for command in commands {
        let mut outputs = Vec::new();
        for (ns, _) in ports {
            let mut args = vec!["-n", ns];
            args.extend_from_slice(command);
            let out = api.kubectl(&args, "").await;
            // The namespace differs, and the runtime's ids.
            let clean = |text: &str| without_ids(&text.replace(ns, "{ns}"));
            outputs.push((out.code, clean(&out.stdout), clean(&out.stderr)));
        }
        if outputs[0] != outputs[1] {
            differences.push(format!(
                "kubectl {}:\n  kubelet: {:?}\n  ours:    {:?}",
                command.join(" "),
                outputs[0],
                outputs[1]
            ));
        }
    }
    // The probes' metrics: the same families and series for the talker's
    // readiness probe.
    let mut shapes = Vec::new();
    for (ns, port) in ports {
        let talker = api
            .admin("GET", &format!("/api/v1/namespaces/{ns}/pods/talker"), None)
            .await;
        let uid = talker["metadata"]["uid"].as_str().unwrap_or_default();
        let (status, body) = kubelet_get(port, "/metrics/probes", api_server).await;
        assert_eq!(status, 200, "{ns}: {body}");
        let shape: std::collections::BTreeSet<String> =
            metric_shape(&body.replace(uid, "the-uid"), ns)
                .into_iter()
                .filter(|line| line.contains("prober_"))
                .collect();
        assert!(!shape.is_empty(), "{ns}: no probe metrics in {body}");
        shapes.push(shape);
    }
    if shapes[0] != shapes[1] {
        differences.push(format!(
            "/metrics/probes:\n  kubelet: {:#?}\n  ours:    {:#?}",
            shapes[0], shapes[1]
        ));
    }
    // The resource metrics: the same families, with the same help and
    // type, and the same labels on their samples, each with a timestamp
    // where the kubelet gives one. But for the containers' and pods' swap:
    // the kubelet's cAdvisor reads it from their cgroups, where the agent
    // asks the runtime, and containerd measures no swap through the CRI.
    let mut shapes = Vec::new();
    for (ns, port) in ports {
        let (status, body) = kubelet_get(port, "/metrics/resource", api_server).await;
        assert_eq!(status, 200, "{ns}: {body}");
        let mut shape = metric_shape(&body, ns);
        shape.retain(|line| !line.contains("container_swap_") && !line.contains("pod_swap_"));
        shapes.push(shape);
    }
    if shapes[0] != shapes[1] {
        differences.push(format!(
            "/metrics/resource:\n  kubelet: {:#?}\n  ours:    {:#?}",
            shapes[0], shapes[1]
        ));
    }
    // The consumer of those metrics: the metrics server scrapes both ports
    // and `kubectl top` shows either pod and both nodes; the metrics API
    // gives the same shape for the same pod on either node.
    let metrics = MetricsServer::start(&api, &certs.api_server).await;
    let mut shapes = Vec::new();
    for (ns, _) in ports {
        let top = [
            "top",
            "pod",
            "-n",
            ns,
            "talker",
            "--containers",
            "--no-headers",
        ];
        let out = kubectl_until(&api, &metrics, &top, |out| out.starts_with("talker ")).await;
        let columns: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(
            columns.len(),
            4,
            "{ns}: kubectl top pod --containers: {out:?}"
        );
        assert_eq!(columns[1], "main", "{ns}: {out:?}");
        let path = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods/talker");
        let pod = api.admin("GET", &path, None).await;
        shapes.push(pod_metrics_shape(&pod));
    }
    if shapes[0] != shapes[1] {
        differences.push(format!(
            "PodMetrics:\n  kubelet: {:?}\n  ours:    {:?}",
            shapes[0], shapes[1]
        ));
    }
    let top = ["top", "node", "--no-headers"];
    let both = |out: &str| {
        [KUBELET_NODE, OUR_NODE].iter().all(|node| {
            out.lines()
                .any(|line| line.starts_with(&format!("{node} ")))
        })
    };
    kubectl_until(&api, &metrics, &top, both).await;
    assert!(
        differences.is_empty(),
        "{} answers differ:\n{}\n(the kubelet's log: {})",
        differences.len(),
        differences.join("\n"),
        kubelet
            .log()
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The shape of a Prometheus text answer: its `# HELP` and `# TYPE` lines
/// as they are, and of each sample its name, its labels (namespace `ns`
/// written `{ns}`) and whether it has a timestamp; values left out.
fn metric_shape(text: &str, ns: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .map(|line| {
            if line.starts_with('#') {
                return line.to_string();
            }
            let (series, rest) = match line.split_once('}') {
                Some((series, rest)) => (format!("{series}}}"), rest.trim()),
                None => line
                    .split_once(' ')
                    .map_or((line.to_string(), ""), |(s, r)| (s.to_string(), r)),
            };
            let stamped = rest.split(' ').count() == 2;
            format!(
                "{} timestamp={stamped}",
                series.replace(&format!("\"{ns}\""), "\"{ns}\"")
            )
        })
        .collect()
}

/// Runs `kubectl args` until it succeeds with an output `ready` accepts,
/// and returns that output; fails with the last output and the metrics
/// server's log when none does in time.
async fn kubectl_until(
    api: &KubeApi,
    metrics: &MetricsServer,
    args: &[&str],
    ready: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let out = api.kubectl(args, "").await;
        if out.code == Some(0) && ready(&out.stdout) {
            return out.stdout;
        }
        if tokio::time::Instant::now() >= deadline {
            let log = metrics.log();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            panic!(
                "kubectl {}: {:?} {:?} {:?}\nthe metrics server's log, newest first:\n{}",
                args.join(" "),
                out.code,
                out.stdout,
                out.stderr,
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What of a PodMetrics object does not depend on the node or the moment:
/// its containers' names with the resources of their usage, and whether
/// its window is positive.
fn pod_metrics_shape(pod: &Value) -> (Vec<(String, Vec<String>)>, bool) {
    let containers = pod["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let name = c["name"].as_str().unwrap_or_default().to_string();
            let mut usage: Vec<String> = c["usage"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .collect();
            usage.sort();
            (name, usage)
        })
        .collect();
    let window = pod["window"].as_str().unwrap_or_default();
    (containers, !window.is_empty() && window != "0s")
}
