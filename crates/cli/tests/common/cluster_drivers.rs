//! The example DRA drivers in a cluster: the SDK's, the guide's and the same
//! driver on the Go helper, started against a test API server.

use std::path::Path;
use std::process::Stdio;

use nodeplugins_test_support::binaries::{binary, example};
use nodeplugins_test_support::go_programs::go_program;
use nodeplugins_test_support::kube_api::KubeApi;
use tokio::process::{Child, Command};

/// The DRA drivers the cluster tests run, all named `dra.example.com` with
/// CDI kind `dra.example.com/gpu`, four GPUs in a pool named after the
/// node, a CDI spec file per prepared claim.
#[derive(Clone, Copy, Debug)]
pub enum Driver {
    /// `example-dra-driver` with `--kubeconfig`.
    Example,
    /// The plugin author's guide's `cluster_dra_driver` example.
    Guide,
    /// The same driver on the Go helper (`interop/cmd/gpu-driver`).
    GoHelper,
}

impl Driver {
    /// Starts the driver in the cluster, logging to `log`.
    pub fn start(self, api: &KubeApi, node: &str, root: &Path, cdi: &Path, log: &Path) -> Child {
        let mut command = match self {
            Driver::Example => {
                let mut command =
                    Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
                command
                    .arg("--root-dir")
                    .arg(root)
                    .arg("--kubeconfig")
                    .arg(api.node_kubeconfig())
                    .args(["--node-name", node, "--log-format", "json"])
                    .arg("--cdi-dir")
                    .arg(cdi);
                command
            }
            Driver::Guide | Driver::GoHelper => {
                let mut command = Command::new(match self {
                    Driver::Guide => example("nodeplugins-sdk", "cluster_dra_driver"),
                    _ => go_program("gpu-driver"),
                });
                command
                    .arg(root)
                    .arg(cdi)
                    .env("KUBECONFIG", api.node_kubeconfig())
                    .env("NODE_NAME", node);
                command
            }
        };
        command
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .unwrap(),
            )
            .kill_on_drop(true);
        command.spawn().unwrap()
    }
}

/// How many devices the driver prepared, from its log: JSON lines with
/// message "prepared", or lines "prepared UID DEVICE".
pub fn prepared_devices(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(r#""message":"prepared""#) || l.starts_with("prepared "))
        .count()
}
