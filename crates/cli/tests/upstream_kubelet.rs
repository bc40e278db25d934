//! Our SDK plugins against the kubelet's own code: `interop/bin/kubelet-plugins`
//! runs the kubelet's plugin manager, DRA plugin manager and device-plugin
//! registration server, unmodified from the Kubernetes Go modules, as a
//! separate process. Our `nodeplugins-csi-registrar` + `example-csi-driver`,
//! `example-device-plugin` and `example-dra-driver` must register with it and
//! answer the kubelet's own clients.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{kubelet_claim_call, signal};

use std::path::Path;
use std::time::Duration;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::{GoProcess, ts};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::TIMEOUT;
use serde_json::{Value, json};
use tokio::process::Command;

/// The kubelet side on `root`, once it serves.
async fn start_kubelet(root: &Path) -> (GoProcess, Value) {
    let mut kubelet = GoProcess::start(
        "kubelet-plugins",
        [
            "--registry-dir",
            root.join("plugins_registry").to_str().unwrap(),
            "--kubelet-sock",
            root.join("device-plugins/kubelet.sock").to_str().unwrap(),
        ],
    );
    let started = kubelet.event(TIMEOUT, "started", |_| true).await;
    (kubelet, started)
}

fn sdk(name: &str, args: &[String]) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", name));
    command.args(args);
    ChildProcess::spawn(name, command)
}

#[tokio::test(flavor = "multi_thread")]
async fn our_csi_registrar_and_csi_driver_register_with_the_kubelets_plugin_manager() {
    let root = tempfile::tempdir().unwrap();
    let (mut kubelet, _) = start_kubelet(root.path()).await;
    let csi = root.path().join("plugins/csi.example.com/csi.sock");
    std::fs::create_dir_all(csi.parent().unwrap()).unwrap();
    let _driver = sdk(
        "example-csi-driver",
        &[
            format!("--endpoint=unix://{}", csi.display()),
            "--node-id=node-7".into(),
        ],
    );
    let registrar = sdk(
        "nodeplugins-csi-registrar",
        &[
            format!("--csi-address={}", csi.display()),
            format!("--kubelet-registration-path={}", csi.display()),
            format!(
                "--plugin-registration-path={}",
                root.path().join("plugins_registry").display()
            ),
        ],
    );

    let registered = kubelet
        .event(TIMEOUT, "registered", |v| v["type"] == "CSIPlugin")
        .await;
    assert_eq!(registered["name"], "csi.example.com");
    assert_eq!(registered["endpoint"], csi.to_str().unwrap());
    assert_eq!(registered["versions"], json!(["1.0.0"]));
    assert_eq!(registered["error"], "");
    // The kubelet's side dialled the driver with authority "localhost" and
    // got its node information.
    let info = kubelet.event(TIMEOUT, "csi_node_info", |_| true).await;
    assert_eq!(info["node_id"], "node-7");
    assert_eq!(info["max_volumes_per_node"], 8);

    // The registrar removes its socket on SIGTERM; the kubelet deregisters.
    signal(&registrar, "-TERM").await;
    let gone = kubelet
        .event(TIMEOUT, "deregistered", |v| v["type"] == "CSIPlugin")
        .await;
    assert_eq!(gone["name"], "csi.example.com");
}

