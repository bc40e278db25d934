//! CSI end to end with separate processes: `example-csi-driver` (or a
//! grpcio driver) + `nodeplugins-csi-registrar` registering with
//! `nodeplugins run`.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{agent, signal};

use std::path::{Path, PathBuf};

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

struct Node {
    root: tempfile::TempDir,
    _agent: ChildProcess,
}

impl Node {
    async fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        let agent = agent(root.path());
        let node = Self {
            root,
            _agent: agent,
        };
        eventually("agent answering", TIMEOUT, || node.status()).await;
        node
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    async fn status(&self) -> Option<serde_json::Value> {
        let output = Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
            .args(["status", "-o", "json", "--root-dir"])
            .arg(self.root.path())
            .output()
            .await
            .unwrap();
        output
            .status
            .success()
            .then(|| serde_json::from_slice(&output.stdout).unwrap())
    }

    /// The driver once its registration finished (NodeGetInfo answered).
    async fn csi_driver(&self, name: &str) -> serde_json::Value {
        eventually(&format!("CSI driver {name}"), TIMEOUT, || async {
            let status = self.status().await?;
            status["csi_drivers"]
                .as_array()?
                .iter()
                .find(|d| d["name"] == name && d["node_id"] != "")
                .cloned()
        })
        .await
    }

    async fn no_csi_driver(&self, name: &str) {
        eventually(&format!("CSI driver {name} gone"), TIMEOUT, || async {
            let status = self.status().await?;
            (!status["csi_drivers"]
                .as_array()?
                .iter()
                .any(|d| d["name"] == name))
            .then_some(())
        })
        .await;
    }

    fn registrar(
        &self,
        csi_socket: &Path,
        registration_dir: &str,
        http: Option<&str>,
    ) -> ChildProcess {
        std::fs::create_dir_all(self.path(registration_dir)).unwrap();
        let mut command = Command::new(binary("nodeplugins-sdk-bins", "nodeplugins-csi-registrar"));
        command
            .arg(format!("--csi-address={}", csi_socket.display()))
            .arg(format!(
                "--kubelet-registration-path={}",
                csi_socket.display()
            ))
            .arg(format!(
                "--plugin-registration-path={}",
                self.path(registration_dir).display()
            ))
            .arg("--timeout=2s");
        if let Some(http) = http {
            command.arg(format!("--http-endpoint={http}"));
        }
        ChildProcess::spawn("nodeplugins-csi-registrar", command)
    }

    fn example_driver(&self, socket: &Path, node_id: &str) -> ChildProcess {
        let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-csi-driver"));
        command
            .arg(format!("--endpoint=unix://{}", socket.display()))
            .arg(format!("--node-id={node_id}"));
        ChildProcess::spawn("example-csi-driver", command)
    }
}

async fn healthz(addr: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, response))
}

