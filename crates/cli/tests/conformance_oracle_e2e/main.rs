//! The conformance tool's verdicts against the kubelet's own code. Each
//! test runs `faulty-plugin` with one fault behind the kubelet v1.37.2's
//! code in `interop/cmd/kubelet-pods`: its device manager serving
//! `kubelet.sock`, its plugin manager with the DRA plugin manager on
//! `plugins_registry`, its DRA manager, and its pod admission, behind a
//! pod informer on a real API server. A fault the tool FAILs is one the
//! kubelet mishandles there (refuses the plugin, misreports its devices,
//! refuses or never starts a pod, holds a claim); a fault it WARNs is one
//! the kubelet copes with (the pod is admitted, the claim prepared). The
//! tool's verdict for the same fault is checked in `conformance_e2e` (the
//! fault tables).

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
mod csi;
mod device;
mod dra;
mod health;
mod registration;

use std::path::Path;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::kube_api::KubeApi;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::TIMEOUT;
use serde_json::{Value, json};
use tokio::process::Command;

const NODE: &str = "node-ref";

/// The API server for `NODE`, schedulable, with the default account.
async fn cluster() -> KubeApi {
    nodeplugins_test_support::init_tracing();
    let api = KubeApi::start(NODE).await;
    api.create_schedulable_node(NODE).await;
    api.ensure_default_service_account("default").await;
    api
}

/// A temporary kubelet root.
fn root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("oracle-")
        .tempdir()
        .unwrap()
}

/// The kubelet's pod admission, device manager, plugin manager and DRA
/// manager serving `NODE` from `root`, once started.
async fn kubelet(api: &KubeApi, root: &Path) -> GoProcess {
    let kubeconfig = api.kubeconfig_of_node(NODE);
    let mut kubelet = GoProcess::start(
        "kubelet-pods",
        [
            "--root-dir",
            root.to_str().unwrap(),
            "--state-dir",
            root.join("dra-state").to_str().unwrap(),
            "--node-name",
            NODE,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
    );
    kubelet.event(TIMEOUT, "started", |_| true).await;
    kubelet
}

/// `faulty-plugin MODE` for the kubelet at `root`, with `fault`.
fn faulty_plugin(root: &Path, mode: &str, fault: &str) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-test-support", "faulty-plugin"));
    command.arg(mode);
    match mode {
        "device" => command
            .arg("--kubelet-dir")
            .arg(root.join("device-plugins")),
        _ => command
            .arg("--registry-dir")
            .arg(root.join("plugins_registry"))
            .arg("--plugin-dir")
            .arg(root.join("plugins/faulty")),
    };
    command.args(["--fault", fault]);
    ChildProcess::spawn("faulty-plugin", command)
}

/// Creates pod `name` bound to `NODE`, its container `main` asking for
/// `limits` and using `claims` (pod claim name, ResourceClaim name).
/// Returns its UID.
async fn bound_pod(api: &KubeApi, name: &str, limits: Value, claims: &[(&str, &str)]) -> String {
    let pod_claims: Vec<Value> = claims
        .iter()
        .map(|(entry, claim)| json!({"name": entry, "resourceClaimName": claim}))
        .collect();
    let uses: Vec<Value> = claims
        .iter()
        .map(|(entry, _)| json!({"name": entry}))
        .collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": false,
            "resourceClaims": pod_claims,
            "containers": [{"name": "main", "image": "example.invalid/app",
                "resources": {"limits": limits.clone(), "requests": limits, "claims": uses}}],
        },
    });
    let created = api
        .admin("POST", "/api/v1/namespaces/default/pods", Some(&pod))
        .await;
    created["metadata"]["uid"].as_str().unwrap().to_string()
}