#[tokio::test(flavor = "multi_thread")]
async fn our_device_plugin_registers_with_the_kubelets_server_allocates_and_comes_back_after_a_kubelet_restart()
 {
    const RESOURCE: &str = "example.com/device";
    let root = tempfile::tempdir().unwrap();
    let (mut kubelet, _) = start_kubelet(root.path()).await;
    let plugin = sdk(
        "example-device-plugin",
        &[
            "--root-dir".into(),
            root.path().display().to_string(),
            "--devices".into(),
            "4".into(),
        ],
    );

    let connected = kubelet
        .event(TIMEOUT, "device_plugin_connected", |v| {
            v["resource"] == RESOURCE
        })
        .await;
    assert_eq!(connected["get_preferred_allocation"], true);
    let devices = kubelet
        .event(TIMEOUT, "devices", |v| v["resource"] == RESOURCE)
        .await;
    let listed: Vec<(String, String, i64)> = devices["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["id"].as_str().unwrap().to_string(),
                d["health"].as_str().unwrap().to_string(),
                d["numa"][0].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("dev-0".into(), "Healthy".into(), 0),
            ("dev-1".into(), "Healthy".into(), 1),
            ("dev-2".into(), "Healthy".into(), 0),
            ("dev-3".into(), "Healthy".into(), 1),
        ]
    );

    // The kubelet's client: preferred allocation, Allocate, PreStartContainer.
    let preferred = kubelet
        .request(
            TIMEOUT,
            "preferred",
            json!({"resource": RESOURCE, "available": ["dev-0", "dev-1", "dev-2", "dev-3"], "size": 2}),
        )
        .await;
    assert_eq!(preferred["error"], "", "{preferred}");
    assert_eq!(
        preferred["response"]["container_responses"][0]["deviceIDs"],
        json!(["dev-0", "dev-2"]),
        "one NUMA node"
    );
    let allocated = kubelet
        .request(
            TIMEOUT,
            "allocate",
            json!({"resource": RESOURCE, "devices": ["dev-0", "dev-2"]}),
        )
        .await;
    assert_eq!(allocated["error"], "", "{allocated}");
    let container = &allocated["response"]["container_responses"][0];
    assert_eq!(container["envs"]["EXAMPLE_DEVICES"], "dev-0,dev-2");
    let prestart = kubelet
        .request(
            TIMEOUT,
            "prestart",
            json!({"resource": RESOURCE, "devices": ["dev-0"]}),
        )
        .await;
    assert_eq!(prestart["error"], "", "{prestart}");

    // A health change reaches the kubelet through ListAndWatch.
    signal(&plugin, "-USR1").await;
    let flipped = kubelet
        .event(TIMEOUT, "devices", |v| {
            v["devices"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["health"] == "Unhealthy"))
        })
        .await;
    assert_eq!(flipped["resource"], RESOURCE);

    // A kubelet restart removes every socket in device-plugins/ and serves a
    // new kubelet.sock; our plugin must notice it and register again (how
    // fast is a benchmark's figure: `cargo bench --bench kubelet_restart`).
    kubelet.kill().await;
    let (mut kubelet, started) = start_kubelet(root.path()).await;
    let back = kubelet
        .event(TIMEOUT, "device_plugin_connected", |v| {
            v["resource"] == RESOURCE
        })
        .await;
    let gap = Duration::from_nanos(u64::try_from(ts(&back) - ts(&started)).unwrap_or(0));
    println!("device plugin back on the restarted kubelet after {gap:?}");
    let allocated = kubelet
        .request(
            TIMEOUT,
            "allocate",
            json!({"resource": RESOURCE, "devices": ["dev-1"]}),
        )
        .await;
    assert_eq!(allocated["error"], "", "{allocated}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelets_dra_client_prepares_and_unprepares_on_our_dra_driver_in_v1_and_v1beta1() {
    let root = tempfile::tempdir().unwrap();
    let (mut kubelet, _) = start_kubelet(root.path()).await;
    for (driver, versions) in [
        ("dra.example.com", "v1,v1beta1"),
        ("dra-beta.example.com", "v1beta1"),
    ] {
        let _plugin = sdk(
            "example-dra-driver",
            &[
                "--root-dir".into(),
                root.path().display().to_string(),
                "--driver-name".into(),
                driver.into(),
                "--api".into(),
                versions.into(),
            ],
        );
        let registered = kubelet
            .event(TIMEOUT, "registered", |v| v["name"] == driver)
            .await;
        assert_eq!(registered["type"], "DRAPlugin");
        assert_eq!(registered["error"], "", "{registered}");
        let advertised = registered["versions"].as_array().unwrap();
        let service = if versions == "v1beta1" {
            "v1beta1.DRAPlugin"
        } else {
            "v1.DRAPlugin"
        };
        assert!(advertised.contains(&json!(service)), "{registered}");

        let result =
            kubelet_claim_call(&mut kubelet, "prepare", driver, "gpu-claim", "uid-1").await;
        let device = result["devices"][0]["device_name"].as_str().unwrap();
        assert!(device.starts_with("gpu-"), "{result}");
        assert_eq!(
            result["devices"][0]["cdi_device_ids"],
            json!([format!("{driver}/gpu={device}")])
        );
        kubelet_claim_call(&mut kubelet, "unprepare", driver, "gpu-claim", "uid-1").await;
    }
    // Our driver's health stream reaches the kubelet's DRA plugin manager.
    let health = kubelet
        .event(TIMEOUT, "dra_health", |v| v["driver"] == "dra.example.com")
        .await;
    assert_eq!(health["devices"].as_array().unwrap().len(), 4);
}
