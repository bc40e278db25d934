//! A cluster whose nodes serve their pods: a real API server, scheduler and
//! controller-manager; per node our agent (its own root and node identity)
//! with the SDK's example device plugin and DRA driver; pods built the way
//! the scheduler places them on one node.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::control_plane::ControlPlane;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::process::{Child, Command};

use super::{agent_with, cli, status_json};

/// The device plugin's resource.
pub const RESOURCE: &str = "example.com/device";
/// The DRA driver.
pub const DRIVER: &str = "dra.example.com";
/// The DeviceClass of the driver's GPUs.
pub const CLASS: &str = "gpu.example.com";
/// Where pods go.
pub const PODS: &str = "/api/v1/namespaces/default/pods";
/// Where claims are.
pub const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
/// Long enough for a hundred pods on a busy machine.
pub const LONG: Duration = Duration::from_secs(180);

/// The API server and its consumers.
pub struct Cluster {
    // Dropped first: the consumers before the API server.
    pub control: ControlPlane,
    pub api: KubeApi,
}

impl Cluster {
    /// A cluster with Nodes `nodes` (schedulable, as a kubelet would make
    /// them), the default ServiceAccount and the GPUs' DeviceClass.
    pub async fn start(nodes: &[&str]) -> Self {
        Self::start_with(nodes, &[]).await
    }

    /// [`start`](Self::start) with more controllers of the
    /// controller-manager (`job-controller`...).
    pub async fn start_with(nodes: &[&str], controllers: &[&str]) -> Self {
        nodeplugins_test_support::init_tracing();
        let api = KubeApi::start(nodes[0]).await;
        let control = ControlPlane::start_with(&api, controllers).await;
        for node in nodes {
            api.create_schedulable_node(node).await;
        }
        api.ensure_default_service_account("default").await;
        api.create_device_class(CLASS, DRIVER).await;
        Self { control, api }
    }

    /// Creates `pod` in `default`.
    pub async fn create(&self, pod: &Value) {
        self.api.admin("POST", PODS, Some(pod)).await;
    }

    /// Deletes pod `default/NAME` at once (no kubelet confirms a graceful
    /// deletion here).
    pub async fn delete(&self, name: &str) {
        let path = format!("{PODS}/{name}?gracePeriodSeconds=0");
        let answer = self
            .api
            .request(Identity::Admin, "DELETE", &path, None)
            .await;
        assert!(
            answer.status == 200 || answer.status == 404,
            "delete {name}: {}",
            answer.body
        );
    }

    /// The pod `default/NAME` as the API has it.
    pub async fn pod(&self, name: &str) -> Value {
        self.api.admin("GET", &format!("{PODS}/{name}"), None).await
    }

    /// Creates ResourceClaimTemplate `default/NAME` for one GPU.
    pub async fn claim_template(&self, name: &str) {
        let template = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}}},
        });
        let path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates";
        self.api.admin("POST", path, Some(&template)).await;
    }

    /// Creates ResourceClaim `default/NAME` for one GPU.
    pub async fn claim(&self, name: &str) {
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
        });
        self.api.admin("POST", CLAIMS, Some(&claim)).await;
    }

    /// Every ResourceClaim in `default`.
    pub async fn claims(&self) -> Vec<Value> {
        let list = self.api.admin("GET", CLAIMS, None).await;
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// The Warning Events a node agent recorded on pod `default/NAME` (the
    /// scheduler's, and the Normal ones of its containers' lives, left
    /// out).
    pub async fn events_of(&self, name: &str) -> Vec<Value> {
        let path =
            format!("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}");
        let list = self.api.admin("GET", &path, None).await;
        list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["source"]["component"] == "nodeplugins" && e["type"] == "Warning")
            .collect()
    }
}

/// One node: our agent on its own root as its own node identity, the
/// example device plugin and the example DRA driver.
pub struct Node {
    pub name: String,
    // Dropped before `root`.
    pub agent: Option<ChildProcess>,
    pub device_plugin: Child,
    pub driver: Child,
    pub kubeconfig: PathBuf,
    /// More flags for the agent (kept for its restarts).
    pub agent_args: Vec<String>,
    /// The DRA driver's GPUs (kept for its restarts).
    pub gpus: usize,
    /// Where the DRA driver writes its CDI specs.
    pub cdi_dir: PathBuf,
    pub root: TempDir,
}

