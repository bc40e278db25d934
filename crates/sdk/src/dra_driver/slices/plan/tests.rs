// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{Device, DeviceCapacity, DeviceTaint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::super::pool::Slice;
use super::*;

const PUBLISHER: Publisher<'static> = Publisher {
    driver: "gpu.example.com",
    node: "node-1",
};

fn device(name: &str) -> Device {
    Device {
        name: name.into(),
        ..Default::default()
    }
}

fn pool(slices: &[&[&str]]) -> Pool {
    Pool::from_slices(
        slices
            .iter()
            .map(|s| Slice::devices(s.iter().map(|d| device(d)).collect()))
            .collect(),
    )
}

/// Slice `name` on the server, holding slice `index` of `pool` at
/// `generation`.
fn stored(name: &str, pool: &Pool, index: usize, generation: i64) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: PUBLISHER.spec("p", pool, index, generation),
    }
}

fn plan(pool: &Pool, existing: Vec<ResourceSlice>) -> PoolPlan {
    PUBLISHER.plan("p", pool, existing, |slice, _, desired| {
        same_spec(&slice.spec, desired)
    })
}

fn names(slices: &[ResourceSlice]) -> Vec<String> {
    slices.iter().map(|s| s.name_any()).collect()
}

#[test]
fn slices_are_named_by_their_index_as_the_go_helper_names_them() {
    assert_eq!(
        PUBLISHER.generate_name(1, 3),
        "00001-gpu.example.com-node-1-"
    );
    assert_eq!(
        PUBLISHER.generate_name(0x1ab, 0x100001),
        "0001ab-gpu.example.com-node-1-"
    );
    assert_eq!(
        decode_index("0000a-gpu.example.com-node-1-xyz12", 5),
        Some(10)
    );
    assert_eq!(decode_index("node-1-gpu.example.com-xyz12", 5), None);
    assert_eq!(decode_index("000a-x", 5), None);
}

#[test]
fn nothing_is_done_for_the_same_devices_and_older_generations_go() {
    let desired = pool(&[&["gpu-0"]]);
    let old = pool(&[&["gpu-9"]]);
    let plan = plan(
        &desired,
        vec![
            stored("00000-a", &desired, 0, 2),
            stored("00000-old", &old, 0, 1),
        ],
    );
    assert_eq!(plan.generation, 2);
    assert!(plan.updates.is_empty() && plan.creates.is_empty());
    assert_eq!(names(&plan.deletes), ["00000-old"]);
}

#[test]
fn one_changed_slice_is_updated_in_place_with_the_same_generation() {
    let before = pool(&[&["gpu-0"], &["gpu-1"]]);
    let after = pool(&[&["gpu-0"], &["gpu-1", "gpu-2"]]);
    let plan = plan(
        &after,
        vec![
            stored("00000-a", &before, 0, 1),
            stored("00001-b", &before, 1, 1),
        ],
    );
    assert_eq!(plan.generation, 1);
    assert_eq!(plan.updates.len(), 1);
    assert_eq!(
        (plan.updates[0].0, plan.updates[0].1.name_any()),
        (1, "00001-b".into())
    );
    assert!(plan.creates.is_empty() && plan.deletes.is_empty());
}

#[test]
fn a_new_slice_bumps_the_generation_and_updates_the_others_in_place() {
    let before = pool(&[&["gpu-0"]]);
    let after = pool(&[&["gpu-0"], &["gpu-1"]]);
    let grown = plan(&after, vec![stored("00000-a", &before, 0, 1)]);
    assert_eq!(grown.generation, 2);
    assert_eq!(grown.creates, [1]);
    assert_eq!(
        grown.updates.len(),
        1,
        "the kept slice gets the new generation"
    );
    assert!(grown.deletes.is_empty());

    // Two changed slices: a new generation of both, in place.
    let before = pool(&[&["x"], &["y"]]);
    let after = pool(&[&["x2"], &["y2"]]);
    let plan = plan(
        &after,
        vec![
            stored("00000-a", &before, 0, 3),
            stored("00001-b", &before, 1, 3),
        ],
    );
    assert_eq!(plan.generation, 4);
    assert_eq!(plan.updates.len(), 2);
    assert!(plan.creates.is_empty() && plan.deletes.is_empty());
}

