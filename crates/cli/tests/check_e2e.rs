//! `nodeplugins check SOCKET` against real plugins: the example plugins and
//! grpcio plugins that pass, and plugins that break a rule, each failing the
//! check that names the rule.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use tokio::process::Command;

async fn check(socket: &Path) -> (Option<i32>, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .arg("check")
        .arg(socket)
        .args(["-o", "json"])
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

fn verdicts(report: &serde_json::Value) -> Vec<(String, bool)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["passed"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn failed<'a>(report: &'a serde_json::Value, name: &str) -> &'a str {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name && c["passed"] == false)
        .unwrap_or_else(|| panic!("no failed {name} check in {report}"))["detail"]
        .as_str()
        .unwrap()
}

async fn exists(path: &Path) {
    eventually("socket", TIMEOUT, || async { path.exists().then_some(()) }).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_plugins_and_a_grpcio_csi_driver_pass() {
    let root = tempfile::tempdir().unwrap();
    let mut dra = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
    dra.arg("--root-dir").arg(root.path());
    let _dra = ChildProcess::spawn("example-dra-driver", dra);
    let mut device = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    device
        .arg("--root-dir")
        .arg(root.path())
        .args(["--via", "registry"]);
    let _device = ChildProcess::spawn("example-device-plugin", device);
    let csi_socket = root.path().join("py-csi.sock");
    let mut csi = python_env().script("registration_server.py");
    csi.arg(&csi_socket)
        .args(["--type", "CSIPlugin", "--name", "py.example.com"]);
    let mut csi = ChildProcess::spawn("registration_server.py", csi);
    csi.wait_for_line(TIMEOUT, |l| l == "READY").await;

    let registry = root.path().join("plugins_registry");
    let cases = [
        (
            registry.join("dra.example.com-reg.sock"),
            "serves v1alpha1.DRAResourceHealth",
        ),
        (registry.join("example.com_device-reg.sock"), "ListAndWatch"),
        (csi_socket, "NodeGetInfo"),
    ];
    for (socket, last) in cases {
        exists(&socket).await;
        let (code, report) = check(&socket).await;
        assert_eq!(code, Some(0), "{report:#}");
        let checks = verdicts(&report);
        assert!(checks.iter().all(|(_, passed)| *passed), "{report:#}");
        assert_eq!(checks.last().unwrap().0, last, "{report:#}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_broken_rule_fails_its_own_check() {
    let root = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str, &str)] = &[
        // Lists a DRA service it does not serve.
        (
            &[
                "--type",
                "DRAPlugin",
                "--name",
                "gpu.example.com",
                "--versions",
                "v1.DRAPlugin",
            ],
            "serves v1.DRAPlugin",
            "Unimplemented",
        ),
        (
            &[
                "--type",
                "DRAPlugin",
                "--name",
                "gpu.example.com",
                "--versions",
                "1.0.0",
            ],
            "versions",
            "none of services supported",
        ),
        (
            &[
                "--type",
                "DevicePlugin",
                "--name",
                "gpu",
                "--versions",
                "v1beta1",
            ],
            "name",
            "is not an extended resource name",
        ),
        (
            &["--type", "FooPlugin", "--name", "foo"],
            "type",
            "no handler registered for plugin type",
        ),
        (
            &[
                "--type",
                "DRAPlugin",
                "--name",
                "gpu.example.com",
                "--endpoint",
                "relative.sock",
                "--versions",
                "v1.DRAPlugin",
            ],
            "endpoint",
            "not an absolute path",
        ),
        (&["--hang-get-info"], "GetInfo", "no answer within 1s"),
    ];
    for (n, (args, name, why)) in cases.iter().enumerate() {
        let socket = root.path().join(format!("case-{n}.sock"));
        let mut command = python_env().script("registration_server.py");
        command.arg(&socket).args(*args);
        let mut plugin = ChildProcess::spawn("registration_server.py", command);
        plugin.wait_for_line(TIMEOUT, |l| l == "READY").await;
        let (code, report) = check(&socket).await;
        assert_eq!(code, Some(1), "{report:#}");
        assert!(failed(&report, name).contains(why), "{report:#}");
    }

    let file = root.path().join("not-a-socket");
    std::fs::write(&file, "x").unwrap();
    let (code, report) = check(&file).await;
    assert_eq!(code, Some(1));
    assert!(failed(&report, "socket").contains("is not a Unix socket"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plugin_author_guides_examples_pass_the_check() {
    let root = tempfile::tempdir().unwrap();
    let mut command = Command::new(nodeplugins_test_support::binaries::example(
        "nodeplugins-sdk",
        "minimal_dra_driver",
    ));
    command.arg(root.path()).arg("pod-1");
    let _driver = ChildProcess::spawn("minimal_dra_driver", command);
    let socket = root
        .path()
        .join("plugins_registry/minimal.example.com-pod-1-reg.sock");
    exists(&socket).await;
    let (code, report) = check(&socket).await;
    assert_eq!(code, Some(0), "{report:#}");
}