/// The agent stops first; then what the node's pods left mounted under
/// its root (a test that ends with pods running: their CSI volumes, their
/// subPaths) is unmounted, so that the root can be removed and nothing
/// outlives the test.
impl Drop for Node {
    fn drop(&mut self) {
        drop(self.agent.take());
        nodeplugins_test_support::mounts::unmount_below(self.root.path());
    }
}

impl Node {
    /// Node `name` of `cluster` with `devices` devices of [`RESOURCE`] and
    /// `gpus` GPUs of [`DRIVER`]; returns once the Node's allocatable and
    /// the node's ResourceSlices show them.
    pub async fn start(cluster: &Cluster, name: &str, devices: usize, gpus: usize) -> Self {
        Self::start_with(cluster, name, devices, gpus, &[]).await
    }

    /// [`start`](Self::start), the agent with more flags `agent_args`.
    pub async fn start_with(
        cluster: &Cluster,
        name: &str,
        devices: usize,
        gpus: usize,
        agent_args: &[&str],
    ) -> Self {
        Self::start_full(cluster, name, devices, gpus, agent_args, None).await
    }

    /// [`start_with`](Self::start_with), the DRA driver writing its CDI
    /// specs in `cdi_dir` (a runtime's) instead of the node's root.
    pub async fn start_full(
        cluster: &Cluster,
        name: &str,
        devices: usize,
        gpus: usize,
        agent_args: &[&str],
        cdi_dir: Option<&Path>,
    ) -> Self {
        let agent_args: Vec<String> = agent_args.iter().map(|a| a.to_string()).collect();
        let root = tempfile::Builder::new()
            .prefix(&format!("{name}-"))
            .tempdir()
            .unwrap();
        let cdi_dir = cdi_dir.map_or_else(|| root.path().join("cdi"), Path::to_path_buf);
        let kubeconfig = cluster.api.kubeconfig_of_node(name);
        let agent = start_agent(root.path(), &kubeconfig, name, &agent_args);
        eventually("the agent answers", TIMEOUT, || async {
            status_json(root.path()).await
        })
        .await;
        let device_plugin = start_device_plugin(root.path(), devices);
        let driver = start_driver(root.path(), &kubeconfig, name, gpus, &cdi_dir);
        let node = Self {
            cdi_dir,
            name: name.to_string(),
            agent: Some(agent),
            device_plugin,
            driver,
            kubeconfig,
            agent_args,
            gpus,
            root,
        };
        let want = devices.to_string();
        node.wait_node(cluster, "devices on the Node", |n| {
            n["status"]["allocatable"][RESOURCE] == want.as_str()
        })
        .await;
        eventually("the node's GPUs published", TIMEOUT, || async {
            let path = format!(
                "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D{name}"
            );
            let list = cluster.api.admin("GET", &path, None).await;
            let count: usize = list["items"]
                .as_array()?
                .iter()
                .map(|s| s["spec"]["devices"].as_array().map_or(0, Vec::len))
                .sum();
            (count == gpus).then_some(())
        })
        .await;
        node
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Node `name` once `pred` holds for it.
    pub async fn wait_node(&self, cluster: &Cluster, what: &str, pred: impl Fn(&Value) -> bool) {
        let path = format!("/api/v1/nodes/{}", self.name);
        eventually(what, TIMEOUT, || async {
            let node = cluster.api.admin("GET", &path, None).await;
            pred(&node).then_some(())
        })
        .await;
    }

    /// Stops the agent with SIGKILL (nothing of it runs on).
    pub async fn kill_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            super::signal(&agent, "-KILL").await;
            agent.wait(TIMEOUT).await;
        }
    }

    /// Stops the agent with SIGTERM and waits for it.
    pub async fn stop_agent(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            super::signal(&agent, "-TERM").await;
            agent.wait(TIMEOUT).await;
        }
    }

    /// Starts the agent again.
    pub async fn start_agent(&mut self) {
        self.agent = Some(start_agent(
            self.root(),
            &self.kubeconfig,
            &self.name,
            &self.agent_args,
        ));
        eventually("the agent answers again", TIMEOUT, || async {
            status_json(self.root()).await
        })
        .await;
    }

    /// Sends `sig` (such as `-STOP`) to the DRA driver.
    pub async fn signal_driver(&self, sig: &str) {
        let pid = self.driver.id().unwrap().to_string();
        let status = Command::new("kill")
            .args([sig, &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success(), "kill {sig} {pid}");
    }

    /// Kills the DRA driver (SIGKILL: its sockets stay behind).
    pub async fn kill_driver(&mut self) {
        self.driver.kill().await.unwrap();
    }

    /// Starts the DRA driver again.
    pub fn start_driver_again(&mut self) {
        self.driver = start_driver(
            self.root.path(),
            &self.kubeconfig,
            &self.name,
            self.gpus,
            &self.cdi_dir,
        );
    }

    /// `nodeplugins pods -o json`.
    pub async fn pods(&self) -> Value {
        let out = cli(self.root(), &["pods", "-o", "json"]).await;
        assert!(
            out.status.success(),
            "pods: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Pod `default/NAME` in `nodeplugins pods`, once `pred` holds for it.
    pub async fn pod_when(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        eventually(&format!("pod {name} {what}"), LONG, || async {
            let pods = self.pods().await;
            let pod = pods["pods"]
                .as_array()?
                .iter()
                .find(|p| p["namespace"] == "default" && p["name"] == name)?
                .clone();
            pred(&pod).then_some(pod)
        })
        .await
    }

    /// The pods in `nodeplugins pods`, once `pred` holds for them.
    pub async fn pods_when(&self, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        eventually(what, LONG, || async {
            let pods = self.pods().await;
            let pods = pods["pods"].as_array()?.clone();
            pred(&pods).then_some(pods)
        })
        .await
    }

    /// What the node holds: (device allocations, DRA claim records).
    pub async fn held(&self) -> (usize, usize) {
        let status = status_json(self.root()).await.unwrap();
        let allocated: usize = status["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["allocated"].as_u64().unwrap_or(0) as usize)
            .sum();
        let out = cli(self.root(), &["dra", "claims", "-o", "json"]).await;
        let claims: Value = serde_json::from_slice(&out.stdout).unwrap();
        (allocated, claims["claims"].as_array().map_or(0, Vec::len))
    }

    /// How many Allocate calls the device plugin answered.
    pub fn allocate_calls(&self) -> usize {
        log_lines(&self.root().join("device-plugin.log"), "allocated")
    }

    /// How many PreStartContainer calls the device plugin answered.
    pub fn pre_start_calls(&self) -> usize {
        log_lines(&self.root().join("device-plugin.log"), "pre-started")
    }

    /// How many claims the DRA driver unprepared.
    pub fn unprepare_calls(&self) -> usize {
        log_lines(&self.root().join("driver.log"), "unprepared")
    }

    /// How many claims the DRA driver prepared (each call of its prepare
    /// for a claim; claims it answered from its records are not counted).
    pub fn prepare_calls(&self) -> usize {
        log_lines(&self.root().join("driver.log"), "prepared")
    }

    /// The CDI spec files the driver wrote for prepared claims.
    pub fn cdi_specs(&self) -> usize {
        std::fs::read_dir(self.root().join("cdi")).map_or(0, |d| d.count())
    }
}

fn start_agent(root: &Path, kubeconfig: &Path, node: &str, more: &[String]) -> ChildProcess {
    let mut args = vec![
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--node-name",
        node,
        "--log-level",
        "info",
    ];
    args.extend(more.iter().map(String::as_str));
    agent_with(root, &args)
}

/// The example device plugin on `root` with `devices` devices, logging
/// each Allocate to `<root>/device-plugin.log` (JSON lines).
fn start_device_plugin(root: &Path, devices: usize) -> Child {
    start_device_plugin_for(root, RESOURCE, devices, "device-plugin.log")
}

/// The example device plugin on `root` serving `resource` with `devices`
/// devices, logging to `<root>/<log>` (JSON lines).
pub fn start_device_plugin_for(root: &Path, resource: &str, devices: usize, log: &str) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join(log))
        .unwrap();
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    command
        .arg("--root-dir")
        .arg(root)
        .args(["--resource", resource, "--pre-start"])
        .args(["--devices", &devices.to_string()])
        .args(["--log-level", "info", "--log-format", "json"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    command.spawn().unwrap()
}

fn start_driver(root: &Path, kubeconfig: &Path, node: &str, gpus: usize, cdi: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join("driver.log"))
        .unwrap();
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
    command
        .arg("--root-dir")
        .arg(root)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--node-name",
            node,
            "--log-format",
            "json",
            "--log-level",
            "info",
        ])
        .env_remove("RUST_LOG")
        .args(["--devices", &gpus.to_string()])
        .arg("--cdi-dir")
        .arg(cdi)
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true);
    command.spawn().unwrap()
}

