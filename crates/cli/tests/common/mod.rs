//! Helpers shared by the end-to-end tests: the `nodeplugins` binary as an
//! agent process and as a client command.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;

use nodeplugins_test_support::process::ChildProcess;
use tokio::process::Command;

/// `nodeplugins run --root-dir ROOT` as a child process.
pub fn agent(root: &Path) -> ChildProcess {
    agent_with(root, &[])
}

/// `nodeplugins run --root-dir ROOT ARGS...` as a child process.
pub fn agent_with(root: &Path, args: &[&str]) -> ChildProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nodeplugins"));
    command
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--root-dir"])
        .arg(root)
        .args(args)
        .env("RUST_LOG", "info");
    ChildProcess::spawn("nodeplugins run", command)
}

/// `nodeplugins ARGS... --root-dir ROOT`, run to completion.
pub async fn cli(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args(args)
        .arg("--root-dir")
        .arg(root)
        .output()
        .await
        .unwrap()
}

/// `nodeplugins status -o json`, or `None` while the agent does not answer.
pub async fn status_json(root: &Path) -> Option<serde_json::Value> {
    let output = cli(root, &["status", "-o", "json"]).await;
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).unwrap())
}

/// Sends `sig` (such as `-TERM`) to `child`.
pub async fn signal(child: &ChildProcess, sig: &str) {
    Command::new("kill")
        .args([sig, &child.pid().unwrap().to_string()])
        .status()
        .await
        .unwrap();
}
