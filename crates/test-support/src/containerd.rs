//! A real containerd for a test: built by `interop/` (v2.4.2, with its
//! runc shim), run on Debian's `runc`, with its own root, state, socket
//! and CDI spec directory under a temporary directory, and the images of
//! [`crate::oci_image`] imported. Configured as this machine needs
//! (`shared/spec/runtime.md`): the native snapshotter, `oom_score_adj`
//! left alone, CDI specs read from its own directory (CDI is always on
//! in containerd 2), the sandbox image pinned, NRI off (its socket is
//! machine-wide), a streaming server on any free port. Only host-network
//! pods run: no CNI is installed.
//!
//! Dropping it kills every container it started, unmounts what it mounted
//! and removes its directory.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tempfile::TempDir;
use tokio::process::Command;

use crate::go_programs::go_program;
use crate::oci_image;
use crate::wait::{TIMEOUT, eventually};

/// Where Debian's `runc` is.
pub const RUNC: &str = "/usr/sbin/runc";

/// A running containerd.
pub struct Containerd {
    process: Option<tokio::process::Child>,
    dir: TempDir,
}

impl Containerd {
    /// Starts containerd and imports the test images; returns once its CRI
    /// service answers.
    pub async fn start() -> Self {
        assert!(
            Path::new(RUNC).exists(),
            "{RUNC} is missing: run scripts/install-runtime-deps (Debian's runc and busybox-static)"
        );
        let dir = tempfile::Builder::new()
            .prefix("containerd-")
            .tempdir()
            .expect("a directory for containerd");
        for sub in ["root", "state", "cdi", "tmp"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("containerd directories");
        }
        std::fs::write(dir.path().join("config.toml"), config(dir.path()))
            .expect("write containerd's configuration");
        let mut containerd = Self { process: None, dir };
        containerd.run().await;
        let archive = oci_image::archive();
        let out = containerd
            .ctr(&[
                "images",
                "import",
                "--local",
                "--snapshotter",
                "native",
                "--platform",
                "linux/amd64",
                archive.to_str().expect("a UTF-8 path"),
            ])
            .await;
        assert!(
            out.status.success(),
            "ctr images import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        containerd
    }

    /// Starts the containerd process (again) and waits for its socket.
    async fn run(&mut self) {
        let bin = go_program("containerd");
        go_program("containerd-shim-runc-v2");
        go_program("ctr");
        let path = format!(
            "{}:/usr/sbin:/usr/bin:/sbin:/bin",
            bin.parent().expect("interop/bin").display()
        );
        // Its log, kept with the rest of its directory.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("containerd.log"))
            .expect("containerd's log file");
        let mut command = Command::new(&bin);
        command
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .env("PATH", path)
            .env("TMPDIR", self.dir.path().join("tmp"))
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        self.process = Some(command.spawn().expect("start containerd"));
        eventually("containerd answers", TIMEOUT, || async {
            let out = self.ctr(&["version"]).await;
            out.status.success().then_some(())
        })
        .await;
    }

    /// The CRI socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// The CRI endpoint as the kubelet's `--container-runtime-endpoint`
    /// takes it.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// Where containerd reads CDI specs from.
    pub fn cdi_dir(&self) -> PathBuf {
        self.dir.path().join("cdi")
    }

    /// Writes the CDI spec of the SDK's example device plugin serving
    /// `resource` (`vendor/kind`) with `devices` devices (`dev-N`, each
    /// setting `EXAMPLE_CDI_DEV_N=on`) where containerd reads specs: a
    /// plugin that names CDI devices ships one.
    pub fn write_example_cdi_spec(&self, resource: &str, devices: usize) {
        let devices: Vec<serde_json::Value> = (0..devices)
            .map(|i| {
                serde_json::json!({
                    "name": format!("dev-{i}"),
                    "containerEdits": {"env": [format!("EXAMPLE_CDI_DEV_{i}=on")]},
                })
            })
            .collect();
        let spec = serde_json::json!({"cdiVersion": "0.6.0", "kind": resource, "devices": devices});
        std::fs::write(self.cdi_dir().join("example-device.json"), spec.to_string())
            .expect("write the example device plugin's CDI spec");
    }

    /// `ctr -n k8s.io ARGS...` against this containerd.
    pub async fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new(go_program("ctr"))
            .arg("--address")
            .arg(self.socket())
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .await
            .expect("run ctr")
    }

    /// Kills containerd with SIGKILL (its shims and containers run on).
    pub async fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill().await.expect("kill containerd");
        }
    }

    /// Starts containerd again after [`kill`](Self::kill).
    pub async fn restart(&mut self) {
        self.run().await;
    }

    /// What a reboot does to containerd: every container and shim killed,
    /// its state directory (a tmpfs under `/run` on a real node) emptied,
    /// then containerd started again on its root, which remembers the
    /// sandboxes and containers as stopped.
    pub async fn reboot(&mut self) {
        self.stop_everything();
        let state = self.dir.path().join("state");
        crate::mounts::unmount_below(&state);
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&state).expect("containerd's state directory");
        self.run().await;
    }

    /// Kills every task, containerd and its shims.
    fn stop_everything(&mut self) {
        let ctr = go_program("ctr");
        let socket = self.socket();
        let run = |args: &[&str]| {
            std::process::Command::new(&ctr)
                .arg("--address")
                .arg(&socket)
                .args(["-n", "k8s.io"])
                .args(args)
                .output()
        };
        // Every task killed, so that no container outlives the test.
        if self.process.is_some()
            && let Ok(out) = run(&["tasks", "ls", "-q"])
        {
            for task in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = run(&["tasks", "kill", "-s", "SIGKILL", "--all", task.trim()]);
            }
        }
        if let Some(process) = self
            .process
            .take()
            .as_ref()
            .and_then(tokio::process::Child::id)
        {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &process.to_string()])
                .status();
        }
        // The shims outlive containerd: each is started with our socket.
        let dir = self.dir.path().to_string_lossy().to_string();
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline);
                if cmdline.contains("containerd-shim") && cmdline.contains(&dir) {
                    let pid = entry.file_name().to_string_lossy().to_string();
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &pid])
                        .status();
                }
            }
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop_everything();
        // Deepest first, lazily: a rootfs or a sandbox's shm may be busy.
        crate::mounts::unmount_below(self.dir.path());
    }
}

/// The lines a container wrote to its CRI log file (each stored as
/// `<time> <stream> <tag> <line>`); none while the file is missing.
pub fn cri_log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.splitn(4, ' ').nth(3).map(str::to_string))
        .collect()
}

/// containerd's configuration (version 3) for a root under `dir`.
fn config(dir: &Path) -> String {
    let dir = dir.display();
    format!(
        r#"version = 3
root = "{dir}/root"
state = "{dir}/state"
temp = "{dir}/tmp"

[grpc]
  address = "{dir}/containerd.sock"

[ttrpc]
  address = "{dir}/containerd.sock.ttrpc"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "native"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{pause}"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["{dir}/cdi"]

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.nri.v1.nri"]
  disable = true
"#,
        pause = oci_image::PAUSE,
    )
}
