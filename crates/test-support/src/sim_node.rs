//! Simulated nodes for measuring the API's cost of many nodes on one
//! machine: each an agent (`nodeplugins run`) with its own root and node
//! name and its node's own credentials (a client certificate of
//! `system:node:<name>`, so the Node authorizer judges it as a kubelet),
//! the example device plugin, the example CSI driver behind the CSI
//! registrar, and the example DRA driver, all against one [`KubeApi`].

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;
use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::binaries::binary;
use crate::kube_api::KubeApi;
use crate::process::ChildProcess;

/// The device plugin's resource on every simulated node.
pub const RESOURCE: &str = "example.com/device";
/// The CSI driver on every simulated node.
pub const CSI_DRIVER: &str = "csi.example.com";
/// The DRA driver on every simulated node; its pool is named after the node.
pub const DRA_DRIVER: &str = "dra.example.com";
/// Devices of the device plugin, and GPUs of the DRA driver, per node.
pub const DEVICES: usize = 4;
/// What simulated nodes read and write (the API server's own informers
/// watch other resources too).
pub const NODE_RESOURCES: &[&str] = &[
    "nodes",
    "csinodes",
    "resourceslices",
    "pods",
    "resourceclaims",
    "events",
    "selfsubjectreviews",
];

/// Builds (if need be) every program a simulated node runs, so that the
/// first node does not start late.
pub fn build_programs() {
    for program in [
        "example-dra-driver",
        "example-device-plugin",
        "example-csi-driver",
        "nodeplugins-csi-registrar",
    ] {
        binary("nodeplugins-sdk-bins", program);
    }
    binary("nodeplugins-cli", "nodeplugins");
}

/// One simulated node: its agent and plugins, killed on drop.
pub struct SimNode {
    name: String,
    kubeconfig: PathBuf,
    _agent: ChildProcess,
    device_plugin: Child,
    /// The CSI driver and its registrar.
    csi: (Child, Child),
    dra_driver: Child,
    /// Last: removed once the processes using them are killed.
    root: TempDir,
    /// The plugins' logs.
    logs: TempDir,
}

/// `program` with its log (stderr) written to `<logs>/<program>.log`,
/// read back by [`SimNode::logs`] when a test fails.
fn logged_command(logs: &Path, program: &str) -> Command {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("{program}.log")))
        .unwrap();
    let mut command = Command::new(binary("nodeplugins-sdk-bins", program));
    command.stdout(Stdio::null()).stderr(log).kill_on_drop(true);
    command
}

fn dra_driver(root: &Path, logs: &Path, node: &str, kubeconfig: &Path) -> Child {
    let mut command = logged_command(logs, "example-dra-driver");
    command
        .arg("--root-dir")
        .arg(root)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--node-name", node, "--log-level", "warn"])
        .args(["--devices", &DEVICES.to_string()])
        .arg("--cdi-dir")
        .arg(root.join("cdi"));
    command.spawn().unwrap()
}

impl SimNode {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agent's root directory.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Starts node `sim-<index>` (two digits); its Node must exist.
    pub fn start(api: &KubeApi, index: usize) -> Self {
        let name = format!("sim-{index:02}");
        let root = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let kubeconfig = api.kubeconfig_of_node(&name);
        let mut agent = Command::new(binary("nodeplugins-cli", "nodeplugins"));
        agent
            .args(["run", "--metrics-addr", "off", "--log-level", "warn"])
            .arg("--root-dir")
            .arg(root.path())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--container-runtime-endpoint", "simulated"])
            .args(["--node-name", &name]);
        let agent = ChildProcess::spawn("nodeplugins run", agent);

        let mut device = logged_command(logs.path(), "example-device-plugin");
        device
            .arg("--root-dir")
            .arg(root.path())
            .args(["--resource", RESOURCE, "--devices", &DEVICES.to_string()])
            .args(["--log-level", "info"]);

        let socket = root.path().join(format!("plugins/{CSI_DRIVER}/csi.sock"));
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        std::fs::create_dir_all(root.path().join("plugins_registry")).unwrap();
        let mut csi = logged_command(logs.path(), "example-csi-driver");
        csi.arg(format!("--endpoint=unix://{}", socket.display()))
            .arg(format!("--node-id=id-{name}"))
            .arg(format!("--driver-name={CSI_DRIVER}"))
            .args(["--max-volumes", "8", "--zone", "zone-a"]);
        let mut registrar = logged_command(logs.path(), "nodeplugins-csi-registrar");
        registrar
            .arg(format!("--csi-address={}", socket.display()))
            .arg(format!("--kubelet-registration-path={}", socket.display()))
            .arg(format!(
                "--plugin-registration-path={}",
                root.path().join("plugins_registry").display()
            ));

        let dra = dra_driver(root.path(), logs.path(), &name, &kubeconfig);
        Self {
            name,
            kubeconfig,
            _agent: agent,
            device_plugin: device.spawn().unwrap(),
            csi: (csi.spawn().unwrap(), registrar.spawn().unwrap()),
            dra_driver: dra,
            root,
            logs,
        }
    }

