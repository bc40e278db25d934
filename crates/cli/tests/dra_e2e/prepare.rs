//! Prepare and unprepare through the CLI: `example-dra-driver` (and its
//! device health), a grpcio driver in both API versions.

use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::TIMEOUT;

use super::common::{agent, cli, dra_driver_when, signal};
use super::{DRIVER, connected, example_driver};

#[tokio::test(flavor = "multi_thread")]
async fn example_dra_driver_prepares_unprepares_and_reports_health_through_the_cli() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let plugin = example_driver(root.path(), None);
    let d = dra_driver_when(root.path(), DRIVER, |d| {
        connected(d, "dra.sock") && d["devices"].as_array().is_some_and(|v| v.len() == 4)
    })
    .await;
    assert_eq!(d["instances"][0]["service"], "v1.DRAPlugin");
    assert_eq!(d["instances"][0]["health_service"], "v1.DRAResourceHealth");
    assert_eq!(
        d["instances"][0]["endpoint"].as_str().unwrap(),
        root.path()
            .join("plugins/dra.example.com/dra.sock")
            .to_str()
            .unwrap()
    );
    assert!(
        d["devices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["health"] == "Healthy")
    );

    let out = cli(
        root.path(),
        &[
            "dra",
            "prepare",
            "--driver",
            DRIVER,
            "--claim",
            "default/gpu-claim/uid-1",
            "-o",
            "json",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let claim = &json["claims"][0];
    assert_eq!(claim["claim"]["uid"], "uid-1");
    assert_eq!(claim["error"], serde_json::Value::Null);
    let device = claim["devices"][0]["device"].as_str().unwrap().to_string();
    assert!(device.starts_with("gpu-"), "{device}");
    assert_eq!(
        claim["devices"][0]["cdi_device_ids"][0],
        format!("dra.example.com/gpu={device}")
    );

    // The table shows the CDI id; a refused claim makes the command fail but
    // the other claim's result is still printed.
    let out = cli(
        root.path(),
        &[
            "dra",
            "prepare",
            "--driver",
            DRIVER,
            "--claim",
            "default/gpu-claim/uid-1",
            "--claim",
            "default/fail-me/uid-2",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(&format!("dra.example.com/gpu={device}")),
        "{table}"
    );
    assert!(table.contains("refused"), "{table}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 2 claim(s) could not be prepared"));

    let out = cli(
        root.path(),
        &[
            "dra",
            "unprepare",
            "--driver",
            DRIVER,
            "--claim",
            "default/gpu-claim/uid-1",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("unprepared"));

    let out = cli(
        root.path(),
        &[
            "dra",
            "prepare",
            "--driver",
            "missing.example.com",
            "--claim",
            "a/b/c",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("DRA driver missing.example.com is not registered")
    );

    // SIGUSR1: the driver reports gpu-0 unhealthy, with its reason.
    signal(&plugin, "-USR1").await;
    let d = dra_driver_when(root.path(), DRIVER, |d| {
        d["devices"]
            .as_array()
            .is_some_and(|v| v.iter().any(|h| h["health"] == "Unhealthy"))
    })
    .await;
    let sick = d["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["health"] == "Unhealthy")
        .unwrap();
    assert_eq!(sick["device"], "gpu-0");
    assert!(sick["message"].as_str().unwrap().contains("XID 79"));
    let out = cli(root.path(), &["dra", "drivers"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("Unhealthy"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grpcio_dra_driver_prepares_through_the_agent_in_both_versions() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let registry = root.path().join("plugins_registry");
    let plugins = root.path().join("plugins");
    std::fs::create_dir_all(&registry).unwrap();
    std::fs::create_dir_all(&plugins).unwrap();
    for api in ["v1", "v1beta1"] {
        let name = format!("{api}.python.example.com");
        let mut command = python_env().script("dra_driver.py");
        command
            .arg("--registration-socket")
            .arg(registry.join(format!("{name}-reg.sock")))
            .arg("--service-socket")
            .arg(plugins.join(format!("{api}.sock")))
            .args(["--name", &name, "--api", api]);
        let mut python = ChildProcess::spawn("dra_driver.py", command);
        python.wait_for_line(TIMEOUT, |l| l == "READY").await;
        python
            .wait_for_line(TIMEOUT, |l| l.starts_with("NOTIFY registered=True"))
            .await;
        let d = dra_driver_when(root.path(), &name, |d| connected(d, &format!("{api}.sock"))).await;
        assert_eq!(d["instances"][0]["service"], format!("{api}.DRAPlugin"));

        let out = cli(
            root.path(),
            &[
                "dra",
                "prepare",
                "--driver",
                &name,
                "--claim",
                "ns/ok/u1",
                "--claim",
                "ns/fail-x/u2",
                "-o",
                "json",
            ],
        )
        .await;
        assert_eq!(out.status.code(), Some(1), "{api}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["claims"][0]["devices"][0]["device"], "py-u1", "{api}");
        assert_eq!(json["claims"][0]["devices"][0]["pool"], "py-pool");
        assert_eq!(
            json["claims"][0]["devices"][0]["cdi_device_ids"][0],
            format!("{name}/gpu=py-u1")
        );
        assert_eq!(json["claims"][1]["error"], "python driver refuses fail-x");
        python.wait_for_line(TIMEOUT, |l| l == "PREPARE u1").await;

        let out = cli(
            root.path(),
            &["dra", "unprepare", "--driver", &name, "--claim", "ns/ok/u1"],
        )
        .await;
        assert!(
            out.status.success(),
            "{api}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        python.wait_for_line(TIMEOUT, |l| l == "UNPREPARE u1").await;
    }
}
