//! The consumers of what a node publishes, on top of a [`KubeApi`]: the real
//! kube-scheduler (places pods on a Node's allocatable, allocates DRA claims
//! from ResourceSlices and reserves them) and the real
//! kube-controller-manager with only the controllers the tests need (the
//! resourceclaim controller, which makes a pod's claims from its templates,
//! and the garbage collector). No node lifecycle controller runs: a Node
//! made with [`KubeApi::create_schedulable_node`] stays Ready and untainted
//! without a kubelet's heartbeats.
//!
//! Opt-in per test: `let _control = ControlPlane::start(&api).await;`.
//! Both programs are built from k8s.io/kubernetes v1.37 (see
//! `interop/go.mod`). They start side by side: on an idle 2-core machine
//! both answer `/healthz` 0.2-0.3 s after they are spawned;
//! [`ControlPlane::start`] takes 1.2-2 s the first time in a test process,
//! which checks with `go build` that the binaries are up to date, and
//! 0.2-0.3 s after that.

use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::control_process::{free_port, startup_failed, wait_healthy};
use crate::go_programs::go_program;
use crate::kube_api::{Identity, KubeApi};

/// The deadline for both programs to answer `/healthz`; they take 0.2-0.3 s
/// on an idle machine, this allows for one that is busy building.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How often a pod is read while waiting for the scheduler; each read is a
/// `curl` process, and the scheduler takes milliseconds, so this bounds
/// the wait's latency only.
const POD_POLL: Duration = Duration::from_millis(50);
/// How long a pod may take to be bound or reported unschedulable.
const SCHEDULE_TIMEOUT: Duration = Duration::from_secs(60);
/// The taint the `TaintNodesByCondition` admission plugin (on by default)
/// puts on every new Node.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// A running kube-scheduler and kube-controller-manager, killed on drop.
pub struct ControlPlane {
    // The processes are declared before `dir`, so that they are killed
    // before their directory is removed.
    scheduler: Child,
    controller_manager: Child,
    dir: TempDir,
}

impl ControlPlane {
    /// Starts kube-scheduler and kube-controller-manager against `api` as
    /// its admin, and returns once both answer `/healthz`. Fails the test
    /// with the command line and the tail of the log when either does not.
    pub async fn start(api: &KubeApi) -> Self {
        Self::start_with(api, &[]).await
    }

    /// [`start`](Self::start), with more controllers of the
    /// controller-manager (`job-controller`, `deployment-controller`...).
    pub async fn start_with(api: &KubeApi, controllers: &[&str]) -> Self {
        Self::start_with_args(api, controllers, &[]).await
    }

    /// [`start_with`](Self::start_with), with `args` added to the
    /// controller-manager's command line (such as a shorter
    /// `--node-monitor-grace-period`).
    pub async fn start_with_args(api: &KubeApi, controllers: &[&str], args: &[&str]) -> Self {
        let (scheduler_bin, manager_bin) = tokio::task::spawn_blocking(|| {
            (
                go_program("kube-scheduler"),
                go_program("kube-controller-manager"),
            )
        })
        .await
        .expect("build the control plane programs");
        let dir = tempfile::Builder::new()
            .prefix("control-plane-")
            .tempdir()
            .expect("create control plane temp dir");
        let kubeconfig = api.admin_kubeconfig();
        let started = Instant::now();
        let deadline = started + START_TIMEOUT;

        let scheduler_port = free_port();
        let mut scheduler = Command::new(&scheduler_bin);
        common_flags(
            &mut scheduler,
            &kubeconfig,
            scheduler_port,
            &dir.path().join("scheduler-certs"),
        );
        let scheduler_log = dir.path().join("kube-scheduler.log");
        let scheduler_child = spawn(&mut scheduler, &scheduler_log);

        let manager_port = free_port();
        let mut manager = Command::new(&manager_bin);
        common_flags(
            &mut manager,
            &kubeconfig,
            manager_port,
            &dir.path().join("manager-certs"),
        );
        let mut enabled = vec!["resourceclaim-controller", "garbage-collector-controller"];
        enabled.extend_from_slice(controllers);
        manager
            .arg(format!("--controllers={}", enabled.join(",")))
            // Controllers act with the admin's credentials, not a service
            // account each: no service-account controller runs.
            .arg("--use-service-account-credentials=false")
            .args(args);
        let manager_log = dir.path().join("kube-controller-manager.log");
        let manager_child = spawn(&mut manager, &manager_log);

        let mut control = Self {
            scheduler: scheduler_child,
            controller_manager: manager_child,
            dir,
        };
        if let Err(failure) =
            wait_healthy(&mut control.scheduler, scheduler_port, "/healthz", deadline).await
        {
            startup_failed(&failure, &scheduler, &scheduler_log);
        }
        if let Err(failure) = wait_healthy(
            &mut control.controller_manager,
            manager_port,
            "/healthz",
            deadline,
        )
        .await
        {
            startup_failed(&failure, &manager, &manager_log);
        }
        tracing::info!(
            dir = %control.dir.path().display(),
            elapsed = ?started.elapsed(),
            "scheduler and controller-manager ready"
        );
        control
    }
}

