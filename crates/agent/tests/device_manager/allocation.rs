//! Allocation: NUMA alignment, records, idempotence, upstream's errors, renamed
//! pods, the plugin's preferred allocation, a plugin dying mid-allocate.

use std::time::Duration;

use nodeplugins::device::{AllocateError, AllocationRequest};
use nodeplugins_test_support::wait::TIMEOUT;

use super::{Node, RESOURCE, allocate, device, numa_device, plugin_with};

#[tokio::test]
async fn allocation_is_numa_aligned_recorded_and_idempotent() {
    use nodeplugins::device::AllocateError;
    let node = Node::start(Duration::from_secs(300)).await;
    let devices = vec![
        numa_device("n0-a", 0),
        numa_device("n1-a", 1),
        numa_device("n0-b", 0),
        numa_device("n1-b", 1),
        numa_device("n1-c", 1),
    ];
    let _plugin = plugin_with(&node, "gpu.sock", false, devices).await;
    node.wait_resource("5 devices", |r| r.allocatable == 5)
        .await;

    let a = allocate(&node.manager, "pod-1", "main", RESOURCE, 2)
        .await
        .unwrap();
    assert_eq!(
        a.devices,
        ["n0-a", "n0-b"],
        "both from the smallest NUMA node that fits"
    );
    assert_eq!(
        a.envs.get("FAKE_DEVICES").map(String::as_str),
        Some("n0-a,n0-b"),
        "the plugin's response is kept"
    );
    assert_eq!(
        a.numa,
        [("n0-a".to_string(), vec![0]), ("n0-b".to_string(), vec![0])].into(),
        "each device's NUMA node, as the pod-resources API reports it"
    );
    assert_eq!(
        allocate(&node.manager, "pod-1", "main", RESOURCE, 2)
            .await
            .unwrap(),
        a,
        "asking again returns the same devices"
    );
    let changed = allocate(&node.manager, "pod-1", "main", RESOURCE, 3)
        .await
        .unwrap_err();
    assert_eq!(
        changed.to_string(),
        r#"pod "pod-1" container "main" changed request for resource "example.com/gpu" from 2 to 3"#
    );

    let b = allocate(&node.manager, "pod-2", "main", RESOURCE, 3)
        .await
        .unwrap();
    assert_eq!(b.devices, ["n1-a", "n1-b", "n1-c"]);
    let none_left = allocate(&node.manager, "pod-3", "main", RESOURCE, 1)
        .await
        .unwrap_err();
    assert_eq!(
        none_left.to_string(),
        "requested number of devices unavailable for example.com/gpu. Requested: 1, Available: 0"
    );
    assert!(matches!(none_left, AllocateError::Unavailable { .. }));

    assert_eq!(node.manager.release("pod-1").await.unwrap(), 1);
    let c = allocate(&node.manager, "pod-3", "main", RESOURCE, 2)
        .await
        .unwrap();
    assert_eq!(
        c.devices,
        ["n0-a", "n0-b"],
        "released devices are free again"
    );
    assert_eq!(node.manager.allocations().await.unwrap().len(), 2);
}

#[tokio::test]
async fn allocation_errors_follow_upstream() {
    let node = Node::start(Duration::from_secs(3600)).await;
    let unregistered = allocate(&node.manager, "p", "c", "example.com/none", 1)
        .await
        .unwrap_err();
    assert_eq!(
        unregistered.to_string(),
        "cannot allocate unregistered device example.com/none"
    );
    let plugin = plugin_with(&node, "gpu.sock", false, vec![device("a", false)]).await;
    node.wait_resource("one unhealthy device", |r| r.capacity == 1)
        .await;
    let unhealthy = allocate(&node.manager, "p", "c", RESOURCE, 1)
        .await
        .unwrap_err();
    assert_eq!(
        unhealthy.to_string(),
        "no healthy devices present; cannot allocate unhealthy devices example.com/gpu"
    );

    plugin.set_devices(vec![device("a", true)]);
    node.wait_resource("healthy", |r| r.allocatable == 1).await;
    allocate(&node.manager, "p", "c", RESOURCE, 1)
        .await
        .unwrap();
    plugin.set_devices(vec![device("a", false)]);
    node.wait_resource("unhealthy again", |r| r.allocatable == 0)
        .await;
    let previously = allocate(&node.manager, "p", "c", RESOURCE, 1)
        .await
        .unwrap_err();
    assert_eq!(
        previously.to_string(),
        "previously allocated devices are no longer healthy; cannot allocate unhealthy devices example.com/gpu"
    );
}

