//! The real kubelet (v1.37.2, built by `interop/`), the oracle for what a
//! pod's containers get: it runs pods bound to its node on a
//! [`Containerd`] of its own, registering its Node with the API server as
//! the node's identity. Configured as this machine needs
//! (`shared/spec/runtime.md`): cgroup v1 allowed, no QoS cgroups, no
//! enforced allocatable, swap tolerated, the cgroupfs driver, no HTTP
//! ports, its own root, certificate and pod-log directories.
//!
//! Its device manager serves `/var/lib/kubelet/device-plugins/kubelet.sock`
//! whatever its root (and removes every other socket there when it
//! starts), so one runs on a machine at a time: [`RealKubelet::start`]
//! holds a lock on that directory until it is dropped. Device plugins for
//! it register there ([`DEVICE_PLUGINS`]); its `plugins_registry` follows
//! its root.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tempfile::TempDir;
use tokio::process::{Child, Command};

use crate::containerd::Containerd;
use crate::go_programs::go_program;

/// Where the kubelet's device manager serves `kubelet.sock`, whatever its
/// root directory.
pub const DEVICE_PLUGINS: &str = "/var/lib/kubelet/device-plugins";

/// The kubelet's HTTPS server as a cluster runs it: on `port`, clients
/// authenticated by certificates of `client_ca_file` and by TokenReview,
/// none anonymously, and authorized by SubjectAccessReview.
#[derive(Debug, Clone)]
pub struct Serving {
    /// Its port, on every address.
    pub port: u16,
    /// The CA of the client certificates it accepts (`clientCAFile`).
    pub client_ca_file: PathBuf,
    /// Its read-only port (`readOnlyPort`), 0 for none.
    pub read_only_port: u16,
}

/// A running kubelet.
pub struct RealKubelet {
    // Dropped first: the kubelet before its lock and directory.
    process: Child,
    dir: TempDir,
    _lock: File,
}

impl RealKubelet {
    /// Starts the kubelet for node `node` with `kubeconfig` (the node's
    /// identity) on `containerd`. Waits for the machine-wide lock first.
    pub async fn start(node: &str, kubeconfig: &Path, containerd: &Containerd) -> Self {
        Self::start_with(node, kubeconfig, containerd, None, None, "", &[]).await
    }

    /// [`start`](Self::start) as a node that joins: `kubeconfig` does not
    /// exist yet, the kubelet asks for its client certificate with
    /// `bootstrap` (`--bootstrap-kubeconfig`) and writes it, and rotates
    /// the certificate (`rotateCertificates: true`), as on a kubeadm node.
    pub async fn start_bootstrapping(
        node: &str,
        kubeconfig: &Path,
        bootstrap: &Path,
        containerd: &Containerd,
    ) -> Self {
        Self::start_with(node, kubeconfig, containerd, None, Some(bootstrap), "", &[]).await
    }

    /// [`start`](Self::start), serving its HTTPS API as `serving` says.
    pub async fn start_serving(
        node: &str,
        kubeconfig: &Path,
        containerd: &Containerd,
        serving: &Serving,
    ) -> Self {
        Self::start_with(node, kubeconfig, containerd, Some(serving), None, "", &[]).await
    }

    /// [`start`](Self::start), its configuration file ending with
    /// `extra` (KubeletConfiguration fields, one per line).
    pub async fn start_configured(
        node: &str,
        kubeconfig: &Path,
        containerd: &Containerd,
        extra: &str,
    ) -> Self {
        Self::start_with(node, kubeconfig, containerd, None, None, extra, &[]).await
    }

    /// [`start_configured`](Self::start_configured), the kubelet's
    /// environment having `env` too.
    pub async fn start_configured_with_env(
        node: &str,
        kubeconfig: &Path,
        containerd: &Containerd,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_with(node, kubeconfig, containerd, None, None, extra, env).await
    }

    async fn start_with(
        node: &str,
        kubeconfig: &Path,
        containerd: &Containerd,
        serving: Option<&Serving>,
        bootstrap: Option<&Path>,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Self {
        std::fs::create_dir_all(DEVICE_PLUGINS).expect("the kubelet's device plugin directory");
        let lock_path = Path::new(DEVICE_PLUGINS)
            .join("..")
            .join(".nodeplugins-tests.lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .expect("open the kubelet lock");
        let lock = tokio::task::spawn_blocking(move || {
            lock.lock().expect("lock the machine's kubelet");
            lock
        })
        .await
        .expect("wait for the kubelet lock");
        let dir = tempfile::Builder::new()
            .prefix("kubelet-")
            .tempdir()
            .expect("a directory for the kubelet");
        let config = dir.path().join("config.yaml");
        let mut text = kubelet_configuration(dir.path(), &containerd.endpoint(), serving);
        if bootstrap.is_some() {
            text.push_str("rotateCertificates: true\n");
        }
        text.push_str(extra);
        std::fs::write(&config, text).expect("write the kubelet's configuration");
        let log = File::create(dir.path().join("kubelet.log")).expect("the kubelet's log");
        let mut command = Command::new(go_program("kubelet"));
        command
            .arg("--config")
            .arg(&config)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--root-dir")
            .arg(dir.path().join("root"))
            .arg("--cert-dir")
            .arg(dir.path().join("pki"))
            .args(["--hostname-override", node, "--v", "2"])
            .args(
                bootstrap
                    .map(|b| vec![std::ffi::OsString::from("--bootstrap-kubeconfig"), b.into()])
                    .unwrap_or_default(),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        let process = command.spawn().expect("start the kubelet");
        Self {
            process,
            dir,
            _lock: lock,
        }
    }

    /// Its certificate directory (`--cert-dir`).
    pub fn cert_dir(&self) -> PathBuf {
        self.dir.path().join("pki")
    }

    /// Its root directory (`plugins_registry` and `plugins` are under it).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Where it writes its pods' logs.
    pub fn pod_logs(&self) -> PathBuf {
        self.dir.path().join("pod-logs")
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.id()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kubelet.log")).unwrap_or_default()
    }
}

impl Drop for RealKubelet {
    fn drop(&mut self) {
        // A test that failed shows how the kubelet ended or what it last
        // said (it may have refused its configuration or a port).
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let exited = self.process.try_wait().ok().flatten();
            eprintln!(
                "the real kubelet (exited: {exited:?}), its last lines:\n{}",
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
        if let Some(pid) = self.process.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        // What it left in the machine-wide directory: the next kubelet
        // starts afresh.
        for file in ["kubelet.sock", "kubelet_internal_checkpoint"] {
            let _ = std::fs::remove_file(Path::new(DEVICE_PLUGINS).join(file));
        }
        // It leaves mounts (its pods' volumes) under its root.
        crate::mounts::unmount_below(self.dir.path());
    }
}

/// The kubelet's configuration for a directory `dir` and a runtime at
/// `endpoint`, its API served as `serving` says (none: no HTTP port,
/// anonymous access allowed); the agent started as a kubelet reads the
/// same.
pub fn kubelet_configuration(dir: &Path, endpoint: &str, serving: Option<&Serving>) -> String {
    let dir = dir.display();
    let server = match serving {
        None => "port: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow"
            .to_string(),
        Some(serving) => format!(
            "port: {}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {}
authorization:
  mode: Webhook",
            serving.port,
            serving.client_ca_file.display()
        ),
    };
    let read_only = serving.map_or(0, |s| s.read_only_port);
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: {endpoint}
imageServiceEndpoint: {endpoint}
podLogsDir: {dir}/pod-logs
readOnlyPort: {read_only}
healthzPort: 0
{server}
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#
    )
}