fn free_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn example_driver_and_registrar_register_deregister_on_sigterm_and_recover_from_sigkill() {
    let node = Node::start().await;
    let csi_socket = node.path("plugins/csi.example.com/csi.sock");
    let _driver = node.example_driver(&csi_socket, "node-a");
    let http = free_port();
    let mut registrar = node.registrar(&csi_socket, "plugins_registry", Some(&http));

    let driver = node.csi_driver("csi.example.com").await;
    assert_eq!(driver["node_id"], "node-a");
    assert_eq!(driver["max_volumes_per_node"], 8);
    assert_eq!(
        driver["accessible_topology"]["topology.csi.example.com/zone"],
        "zone-a"
    );
    assert_eq!(driver["endpoint"], csi_socket.to_str().unwrap());
    let (code, body) = eventually("healthz 200", TIMEOUT, || async {
        healthz(&http).await.filter(|(code, _)| *code == 200)
    })
    .await;
    assert_eq!(code, 200, "{body}");

    // SIGTERM: the registrar removes its socket and the agent deregisters the driver.
    let reg_socket = node.path("plugins_registry/csi.example.com-reg.sock");
    assert!(reg_socket.exists());
    signal(&registrar, "-TERM").await;
    assert_eq!(registrar.wait(TIMEOUT).await, Some(0));
    assert!(!reg_socket.exists());
    node.no_csi_driver("csi.example.com").await;

    // SIGKILL leaves a stale socket; a restarted registrar replaces it and registers again.
    let first = node.registrar(&csi_socket, "plugins_registry", None);
    node.csi_driver("csi.example.com").await;
    signal(&first, "-KILL").await;
    drop(first);
    assert!(reg_socket.exists(), "SIGKILL leaves the socket behind");
    let _again = node.registrar(&csi_socket, "plugins_registry", None);
    eventually("re-registration", TIMEOUT, || async {
        let status = node.status().await?;
        status["plugins"]
            .as_array()?
            .iter()
            .any(|p| {
                p["socket_path"] == reg_socket.to_str().unwrap()
                    && p["state"] == "registered"
                    && p["generation"].as_u64().is_some_and(|g| g > 1)
            })
            .then_some(())
    })
    .await;
    node.csi_driver("csi.example.com").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn registrar_waits_for_a_driver_that_starts_late() {
    let node = Node::start().await;
    let csi_socket = node.path("plugins/late/csi.sock");
    let http = free_port();
    let _registrar = node.registrar(&csi_socket, "plugins_registry", Some(&http));
    let (code, body) = eventually("healthz answering", TIMEOUT, || healthz(&http)).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("waiting for the CSI driver"), "{body}");
    let _driver = node.example_driver(&csi_socket, "node-late");
    assert_eq!(
        node.csi_driver("csi.example.com").await["node_id"],
        "node-late"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_registrar_exits_with_status_one() {
    let node = Node::start().await;
    let first_socket = node.path("plugins/one/csi.sock");
    let second_socket = node.path("plugins/two/csi.sock");
    let _d1 = node.example_driver(&first_socket, "n1");
    let _d2 = node.example_driver(&second_socket, "n2");
    let _r1 = node.registrar(&first_socket, "plugins_registry", None);
    node.csi_driver("csi.example.com").await;
    // Same driver name and version from another socket: upstream's rules reject it.
    let mut r2 = node.registrar(&second_socket, "plugins_registry/second", None);
    assert_eq!(r2.wait(TIMEOUT).await, Some(1));
    assert_eq!(node.csi_driver("csi.example.com").await["node_id"], "n1");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grpcio_csi_driver_registers_through_our_registrar() {
    let node = Node::start().await;
    let csi_socket = node.path("plugins/py/csi.sock");
    std::fs::create_dir_all(csi_socket.parent().unwrap()).unwrap();
    let mut command = python_env().script("csi_driver.py");
    command.arg(&csi_socket);
    let mut driver = ChildProcess::spawn("csi_driver.py", command);
    driver.wait_for_line(TIMEOUT, |l| l == "READY").await;
    let _registrar = node.registrar(&csi_socket, "plugins_registry", None);
    let registered = node.csi_driver("py-csi.example.com").await;
    assert_eq!(registered["node_id"], "py-node");
    assert_eq!(registered["max_volumes_per_node"], 3);
    assert_eq!(
        registered["accessible_topology"]["topology.py.example.com/rack"],
        "r7"
    );
    driver.wait_for_line(TIMEOUT, |l| l == "NODEGETINFO").await;
}

/// Runs the registrar the way a liveness probe does: `exec` of the
/// container's registrar with the probe's args; its exit code.
async fn probe(kubelet_registration_path: &Path) -> Option<i32> {
    Command::new(binary("nodeplugins-sdk-bins", "nodeplugins-csi-registrar"))
        .arg(format!(
            "--kubelet-registration-path={}",
            kubelet_registration_path.display()
        ))
        .arg("--mode=kubelet-registration-probe")
        .output()
        .await
        .unwrap()
        .status
        .code()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_driver_registrar_daemonsets_args_and_liveness_probe_work_unchanged() {
    let node = Node::start().await;
    let csi_socket = node.path("plugins/csi.example.com/csi.sock");
    std::fs::create_dir_all(node.path("plugins_registry")).unwrap();
    let port = free_port();
    let port = port.rsplit(':').next().unwrap();
    // A CSI driver DaemonSet's registrar container, its args as written
    // for node-driver-registrar v2.17: Go's single-dash spellings, the
    // deprecated health port and connection timeout, Go durations.
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "nodeplugins-csi-registrar"));
    command
        .arg("-v=5")
        .arg(format!("-csi-address={}", csi_socket.display()))
        .arg(format!(
            "--kubelet-registration-path={}",
            csi_socket.display()
        ))
        .arg(format!(
            "--plugin-registration-path={}",
            node.path("plugins_registry").display()
        ))
        .arg(format!("--health-port={port}"))
        .arg("--timeout=1m30s")
        .arg("--connection-timeout=15s")
        .arg("--enable-pprof")
        .arg("--logging-format=json")
        .arg("--mode=registration");
    let mut registrar = ChildProcess::spawn("nodeplugins-csi-registrar", command);
    let health = format!("127.0.0.1:{port}");
    let (code, body) = eventually("healthz answering", TIMEOUT, || healthz(&health)).await;
    assert_eq!(code, 503, "no driver yet: {body}");
    assert_eq!(probe(&csi_socket).await, Some(1), "not registered yet");

    let _driver = node.example_driver(&csi_socket, "node-a");
    node.csi_driver("csi.example.com").await;
    eventually("the probe passing", TIMEOUT, || async {
        (probe(&csi_socket).await == Some(0)).then_some(())
    })
    .await;

    signal(&registrar, "-TERM").await;
    assert_eq!(registrar.wait(TIMEOUT).await, Some(0));
    assert_eq!(
        probe(&csi_socket).await,
        Some(1),
        "stopped: no longer registered"
    );
    node.no_csi_driver("csi.example.com").await;
}