#[tokio::test]
async fn a_pod_uid_holding_devices_cannot_be_allocated_under_another_name() {
    let node = Node::start(Duration::from_secs(3600)).await;
    let _plugin = plugin_with(
        &node,
        "gpu.sock",
        false,
        vec![device("a", true), device("b", true)],
    )
    .await;
    node.wait_resource("two devices", |r| r.allocatable == 2)
        .await;
    let named = |namespace: &str, name: &str, container: &str| {
        AllocationRequest::new("pod-uid", namespace, name, container).resource(RESOURCE, 1)
    };
    node.manager
        .allocate(&named("ml", "train", "main"))
        .await
        .unwrap();
    for (namespace, name) in [("ml", "serve"), ("other", "train")] {
        let renamed = node
            .manager
            .allocate(&named(namespace, name, "sidecar"))
            .await
            .unwrap_err();
        assert!(
            matches!(renamed, AllocateError::PodRenamed { .. }),
            "{renamed:?}"
        );
        assert_eq!(
            renamed.to_string(),
            format!("pod pod-uid is ml/train, not {namespace}/{name}")
        );
    }
    node.wait_resource("the refused requests hold nothing", |r| {
        r.allocated == 1 && r.reserved == 0
    })
    .await;
}

#[tokio::test]
async fn the_plugins_preferred_allocation_is_used_when_offered() {
    let node = Node::start(Duration::from_secs(300)).await;
    let devices = vec![
        numa_device("a", 0),
        numa_device("b", 0),
        numa_device("c", 0),
        numa_device("d", 0),
    ];
    let _plugin = plugin_with(&node, "gpu.sock", true, devices).await;
    node.wait_resource("4 devices", |r| r.allocatable == 4)
        .await;
    // The fake prefers the devices offered last.
    let a = allocate(&node.manager, "pod", "main", RESOURCE, 2)
        .await
        .unwrap();
    assert_eq!(a.devices, ["d", "c"]);
}

#[tokio::test]
async fn a_plugin_dying_mid_allocate_records_nothing_and_frees_its_reservation() {
    let node = Node::start(Duration::from_secs(3600)).await;
    let first = plugin_with(&node, "gpu.sock", false, vec![device("a", true)]).await;
    node.wait_resource("registered", |r| r.allocatable == 1)
        .await;
    first.set_hang_allocate(true);
    let manager = node.manager.clone();
    let stuck = tokio::spawn(async move { allocate(&manager, "pod", "main", RESOURCE, 1).await });
    // While the call hangs, the device is reserved: nobody else gets it.
    node.wait_resource("reserved", |r| r.reserved == 1).await;
    let busy = tokio::time::timeout(
        TIMEOUT,
        allocate(&node.manager, "other", "main", RESOURCE, 1),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(busy.to_string().contains("Available: 0"), "{busy}");
    first.stop();
    let failed = tokio::time::timeout(TIMEOUT, stuck)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        failed.to_string().starts_with("Allocate failed for"),
        "{failed}"
    );
    assert!(
        node.manager.allocations().await.unwrap().is_empty(),
        "nothing half-recorded"
    );
    let r = node
        .wait_resource("reservation released", |r| r.reserved == 0)
        .await;
    assert_eq!(r.allocated, 0);

    let second = plugin_with(&node, "gpu2.sock", false, vec![device("a", true)]).await;
    node.wait_resource("back", |r| r.allocatable == 1 && !r.instances.is_empty())
        .await;
    let done = allocate(&node.manager, "pod", "main", RESOURCE, 1)
        .await
        .unwrap();
    assert_eq!(done.devices, ["a"]);
    drop(second);
}