impl ControlPlane {
    /// An API server for node `node` with the scheduler and the
    /// controller-manager, the Node created schedulable, the `default`
    /// ServiceAccount, and DeviceClass `class` selecting `driver`'s devices.
    pub async fn with_node(node: &str, class: &str, driver: &str) -> (KubeApi, ControlPlane) {
        crate::init_tracing();
        let api = KubeApi::start(node).await;
        let control = ControlPlane::start(&api).await;
        api.create_schedulable_node(node).await;
        api.ensure_default_service_account("default").await;
        api.create_device_class(class, driver).await;
        (api, control)
    }
}

impl KubeApi {
    /// Creates claim `default/claim-NAME` asking for `count` devices of
    /// `class`, and pod `default/pod-NAME` whose container uses it, for the
    /// scheduler to place.
    pub async fn create_pod_with_claim(&self, name: &str, class: &str, count: u32) {
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": format!("claim-{name}")},
            "spec": {"devices": {"requests": [{"name": "devices", "exactly": {
                "deviceClassName": class, "allocationMode": "ExactCount", "count": count}}]}},
        });
        let path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
        let created = self
            .request(Identity::Admin, "POST", path, Some(&claim))
            .await;
        assert_eq!(created.status, 201, "create claim-{name}: {}", created.body);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{name}")},
            "spec": {
                "automountServiceAccountToken": false,
                "resourceClaims": [{"name": "devices", "resourceClaimName": format!("claim-{name}")}],
                "containers": [{"name": "main", "image": "example.invalid/app",
                    "resources": {"claims": [{"name": "devices"}]}}],
            },
        });
        let path = "/api/v1/namespaces/default/pods";
        let created = self
            .request(Identity::Admin, "POST", path, Some(&pod))
            .await;
        assert_eq!(created.status, 201, "create pod-{name}: {}", created.body);
    }

    /// Creates DeviceClass `name`, selecting the devices of `driver`.
    pub async fn create_device_class(&self, name: &str, driver: &str) {
        let class = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}]},
        });
        let path = "/apis/resource.k8s.io/v1/deviceclasses";
        let created = self
            .request(Identity::Admin, "POST", path, Some(&class))
            .await;
        assert_eq!(
            created.status, 201,
            "create DeviceClass {name}: {}",
            created.body
        );
    }

    /// Creates Node `name` as an admin and makes it schedulable as a
    /// kubelet would: capacity and allocatable `pods: 110`, `cpu: 4`,
    /// `memory: 8Gi`, a `Ready=True` condition (`KubeletReady`), and
    /// without the `node.kubernetes.io/not-ready:NoSchedule` taint that
    /// admission puts on a new Node (the kubelet's Ready status and the node
    /// lifecycle controller would remove it; neither runs here). The status
    /// is a JSON merge patch, so a node agent's own merge patches of other
    /// capacity keys (`nodes/<name>/status`) stand beside it.
    pub async fn create_schedulable_node(&self, name: &str) {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        let created = self
            .request(Identity::Admin, "POST", "/api/v1/nodes", Some(&node))
            .await;
        assert_eq!(created.status, 201, "create node {name}: {}", created.body);
        let now = "2026-01-01T00:00:00Z";
        let resources = json!({"pods": "110", "cpu": "4", "memory": "8Gi"});
        let status = json!({"status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
        }});
        let path = format!("/api/v1/nodes/{name}");
        let patched = self
            .request(
                Identity::Admin,
                "PATCH",
                &format!("{path}/status"),
                Some(&status),
            )
            .await;
        assert_eq!(patched.status, 200, "node {name} status: {}", patched.body);
        // A merge patch replaces the whole list: keep any other taint.
        let taints: Vec<&Value> = created.body["spec"]["taints"]
            .as_array()
            .map(|taints| {
                taints
                    .iter()
                    .filter(|taint| taint["key"] != NOT_READY_TAINT)
                    .collect()
            })
            .unwrap_or_default();
        let untainted = self
            .request(
                Identity::Admin,
                "PATCH",
                &path,
                Some(&json!({"spec": {"taints": taints}})),
            )
            .await;
        assert_eq!(
            untainted.status, 200,
            "node {name} taints: {}",
            untainted.body
        );
        let left = &untainted.body["spec"]["taints"];
        assert!(
            !left
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["key"] == NOT_READY_TAINT)),
            "node {name} still tainted: {left}"
        );
    }

    /// Creates the `default` ServiceAccount of `namespace` if it is missing:
    /// without a service-account controller, pods are refused until it
    /// exists.
    pub async fn ensure_default_service_account(&self, namespace: &str) {
        let account =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts");
        let created = self
            .request(Identity::Admin, "POST", &path, Some(&account))
            .await;
        assert!(
            created.status == 201 || created.status == 409,
            "service account default in {namespace}: {} {}",
            created.status,
            created.body
        );
    }

    /// Waits for pod `namespace/name` to be bound and returns its node.
    pub async fn wait_pod_bound(&self, namespace: &str, name: &str) -> String {
        let what = format!("pod {namespace}/{name} bound to a node");
        self.poll_pod(namespace, name, &what, |pod| {
            pod["spec"]["nodeName"].as_str().map(str::to_string)
        })
        .await
    }

    /// Waits for pod `namespace/name` to be reported unschedulable (its
    /// `PodScheduled` condition False, reason `Unschedulable`) and returns
    /// the condition's message. Fails the test if the pod is bound.
    pub async fn wait_pod_unschedulable(&self, namespace: &str, name: &str) -> String {
        let what = format!("pod {namespace}/{name} reported unschedulable");
        self.poll_pod(namespace, name, &what, |pod| {
            assert!(
                pod["spec"]["nodeName"].is_null(),
                "pod {namespace}/{name} was bound: {pod}"
            );
            pod["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| {
                    c["type"] == "PodScheduled"
                        && c["status"] == "False"
                        && c["reason"] == "Unschedulable"
                })
                .and_then(|c| c["message"].as_str().map(str::to_string))
        })
        .await
    }

    /// Reads the pod every [`POD_POLL`] until `check` finds what it looks
    /// for; fails the test after [`SCHEDULE_TIMEOUT`].
    async fn poll_pod<T>(
        &self,
        namespace: &str,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + SCHEDULE_TIMEOUT;
        loop {
            let pod = self.pod(namespace, name).await;
            if let Some(found) = check(&pod) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {SCHEDULE_TIMEOUT:?} waiting for {what}: {pod}"
            );
            tokio::time::sleep(POD_POLL).await;
        }
    }

    async fn pod(&self, namespace: &str, name: &str) -> Value {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
        let pod = self.request(Identity::Admin, "GET", &path, None).await;
        assert_eq!(pod.status, 200, "GET {path}: {}", pod.body);
        pod.body
    }
}