#[test]
fn slices_matching_no_index_and_duplicates_are_obsolete() {
    let desired = pool(&[&["gpu-0"]]);
    let plan = plan(
        &desired,
        vec![
            stored("00000-a", &desired, 0, 1),
            stored("00000-twin", &desired, 0, 1),
            stored("00001-extra", &desired, 0, 1),
            stored("node-1-gpu.example.com-old", &desired, 0, 1),
        ],
    );
    assert_eq!(
        names(&plan.deletes),
        ["00000-twin", "00001-extra", "node-1-gpu.example.com-old"]
    );
    assert!(plan.updates.is_empty() && plan.creates.is_empty());
}

#[test]
fn a_generation_the_driver_asks_for_is_taken_when_higher() {
    let desired = pool(&[&["gpu-0"]]).generation(7);
    let plan = plan(&desired, vec![stored("00000-a", &desired, 0, 2)]);
    assert_eq!(plan.generation, 7);
    assert_eq!(plan.updates.len(), 1);
}

#[test]
fn slices_compare_as_the_api_stores_them() {
    let mut desired_device = device("gpu-0");
    desired_device.capacity = Some(BTreeMap::from([(
        "memory".to_string(),
        DeviceCapacity {
            value: Quantity("1024Mi".into()),
            ..Default::default()
        },
    )]));
    desired_device.taints = Some(vec![DeviceTaint {
        key: "hot".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }]);
    desired_device.attributes = Some(BTreeMap::new());
    let desired = Pool::new(vec![desired_device.clone()]);
    let desired_spec = PUBLISHER.spec("p", &desired, 0, 1);

    let mut server_device = desired_device.clone();
    server_device
        .capacity
        .as_mut()
        .unwrap()
        .get_mut("memory")
        .unwrap()
        .value = Quantity("1Gi".into());
    server_device.taints.as_mut().unwrap()[0].time_added = Some(Time(Default::default()));
    server_device.attributes = None;
    let mut server_spec = desired_spec.clone();
    server_spec.devices = Some(vec![server_device]);
    assert!(same_spec(&server_spec, &desired_spec));

    let mut changed = server_spec.clone();
    changed.devices.as_mut().unwrap()[0]
        .capacity
        .as_mut()
        .unwrap()
        .get_mut("memory")
        .unwrap()
        .value = Quantity("2Gi".into());
    assert!(!same_spec(&changed, &desired_spec));
}

#[test]
fn pools_for_other_nodes_carry_no_node_name() {
    let spec =
        |selection| PUBLISHER.spec("p", &pool(&[&["gpu-0"]]).node_selection(selection), 0, 1);
    assert_eq!(
        spec(NodeSelection::ThisNode).node_name.as_deref(),
        Some("node-1")
    );
    let all = spec(NodeSelection::AllNodes);
    assert_eq!((all.node_name, all.all_nodes), (None, Some(true)));
    let per_device = spec(NodeSelection::PerDevice);
    assert_eq!(
        (per_device.node_name, per_device.per_device_node_selection),
        (None, Some(true))
    );
    let selected = spec(NodeSelection::NodeSelector(Default::default()));
    assert!(selected.node_name.is_none() && selected.node_selector.is_some());
}

#[test]
fn a_pool_moved_between_this_node_and_others_is_deleted_and_created_again() {
    let here = pool(&[&["gpu-0"]]);
    let everywhere = pool(&[&["gpu-0"]]).node_selection(NodeSelection::AllNodes);
    let on_node = stored("00000-a", &here, 0, 1);
    let planned = plan(&everywhere, vec![on_node]);
    assert_eq!(names(&planned.deletes), ["00000-a"]);
    assert!(
        planned.updates.is_empty(),
        "spec.nodeName cannot be updated"
    );
    assert_eq!(planned.creates, [0]);

    let for_all = stored("00000-b", &everywhere, 0, 1);
    let planned = plan(&here, vec![for_all]);
    assert_eq!(names(&planned.deletes), ["00000-b"]);
    assert_eq!(planned.creates, [0]);
    // Unmoved, nothing to do.
    assert!(plan(&here, vec![stored("00000-c", &here, 0, 1)]).is_empty());
}