    /// The agent's own account of itself (`nodeplugins status`), for a
    /// test that failed to say why a node shows less than it should.
    pub async fn agent_status(&self) -> String {
        let output = Command::new(binary("nodeplugins-cli", "nodeplugins"))
            .arg("status")
            .arg("--root-dir")
            .arg(self.root.path())
            .output()
            .await;
        match output {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("nodeplugins status: {e}"),
        }
    }

    /// The plugins' logs, and whether each is still running, for a test
    /// that failed to say why a node shows less than it should.
    pub fn logs(&mut self) -> String {
        let mut said = String::new();
        let (csi, registrar) = &mut self.csi;
        for (program, child) in [
            ("example-device-plugin", &mut self.device_plugin),
            ("example-csi-driver", csi),
            ("nodeplugins-csi-registrar", registrar),
            ("example-dra-driver", &mut self.dra_driver),
        ] {
            let state = match child.try_wait() {
                Ok(Some(status)) => format!("exited: {status}"),
                Ok(None) => "running".to_string(),
                Err(e) => e.to_string(),
            };
            said += &format!("{program}: {state}\n");
        }
        let mut entries: Vec<_> = std::fs::read_dir(self.logs.path())
            .map(|dir| dir.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        entries.sort();
        for path in entries {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            said += &format!("- {}\n{text}", path.display());
        }
        said
    }

    /// Sends `signal` to the device plugin: `-USR1` makes a device
    /// unhealthy, `-USR2` every device healthy again.
    pub async fn signal_device_plugin(&self, signal: &str) {
        let pid = self.device_plugin.id().unwrap();
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }

    /// Stops the DRA driver (SIGTERM, as a pod is stopped) and starts it
    /// again.
    pub async fn restart_dra_driver(&mut self) {
        let pid = self.dra_driver.id().unwrap();
        Command::new("kill")
            .arg(pid.to_string())
            .status()
            .await
            .unwrap();
        let _ = self.dra_driver.wait().await;
        self.dra_driver = dra_driver(
            self.root.path(),
            self.logs.path(),
            &self.name,
            &self.kubeconfig,
        );
    }
}

/// Whether every node shows `allocatable` of the device resource, its CSI
/// driver, and its DRA driver's slice: three lists, as the admin.
pub async fn cluster_shows(api: &KubeApi, nodes: &[SimNode], allocatable: usize) -> bool {
    cluster_lacks(api, nodes, allocatable).await.is_empty()
}

/// What the cluster does not show yet, one line per node and object
/// ("sim-03: allocatable"): empty once [`cluster_shows`].
pub async fn cluster_lacks(api: &KubeApi, nodes: &[SimNode], allocatable: usize) -> Vec<String> {
    let listed = api.admin("GET", "/api/v1/nodes", None).await;
    let csinodes = api
        .admin("GET", "/apis/storage.k8s.io/v1/csinodes", None)
        .await;
    let slices = api
        .admin("GET", "/apis/resource.k8s.io/v1/resourceslices", None)
        .await;
    let items = |list: &Value| list["items"].as_array().cloned().unwrap_or_default();
    let mut lacks = Vec::new();
    for node in nodes {
        let shown = items(&listed).iter().any(|n| {
            n["metadata"]["name"] == node.name.as_str()
                && n["status"]["allocatable"][RESOURCE] == allocatable.to_string().as_str()
        });
        let csi = items(&csinodes).iter().any(|c| {
            c["metadata"]["name"] == node.name.as_str()
                && c["spec"]["drivers"][0]["name"] == CSI_DRIVER
        });
        let slice = items(&slices)
            .iter()
            .any(|s| s["spec"]["nodeName"] == node.name.as_str());
        for (missing, what) in [
            (!shown, "allocatable"),
            (!csi, "CSINode"),
            (!slice, "slice"),
        ] {
            if missing {
                lacks.push(format!("{}: {what}", node.name));
            }
        }
    }
    lacks
}
