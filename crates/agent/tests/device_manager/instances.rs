//! Instances of one resource (the newest is primary, a survivor is promoted),
//! disconnects and the grace period.

use std::time::Duration;

use super::{Node, RESOURCE, allocate, device};

#[tokio::test]
async fn instances_coexist_the_newest_is_primary_and_a_survivor_is_promoted() {
    let node = Node::start(Duration::from_secs(300)).await;
    let devices = vec![device("a", true), device("b", true)];
    let first = node.plugin("gpu.sock", devices.clone()).await;
    node.register(RESOURCE, "gpu.sock", "v1beta1")
        .await
        .unwrap();
    node.wait_resource("2 devices", |r| r.capacity == 2).await;

    let second = node.plugin("gpu.sock.new", devices).await;
    node.register(RESOURCE, "gpu.sock.new", "v1beta1")
        .await
        .unwrap();
    let r = node
        .wait_resource("two instances", |r| r.instances.len() == 2)
        .await;
    assert_eq!(r.capacity, 2);
    let primary: Vec<_> = r.instances.iter().filter(|i| i.primary).collect();
    assert_eq!(primary.len(), 1);
    assert!(primary[0].socket.ends_with("gpu.sock.new"));

    let third = node.plugin("gpu.sock.third", vec![device("z", true)]).await;
    node.register(RESOURCE, "gpu.sock.third", "v1beta1")
        .await
        .unwrap();
    node.wait_resource("newest list wins", |r| {
        r.instances.len() == 3 && r.capacity == 1
    })
    .await;

    third.stop();
    let r = node
        .wait_resource("survivor promoted", |r| {
            r.instances.len() == 2 && r.capacity == 2
        })
        .await;
    assert_eq!(r.allocatable, 2, "a survivor's devices stay healthy");
    drop((first, second));
}

#[tokio::test]
async fn an_instance_leaving_before_its_successor_lists_leaves_the_devices_as_they_were() {
    let node = Node::start(Duration::from_secs(300)).await;
    let devices = vec![device("a", true), device("b", true)];
    let old = node.plugin("gpu.sock", devices.clone()).await;
    node.register(RESOURCE, "gpu.sock", "v1beta1")
        .await
        .unwrap();
    node.wait_resource("2 healthy", |r| r.allocatable == 2)
        .await;
    let held = allocate(&node.manager, "pod-1", "main", RESOURCE, 1)
        .await
        .unwrap();

    // The plugin re-registers from a new socket, and its old instance goes
    // before the new one has sent a list.
    let new = node.plugin("gpu.sock.new", devices).await;
    new.hold_lists(true);
    node.register(RESOURCE, "gpu.sock.new", "v1beta1")
        .await
        .unwrap();
    node.wait_resource("two instances", |r| r.instances.len() == 2)
        .await;
    old.stop();
    let r = node
        .wait_resource("old instance gone", |r| r.instances.len() == 1)
        .await;
    assert_eq!(
        (r.capacity, r.allocatable),
        (2, 2),
        "the devices stay as the old instance last listed them"
    );
    let again = allocate(&node.manager, "pod-1", "main", RESOURCE, 1)
        .await
        .expect("a container's devices are still healthy, so it keeps them");
    assert_eq!(again.devices, held.devices);

    // The new instance's first list replaces them.
    new.set_devices(vec![device("a", true), device("b", false)]);
    new.hold_lists(false);
    let r = node
        .wait_resource("the new list", |r| r.allocatable == 1)
        .await;
    assert_eq!(r.capacity, 2);
}

#[tokio::test]
async fn a_disconnect_marks_devices_unhealthy_and_the_resource_expires_after_the_grace_period() {
    let node = Node::start(Duration::from_millis(300)).await;
    let plugin = node
        .plugin("gpu.sock", vec![device("a", true), device("b", true)])
        .await;
    node.register(RESOURCE, "gpu.sock", "v1beta1")
        .await
        .unwrap();
    node.wait_resource("registered", |r| r.allocatable == 2)
        .await;
    plugin.stop();
    let r = node
        .wait_resource("unhealthy after disconnect", |r| r.instances.is_empty())
        .await;
    assert_eq!((r.capacity, r.allocatable), (2, 0));
    assert!(r.removal_in_ms.is_some());
    node.wait("resource forgotten", |all| all.is_empty()).await;
}

#[tokio::test]
async fn reconnecting_within_the_grace_period_keeps_the_resource() {
    let node = Node::start(Duration::from_secs(3600)).await;
    let plugin = node.plugin("gpu.sock", vec![device("a", true)]).await;
    node.register(RESOURCE, "gpu.sock", "v1beta1")
        .await
        .unwrap();
    node.wait_resource("registered", |r| r.allocatable == 1)
        .await;
    plugin.stop();
    node.wait_resource("disconnected", |r| r.instances.is_empty())
        .await;
    let again = node.plugin("gpu2.sock", vec![device("a", true)]).await;
    node.register(RESOURCE, "gpu2.sock", "v1beta1")
        .await
        .unwrap();
    let r = node
        .wait_resource("healthy again", |r| r.allocatable == 1)
        .await;
    assert_eq!(r.removal_in_ms, None);
    drop(again);
}
