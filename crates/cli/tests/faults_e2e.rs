//! Process-level faults: the agent SIGKILLed at random points while it
//! allocates, then restarted (every allocation it reported survives, and no
//! device is given twice), the checkpoint damaged while the agent is down,
//! and the admin socket reached by another user.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::shared_dir::{copy_program, shared_tempdir};
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use rand::{Rng, SeedableRng};
use tokio::process::Command;

const RESOURCE: &str = "example.com/device";

/// Waits until the plugin has listed all 8 devices healthy to the running
/// agent. Capacity alone is not enough: a plugin re-registering after a
/// restart may leave the devices briefly unhealthy, and a container asking
/// again for its devices then is refused.
async fn all_healthy(root: &Path) -> serde_json::Value {
    resource_when(root, RESOURCE, |r| {
        r["capacity"] == 8 && r["allocatable"] == 8
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_killed_while_allocating_keeps_every_allocation_it_reported() {
    let root = tempfile::tempdir().unwrap();
    let mut plugin = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    plugin
        .arg("--root-dir")
        .arg(root.path())
        .args(["--devices", "8"]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(2026);
    // pod → the devices the agent said it got.
    let mut reported: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut agent = agent(root.path());
    let _plugin = ChildProcess::spawn("example-device-plugin", plugin);
    for round in 0..6 {
        all_healthy(root.path()).await;
        // Allocate one device per pod, as fast as possible, and kill the
        // agent at a random moment in the middle of it.
        let kill_after = Duration::from_millis(rng.random_range(0..40));
        let root_path = root.path().to_owned();
        let allocations = tokio::spawn(async move {
            let mut got = Vec::new();
            for i in 0..8 {
                let pod = format!("pod-{round}-{i}");
                let request = main_container(&pod, RESOURCE, 1);
                match nodeplugins::admin::allocate(&root_path, &request).await {
                    Ok(reply) => got.push((pod, reply.allocations[0].devices.clone())),
                    Err(_) => break,
                }
            }
            got
        });
        tokio::time::sleep(kill_after).await;
        signal(&agent, "-KILL").await;
        agent.wait(TIMEOUT).await;
        for (pod, devices) in allocations.await.unwrap() {
            reported.insert(pod, devices);
        }
        agent = common::agent(root.path());
        all_healthy(root.path()).await;

        // Every allocation reported so far is still held, with the same devices.
        let mut held = BTreeSet::new();
        for (pod, devices) in &reported {
            let request = main_container(pod, RESOURCE, 1);
            let reply = nodeplugins::admin::allocate(root.path(), &request)
                .await
                .unwrap_or_else(|e| panic!("round {round}: {pod} lost: {e}"));
            assert_eq!(
                &reply.allocations[0].devices, devices,
                "round {round}: {pod}"
            );
            for device in devices {
                assert!(
                    held.insert(device.clone()),
                    "round {round}: {device} given twice"
                );
            }
        }
        // Free everything before the next round, so devices stay available.
        if reported.len() >= 6 {
            for pod in reported.keys() {
                nodeplugins::admin::release(root.path(), pod).await.unwrap();
            }
            reported.clear();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_socket_refuses_other_users() {
    // Another user must reach the CLI and the root directory's parent
    // wherever the checkout and TMPDIR are: both go in a directory made for
    // the test that everyone can enter. The root directory itself is 0700,
    // as the agent is run.
    let shared = shared_tempdir();
    let cli_copy = copy_program(Path::new(env!("CARGO_BIN_EXE_nodeplugins")), shared.path());
    let root = shared.path().join("root");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&root)
        .unwrap();
    let _agent = agent(&root);
    eventually("agent answering", TIMEOUT, || status_json(&root)).await;
    let me = std::fs::metadata(root.join("nodeplugins/admin.sock"))
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();
    assert_eq!(
        me, 0,
        "this test needs root to act as another user; CI runs it as root"
    );
    let as_nobody = |args: &[&str]| {
        let mut command = std::process::Command::new(&cli_copy);
        command.args(args).arg("--root-dir").arg(&root);
        std::os::unix::process::CommandExt::uid(&mut command, 65534);
        command.output().unwrap()
    };
    // The CLI itself runs for that user...
    let out = as_nobody(&["--version"]);
    assert!(
        out.status.success(),
        "the copied CLI runs as another user: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ...the directory (0700) and the socket (0600) keep it out...
    let out = as_nobody(&["status"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Permission denied"), "{stderr}");
    // ...and if someone opens them up, the agent still checks who is asking.
    let all = std::fs::Permissions::from_mode(0o777);
    std::fs::set_permissions(&root, all.clone()).unwrap();
    std::fs::set_permissions(root.join("nodeplugins"), all.clone()).unwrap();
    std::fs::set_permissions(root.join("nodeplugins/admin.sock"), all).unwrap();
    let out = as_nobody(&["status"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the agent answered: permission denied"),
        "{stderr}"
    );
    // The owner is still answered.
    assert!(status_json(&root).await.is_some());
}

fn corrupt_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.contains(".corrupt-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_checkpoint_loses_nothing_and_two_damaged_copies_are_reported() {
    let root = tempfile::tempdir().unwrap();
    let plugins = root.path().join("device-plugins");
    let checkpoint = plugins.join("nodeplugins_device_checkpoint");
    let backup = plugins.join("nodeplugins_device_checkpoint.backup");
    let mut plugin = Command::new(binary("nodeplugins-sdk-bins", "example-device-plugin"));
    plugin
        .arg("--root-dir")
        .arg(root.path())
        .args(["--devices", "8"]);
    let _plugin = ChildProcess::spawn("example-device-plugin", plugin);
    let mut agent = agent(root.path());
    all_healthy(root.path()).await;
    let mut held = BTreeMap::new();
    for (pod, count) in [("pod-a", 1), ("pod-b", 2), ("pod-c", 1)] {
        let request = main_container(pod, RESOURCE, count);
        let reply = nodeplugins::admin::allocate(root.path(), &request)
            .await
            .unwrap();
        held.insert(pod, reply.allocations[0].devices.clone());
    }

    // Truncated while the agent is down: everything comes back from the backup.
    signal(&agent, "-KILL").await;
    agent.wait(TIMEOUT).await;
    let good = std::fs::read(&checkpoint).unwrap();
    std::fs::write(&checkpoint, &good[..good.len() / 2]).unwrap();
    agent = common::agent(root.path());
    assert_eq!(all_healthy(root.path()).await["allocated"], 4);
    let status = status_json(root.path()).await.unwrap();
    let warning = status["device_checkpoint_error"].as_str().unwrap();
    assert!(
        warning.contains("restored everything from its backup"),
        "{warning}"
    );
    let text = cli(root.path(), &["status"]).await;
    assert!(String::from_utf8_lossy(&text.stdout).contains("WARNING: device checkpoint"));
    for (pod, devices) in &held {
        let request = main_container(pod, RESOURCE, devices.len());
        let reply = nodeplugins::admin::allocate(root.path(), &request)
            .await
            .unwrap();
        assert_eq!(
            &reply.allocations[0].devices, devices,
            "{pod} kept its devices"
        );
    }
    assert_eq!(
        std::fs::read(&checkpoint).unwrap(),
        good,
        "the checkpoint was repaired"
    );
    assert_eq!(corrupt_files(&plugins).len(), 1, "the damaged copy is kept");

    // Both copies bit-flipped: the agent starts without allocations, says so,
    // and keeps both damaged files for inspection.
    signal(&agent, "-KILL").await;
    agent.wait(TIMEOUT).await;
    for file in [&checkpoint, &backup] {
        let mut bytes = std::fs::read(file).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        std::fs::write(file, bytes).unwrap();
    }
    let _agent = common::agent(root.path());
    assert_eq!(all_healthy(root.path()).await["allocated"], 0);
    let status = status_json(root.path()).await.unwrap();
    let error = status["device_checkpoint_error"].as_str().unwrap();
    assert!(error.contains("and so is its backup"), "{error}");
    assert!(error.contains("started without it"), "{error}");
    assert_eq!(corrupt_files(&plugins).len(), 3);
}