/// A pod the scheduler may only place on `node`, with `containers`.
pub fn pod(name: &str, node: &str, containers: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "automountServiceAccountToken": false,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
            "containers": containers,
        },
    })
}

/// A host-network pod bound to node `node` (no scheduler needed), with
/// `containers` and a 1 s grace period.
pub fn bound_pod(node: &str, name: &str, containers: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": containers,
        },
    })
}

/// A container asking for `devices` devices of [`RESOURCE`] (none: asking
/// for nothing) and naming `claims` (pod claim entries, whole).
pub fn container(name: &str, devices: usize, claims: &[&str]) -> Value {
    let mut resources = json!({});
    if devices > 0 {
        let count = devices.to_string();
        resources["limits"] = json!({RESOURCE: count});
        resources["requests"] = json!({RESOURCE: count});
    }
    if !claims.is_empty() {
        let claims: Vec<Value> = claims.iter().map(|c| json!({"name": c})).collect();
        resources["claims"] = json!(claims);
    }
    json!({"name": name, "image": "example.invalid/app", "resources": resources})
}

/// `pod` with `init` as its init containers.
pub fn with_init(mut pod: Value, init: Vec<Value>) -> Value {
    pod["spec"]["initContainers"] = json!(init);
    pod
}

/// `pod` with `spec.resourceClaims` `claims`: (entry, template) or (entry,
/// claim) pairs, as `{"resourceClaimTemplateName"|"resourceClaimName": ...}`.
pub fn with_claims(mut pod: Value, claims: Vec<Value>) -> Value {
    pod["spec"]["resourceClaims"] = json!(claims);
    pod
}

