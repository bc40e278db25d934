//! Device plugins end to end with separate processes: `example-device-plugin`
//! against `nodeplugins run`, including an agent restart.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::path::Path;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use tokio::process::Command;

fn example_plugin(root: &Path, via: &str) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    command
        .arg("--root-dir")
        .arg(root)
        .args(["--devices", "4", "--via", via]);
    ChildProcess::spawn("example-device-plugin", command)
}

async fn resource(root: &Path, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    eventually("resource state", TIMEOUT, || async {
        let out = cli(root, &["resources", "-o", "json"]).await;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let r = json["resources"]
            .as_array()?
            .iter()
            .find(|r| r["name"] == "example.com/device")?
            .clone();
        pred(&r).then_some(r)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn example_device_plugin_allocates_flips_health_and_survives_an_agent_restart() {
    let root = tempfile::tempdir().unwrap();
    let mut first = agent(root.path());
    let plugin = example_plugin(root.path(), "kubelet-sock");
    let r = resource(root.path(), |r| r["allocatable"] == 4).await;
    let numa: Vec<i64> = r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["numa_nodes"][0].as_i64().unwrap())
        .collect();
    assert_eq!(numa, [0, 1, 0, 1]);

    let out = cli(
        root.path(),
        &[
            "allocate",
            "--pod",
            "p1",
            "--container",
            "c",
            "example.com/device=2",
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
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let a = &reply["allocations"][0];
    assert_eq!(
        a["devices"],
        serde_json::json!(["dev-0", "dev-2"]),
        "both on NUMA node 0"
    );
    assert_eq!(
        a["cdi_devices"],
        serde_json::json!(["example.com/device=dev-0", "example.com/device=dev-2"])
    );
    assert_eq!(a["envs"]["EXAMPLE_DEVICES"], "dev-0,dev-2");

    signal(&plugin, "-USR1").await;
    resource(root.path(), |r| r["allocatable"] == 3 && r["capacity"] == 4).await;
    signal(&plugin, "-USR2").await;
    resource(root.path(), |r| r["allocatable"] == 4).await;

    // Restart the agent: kubelet.sock is re-created, the plugin registers
    // again by itself, and the allocation is still there.
    // Several restarts in a row: each deletes the plugin's socket at start-up,
    // and the plugin must come back every time.
    for _ in 0..3 {
        signal(&first, "-TERM").await;
        assert_eq!(first.wait(TIMEOUT).await, Some(0));
        first = agent(root.path());
        let back = resource(root.path(), |r| {
            r["allocatable"] == 4 && r["instances"].as_array().is_some_and(|i| i.len() == 1)
        })
        .await;
        assert_eq!(back["allocated"], 2, "the allocation survived the restart");
    }
    let again = cli(
        root.path(),
        &[
            "allocate",
            "--pod",
            "p1",
            "--container",
            "c",
            "example.com/device=2",
            "-o",
            "json",
        ],
    )
    .await;
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        again["allocations"][0]["devices"],
        serde_json::json!(["dev-0", "dev-2"])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn example_device_plugin_registers_through_plugins_registry() {
    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let _plugin = example_plugin(root.path(), "registry");
    let r = resource(root.path(), |r| r["allocatable"] == 4).await;
    assert!(
        r["instances"][0]["get_preferred_allocation_available"]
            .as_bool()
            .unwrap()
    );
    let status = cli(root.path(), &["status", "-o", "json"]).await;
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let plugin = status["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "DevicePlugin")
        .cloned()
        .unwrap();
    assert_eq!(plugin["state"], "registered");
    assert_eq!(plugin["name"], "example.com/device");
}

/// A plugin of the SDK, in this process, with one healthy device.
struct SdkPlugin;

#[nodeplugins_sdk::async_trait]
impl nodeplugins_sdk::device_plugin::DevicePluginService for SdkPlugin {
    async fn allocate(
        &self,
        _devices: Vec<String>,
    ) -> Result<
        nodeplugins_sdk::api::deviceplugin::v1beta1::ContainerAllocateResponse,
        nodeplugins_sdk::tonic::Status,
    > {
        Ok(Default::default())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sdk_device_plugin_serves_once_started_and_sees_its_registration_accepted_or_refused() {
    use nodeplugins_sdk::RegistrationState;
    use nodeplugins_sdk::api::deviceplugin::v1beta1::Device;
    use nodeplugins_sdk::device_plugin::{DevicePluginServer, Devices};
    use nodeplugins_test_support::wait::watch_until;

    let root = tempfile::tempdir().unwrap();
    let _agent = agent(root.path());
    let devices = || {
        Devices::new(vec![Device {
            id: "d0".into(),
            health: "Healthy".into(),
            topology: None,
        }])
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    // The kubelet refuses a resource name that is not an extended
    // resource name; the plugin sees why.
    let refused = DevicePluginServer::builder("not-extended", SdkPlugin)
        .root_dir(root.path())
        .devices(devices())
        .start(shutdown.clone())
        .await
        .unwrap();
    assert!(
        std::os::unix::net::UnixStream::connect(refused.socket()).is_ok(),
        "start returned before the plugin's socket answers"
    );
    let mut state = refused.registration();
    let seen = watch_until("the refusal", &mut state, TIMEOUT, |s| {
        matches!(s, RegistrationState::Rejected(_))
    })
    .await;
    let RegistrationState::Rejected(reason) = seen else {
        unreachable!()
    };
    assert!(reason.contains("not-extended"), "{reason}");

    let accepted = DevicePluginServer::builder("example.com/sdk", SdkPlugin)
        .root_dir(root.path())
        .devices(devices())
        .start(shutdown.clone())
        .await
        .unwrap();
    let mut state = accepted.registration();
    watch_until("the registration", &mut state, TIMEOUT, |s| {
        *s == RegistrationState::Registered
    })
    .await;
    shutdown.cancel();
    refused.wait().await.unwrap();
    accepted.wait().await.unwrap();
}
