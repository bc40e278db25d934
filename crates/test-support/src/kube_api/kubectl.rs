//! `kubectl`, built from the Kubernetes module in `interop/`, as the
//! cluster's admin: the client whose `logs`, `exec`, `attach` and
//! `port-forward` go through the API server to a node's kubelet API.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::KubeApi;
use crate::go_programs::go_program;
use crate::wait::TIMEOUT;

/// What a `kubectl` run gave.
#[derive(Debug)]
pub struct KubectlOutput {
    /// Its exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// What it wrote to stdout.
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
}

impl KubeApi {
    /// `kubectl --kubeconfig <admin> ARGS...`, not started: for a test
    /// that reads its output as it comes (`logs -f`, `port-forward`). It is
    /// killed when dropped.
    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(go_program("kubectl"));
        command
            .arg("--kubeconfig")
            .arg(self.admin_kubeconfig())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// `kubectl ARGS...` as the admin run to its end, `stdin` written to
    /// its standard input and closed; fails the test when it does not end
    /// within [`TIMEOUT`].
    pub async fn kubectl(&self, args: &[&str], stdin: &str) -> KubectlOutput {
        let mut command = self.kubectl_command(args);
        command.stdin(Stdio::piped());
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("run kubectl {args:?}: {e}"));
        let mut input = child.stdin.take().expect("piped stdin");
        input
            .write_all(stdin.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("write kubectl {args:?}'s stdin: {e}"));
        drop(input);
        let output = tokio::time::timeout(TIMEOUT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not end within {TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("wait for kubectl {args:?}: {e}"));
        KubectlOutput {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}