/// A `spec.resourceClaims` entry made from template `template`.
pub fn from_template(entry: &str, template: &str) -> Value {
    json!({"name": entry, "resourceClaimTemplateName": template})
}

/// A `spec.resourceClaims` entry naming claim `claim`.
pub fn named_claim(entry: &str, claim: &str) -> Value {
    json!({"name": entry, "resourceClaimName": claim})
}

/// The JSON log lines of `log` whose message is `message`.
pub fn log_lines(log: &Path, message: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["fields"]["message"] == message)
        .count()
}

/// The CSI driver's calls of the node's pods: each line's method and
/// request, `NodeGetInfo` (its registration's) left out, and so are the
/// volume stats read now and then (`NodeGetVolumeStats`, and the
/// capabilities call just before it). The log is read as it stands while
/// the driver writes on: a line not yet ended is not read, and the
/// capabilities calls at its end are left out, as the call they come
/// before (a stats read's, the next step's) is not there yet.
pub fn csi_calls(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let ended = text.rfind('\n').map_or("", |end| &text[..end]);
    let mut kept: Vec<Value> = Vec::new();
    for line in ended.lines() {
        let call: Value = serde_json::from_str(line).unwrap();
        if call["method"] == "NodeGetInfo" {
            continue;
        }
        if call["method"] == "NodeGetVolumeStats" {
            if kept
                .last()
                .is_some_and(|c| c["method"] == "NodeGetCapabilities")
            {
                kept.pop();
            }
            continue;
        }
        kept.push(call);
    }
    while kept
        .last()
        .is_some_and(|c| c["method"] == "NodeGetCapabilities")
    {
        kept.pop();
    }
    kept
}