/// The flags both programs take: the admin kubeconfig, no leader election,
/// HTTPS on `port` of 127.0.0.1 with a self-signed certificate in
/// `cert_dir`. `/healthz` needs nothing more: it is in the default
/// `--authorization-always-allow-paths` and anonymous requests are allowed.
/// The admin kubeconfig also serves for delegated authentication and
/// authorization (TokenReview, SubjectAccessReview), so that the rest of
/// the port, such as `/metrics`, answers the admin's token (anonymous: 403).
fn common_flags(command: &mut Command, kubeconfig: &Path, port: u16, cert_dir: &Path) {
    let kubeconfig = kubeconfig.display();
    command
        .arg(format!("--kubeconfig={kubeconfig}"))
        .arg(format!("--authentication-kubeconfig={kubeconfig}"))
        .arg(format!("--authorization-kubeconfig={kubeconfig}"))
        .arg("--leader-elect=false")
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--cert-dir={}", cert_dir.display()));
}

/// Spawns `command` with stderr and stdout to the file `log`, killed when
/// dropped.
fn spawn(command: &mut Command, log: &Path) -> Child {
    let file = File::create(log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
    let stdout = file
        .try_clone()
        .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
    command
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(file)
        .kill_on_drop(true);
    command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {:?}: {e}", command.as_std()))
}
