//! `nodeplugins demo` runs to completion on a fresh root, as a first-time
//! user would run it after building the workspace.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nodeplugins_test_support::binaries::binary;
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_narrates_every_step_and_exits_zero() {
    // The demo finds the examples next to the nodeplugins binary.
    for name in [
        "example-csi-driver",
        "nodeplugins-csi-registrar",
        "example-device-plugin",
        "example-dra-driver",
    ] {
        binary("nodeplugins-sdk-bins", name);
    }
    let root = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
            .args(["demo", "--root-dir"])
            .arg(root.path())
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for step in [
        "CSI driver csi.example.com registered",
        "resource example.com/device: capacity 4, allocatable 4",
        "allocated dev-",
        "DRA driver dra.example.com connected over v1.DRAPlugin",
        "prepared claim default/demo-claim/0f2c-demo: CDI dra.example.com/gpu=gpu-",
        "pod-resources API: pod default/demo-pod container main holds dev-",
        "connection drop seen at once",
        "reconnected and cleanup cancelled",
        "prepare works again: true",
        "done: 2 registration sockets, 1 CSI driver, 1 device resource, 1 DRA driver",
    ] {
        assert!(stdout.contains(step), "missing {step:?} in:\n{stdout}");
    }
}