pub fn methods(calls: &[Value]) -> Vec<String> {
    calls
        .iter()
        .map(|c| c["method"].as_str().unwrap().to_string())
        .collect()
}

/// The SDK's example CSI driver `csi.example.com` serving volumes under
/// `state` (staging them) as node `node_id`, its calls in `log`,
/// registered with the node (the agent or a kubelet) at `root` by the CSI
/// registrar; the driver given `more` flags.
pub fn start_csi_driver(
    root: &Path,
    node_id: &str,
    state: &Path,
    log: &Path,
    more: &[&str],
) -> (ChildProcess, ChildProcess) {
    let socket = root.join("plugins/csi.example.com/csi.sock");
    let mut driver =
        tokio::process::Command::new(binary("nodeplugins-sdk-bins", "example-csi-driver"));
    driver
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .arg(format!("--node-id={node_id}"))
        .arg(format!("--state-dir={}", state.display()))
        .arg("--stage")
        .arg(format!("--call-log={}", log.display()))
        .args(more);
    let driver = ChildProcess::spawn("example-csi-driver", driver);
    (driver, start_registrar(root, &socket))
}

/// The CSI registrar of the driver at `socket`, registering it with the
/// node (the agent or a kubelet) at `root`.
fn start_registrar(root: &Path, socket: &Path) -> ChildProcess {
    std::fs::create_dir_all(root.join("plugins_registry")).unwrap();
    let mut registrar =
        tokio::process::Command::new(binary("nodeplugins-sdk-bins", "nodeplugins-csi-registrar"));
    registrar
        .arg(format!("--csi-address={}", socket.display()))
        .arg(format!("--kubelet-registration-path={}", socket.display()))
        .arg(format!(
            "--plugin-registration-path={}",
            root.join("plugins_registry").display()
        ))
        .arg("--timeout=10s");
    ChildProcess::spawn("nodeplugins-csi-registrar", registrar)
}

/// The name the Kubernetes end-to-end CSI mock driver registers.
pub const MOCK_DRIVER: &str = "io.kubernetes.storage.mock";

/// The Kubernetes end-to-end CSI mock driver (`interop/cmd/csi-mock`),
/// its node calls in `log`, registered with the node at `root` by the CSI
/// registrar; the mock given `more` flags (`--fail`, `--hang`).
pub fn start_csi_mock(root: &Path, log: &Path, more: &[&str]) -> (ChildProcess, ChildProcess) {
    let socket = root.join(format!("plugins/{MOCK_DRIVER}/csi.sock"));
    let mut driver = tokio::process::Command::new(
        nodeplugins_test_support::go_programs::go_program("csi-mock"),
    );
    driver
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .arg(format!("--call-log={}", log.display()))
        .args(more);
    let driver = ChildProcess::spawn("csi-mock", driver);
    (driver, start_registrar(root, &socket))
}

/// The CSIDriver object of the mock driver: no attaching, the pod's
/// identity in its volumes' context, inline and persistent volumes.
pub async fn create_mock_driver_object(api: &KubeApi) {
    api.admin(
        "POST",
        "/apis/storage.k8s.io/v1/csidrivers",
        Some(
            &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": MOCK_DRIVER},
            "spec": {"attachRequired": false, "podInfoOnMount": true,
                     "volumeLifecycleModes": ["Persistent", "Ephemeral"]}}),
        ),
    )
    .await;
}

/// The CSIDriver object of the example CSI driver: no attaching, the
/// pod's identity in its volumes' context and a token of the pod's service
/// account for audience `csi.example.com`, fsGroup applied by the node,
/// inline and persistent volumes.
pub async fn create_csi_driver_object(api: &KubeApi) {
    create_csi_driver_object_with(api, false).await;
}

