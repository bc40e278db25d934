//! Start-up and restarts: old plugin sockets removed, allocations kept in the
//! checkpoint, a corrupt checkpoint reported and kept aside.

use std::time::Duration;

use nodeplugins_test_support::wait::TIMEOUT;

use super::{Node, RESOURCE, allocate, device, plugin_with, start_manager};

#[tokio::test]
async fn start_up_removes_old_plugin_sockets_but_keeps_other_files() {
    let node = Node::start_with(Duration::from_secs(300), |dir| {
        drop(std::os::unix::net::UnixListener::bind(dir.join("old-plugin.sock")).unwrap());
        std::fs::write(dir.join("kubelet_internal_checkpoint"), b"{}").unwrap();
        std::fs::write(dir.join("DEPRECATION"), b"").unwrap();
        std::fs::create_dir(dir.join("subdir")).unwrap();
    })
    .await;
    assert!(!node.plugins.join("old-plugin.sock").exists());
    assert!(node.plugins.join("kubelet_internal_checkpoint").exists());
    assert!(node.plugins.join("DEPRECATION").exists());
    assert!(node.plugins.join("subdir").is_dir());
    assert!(node.plugins.join("kubelet.sock").exists());
}

#[tokio::test]
async fn allocations_survive_a_restart_and_resources_wait_for_their_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("device-plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let plugins_dir = dir.path().join("device-plugins");
    let (first, stop_first, first_run) = start_manager(&plugins, Duration::from_secs(3600)).await;
    let node = Node {
        _dir: tempfile::tempdir().unwrap(),
        plugins: plugins_dir.clone(),
        manager: first.clone(),
        shutdown: stop_first.clone(),
    };
    nodeplugins_test_support::wait::eventually("kubelet.sock", TIMEOUT, || async {
        plugins_dir.join("kubelet.sock").exists().then_some(())
    })
    .await;
    let plugin = plugin_with(
        &node,
        "gpu.sock",
        false,
        vec![device("a", true), device("b", true)],
    )
    .await;
    node.wait_resource("2 devices", |r| r.allocatable == 2)
        .await;
    let held = allocate(&first, "pod", "main", RESOURCE, 1).await.unwrap();
    assert!(
        plugins_dir.join("nodeplugins_device_checkpoint").exists(),
        "written before the allocation is reported"
    );

    // The agent restarts: plugin sockets are removed, allocations come back.
    stop_first.cancel();
    first_run.await.unwrap().unwrap();
    drop(node);
    drop(plugin);
    let (second, stop_second, _) = start_manager(&plugins, Duration::from_secs(3600)).await;
    let node = Node {
        _dir: tempfile::tempdir().unwrap(),
        plugins: plugins_dir.clone(),
        manager: second.clone(),
        shutdown: stop_second,
    };
    let r = node
        .wait_resource("restored, waiting for its plugin", |r| {
            r.removal_in_ms.is_some()
        })
        .await;
    assert_eq!(
        (r.capacity, r.allocated),
        (0, 1),
        "no devices until the plugin is back; the allocation is kept"
    );
    assert_eq!(second.allocations().await.unwrap(), vec![held.clone()]);
    assert!(second.checkpoint_problem().await.unwrap().is_none());

    let _plugin = plugin_with(
        &node,
        "gpu.sock",
        false,
        vec![device("a", true), device("b", true)],
    )
    .await;
    node.wait_resource("plugin back", |r| {
        r.allocatable == 2 && r.removal_in_ms.is_none()
    })
    .await;
    assert_eq!(
        allocate(&second, "pod", "main", RESOURCE, 1).await.unwrap(),
        held,
        "the container keeps its device"
    );
    let other = allocate(&second, "pod-2", "main", RESOURCE, 1)
        .await
        .unwrap();
    assert_ne!(
        other.devices, held.devices,
        "a restored allocation's device is not given away"
    );
}

#[tokio::test]
async fn a_corrupt_checkpoint_is_reported_kept_aside_and_not_overwritten() {
    let node = Node::start_with(Duration::from_secs(300), |dir| {
        std::fs::write(
            dir.join("nodeplugins_device_checkpoint"),
            br#"{"version":1,"data":{"allocations":[],"registered_devices":{}},"checksum":1}"#,
        )
        .unwrap();
    })
    .await;
    let error = node
        .manager
        .checkpoint_problem()
        .await
        .unwrap()
        .expect("the damage is reported")
        .to_string();
    assert!(error.contains("checksum mismatch"), "{error}");
    let kept: Vec<_> = std::fs::read_dir(&node.plugins)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("nodeplugins_device_checkpoint.corrupt-")
        })
        .collect();
    assert_eq!(
        kept.len(),
        1,
        "the damaged file is moved aside, not deleted"
    );
}