/// [`create_csi_driver_object`], its volumes attached first when
/// `attach_required` (by the attach/detach controller and
/// [`start_attacher`]).
pub async fn create_csi_driver_object_with(api: &KubeApi, attach_required: bool) {
    api.admin(
        "POST",
        "/apis/storage.k8s.io/v1/csidrivers",
        Some(
            &json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
            "metadata": {"name": "csi.example.com"},
            "spec": {"attachRequired": attach_required, "podInfoOnMount": true, "fsGroupPolicy": "File",
                     "volumeLifecycleModes": ["Persistent", "Ephemeral"],
                     "tokenRequests": [{"audience": "csi.example.com", "expirationSeconds": 600}]}}),
        ),
    )
    .await;
}

/// The part of a CSI driver's external attacher the node sees, for every
/// VolumeAttachment of the cluster (the attach/detach controller makes
/// them): each one not yet attached is marked attached, with
/// `devicePath: /dev/attached/<its PersistentVolume>` as its metadata, the
/// node's publish context. Polls the API until the handle is dropped (the
/// peer it stands in for watches).
pub async fn start_attacher(api: &KubeApi) -> tokio::task::JoinHandle<()> {
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    use kube::api::{Api, ListParams, Patch, PatchParams};
    let attachments: Api<VolumeAttachment> = Api::all(api.client(Identity::Admin).await);
    tokio::spawn(async move {
        loop {
            for attachment in attachments
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                let attached = attachment.status.as_ref().is_some_and(|s| s.attached);
                if attached || attachment.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let pv = attachment
                    .spec
                    .source
                    .persistent_volume_name
                    .clone()
                    .unwrap_or_default();
                let status = json!({"status": {"attached": true,
                    "attachmentMetadata": {"devicePath": format!("/dev/attached/{pv}")}}});
                let name = attachment.metadata.name.clone().unwrap_or_default();
                let _ = attachments
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Claim `default/CLAIM` bound to a new PersistentVolume `PV` of the
/// example CSI driver (its volume `handle`), by hand as the binder would
/// bind them (none runs here): the claim names the volume and says the
/// binding is complete (the scheduler looks for that), the volume names
/// the claim's UID, both are `Bound`.
pub async fn bind_static_volume(api: &KubeApi, claim: &str, pv: &str, handle: &str) {
    bind_static_volume_of(api, "csi.example.com", claim, pv, handle).await;
}

/// [`bind_static_volume`] of driver `driver`.
pub async fn bind_static_volume_of(
    api: &KubeApi,
    driver: &str,
    claim: &str,
    pv: &str,
    handle: &str,
) {
    let source = json!({"csi": {"driver": driver, "volumeHandle": handle, "fsType": "ext4",
                                "volumeAttributes": {"kind": "static"}}});
    bind_volume(api, claim, pv, &source).await;
}

/// [`bind_static_volume`] of a PersistentVolume whose spec has `source`
/// too (its volume source, its node affinity; a key of `null` drops the
/// default, as `"mountOptions": null`).
pub async fn bind_volume(api: &KubeApi, claim: &str, pv: &str, source: &Value) {
    let made = api
        .admin(
            "POST",
            "/api/v1/namespaces/default/persistentvolumeclaims",
            Some(&json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim,
                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv,
                         "storageClassName": "",
                         "resources": {"requests": {"storage": "1Gi"}}}})),
        )
        .await;
    let claim_uid = made["metadata"]["uid"].as_str().unwrap();
    let mut spec = json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                          "storageClassName": "", "mountOptions": ["noatime"],
                          "claimRef": {"namespace": "default", "name": claim, "uid": claim_uid}});
    for (key, value) in source.as_object().unwrap() {
        spec[key] = value.clone();
    }
    api.admin(
        "POST",
        "/api/v1/persistentvolumes",
        Some(&json!({"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv}, "spec": spec})),
    )
    .await;
    let pv_path = format!("/api/v1/persistentvolumes/{pv}");
    let mut made_pv = api.admin("GET", &pv_path, None).await;
    made_pv["status"] = json!({"phase": "Bound"});
    api.admin("PUT", &format!("{pv_path}/status"), Some(&made_pv))
        .await;
    let path = format!("/api/v1/namespaces/default/persistentvolumeclaims/{claim}");
    let mut bound = api.admin("GET", &path, None).await;
    bound["status"] = json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                             "capacity": {"storage": "1Gi"}});
    api.admin("PUT", &format!("{path}/status"), Some(&bound))
        .await;
}
