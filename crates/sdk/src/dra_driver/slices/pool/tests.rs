// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    Counter, DeviceAttribute, DeviceCounterConsumption, DeviceTaint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

fn device(name: &str) -> Device {
    Device {
        name: name.into(),
        ..Default::default()
    }
}

fn devices(n: usize) -> Vec<Device> {
    (0..n).map(|i| device(&format!("gpu-{i}"))).collect()
}

fn tainted(name: &str) -> Device {
    Device {
        taints: Some(vec![DeviceTaint {
            key: "hot".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]),
        ..device(name)
    }
}

fn counter_set(name: &str, counters: &[&str]) -> CounterSet {
    CounterSet {
        name: name.into(),
        counters: counters
            .iter()
            .map(|c| {
                (
                    c.to_string(),
                    Counter {
                        value: Quantity("8Gi".into()),
                    },
                )
            })
            .collect(),
    }
}

fn consuming(name: &str, set: &str, counter: &str) -> Device {
    Device {
        consumes_counters: Some(vec![DeviceCounterConsumption {
            counter_set: set.into(),
            counters: BTreeMap::from([(
                counter.to_string(),
                Counter {
                    value: Quantity("1Gi".into()),
                },
            )]),
            ..Default::default()
        }]),
        ..device(name)
    }
}

#[test]
fn a_large_pool_is_split_at_the_apis_device_limit() {
    let pool = Pool::new(devices(300));
    let sizes: Vec<usize> = pool.slices.iter().map(|s| s.devices.len()).collect();
    assert_eq!(sizes, [128, 128, 44]);
    assert_eq!(pool.slices[1].devices[0].name, "gpu-128", "in order");
    pool.validate().unwrap();
    assert_eq!(Pool::new(Vec::new()).slices.len(), 1, "one empty slice");
}

#[test]
fn devices_with_taints_counters_or_list_attributes_go_64_to_a_slice() {
    let mut list = device("listed");
    list.attributes = Some(BTreeMap::from([(
        "links".to_string(),
        DeviceAttribute {
            ints: Some(vec![1, 2]),
            ..Default::default()
        },
    )]));
    for special in [tainted("special"), list] {
        let mut all = devices(100);
        all.insert(10, special.clone());
        let sizes: Vec<usize> = Pool::new(all)
            .slices
            .iter()
            .map(|s| s.devices.len())
            .collect();
        assert_eq!(sizes, [64, 37], "{}", special.name);
    }
    // Plain devices before an advanced one fill a slice of their own.
    let mut all = devices(100);
    all.push(tainted("late"));
    let sizes: Vec<usize> = Pool::new(all)
        .slices
        .iter()
        .map(|s| s.devices.len())
        .collect();
    assert_eq!(sizes, [100, 1]);
}

#[test]
fn counter_sets_get_slices_of_their_own_eight_at_most() {
    let sets: Vec<CounterSet> = (0..10)
        .map(|i| counter_set(&format!("set-{i}"), &["memory"]))
        .collect();
    let pool = Pool::with_counters(sets, vec![consuming("part-0", "set-9", "memory")]);
    let shape: Vec<(usize, usize)> = pool
        .slices
        .iter()
        .map(|s| (s.shared_counters.len(), s.devices.len()))
        .collect();
    assert_eq!(shape, [(8, 0), (2, 0), (0, 1)]);
    pool.validate().unwrap();
}

#[test]
fn what_the_api_would_refuse_is_refused_before_anything_is_sent() {
    let too_many = Pool::from_slices(vec![Slice::devices(devices(129))]);
    assert_eq!(
        too_many.validate(),
        Err(InvalidPool::TooManyDevices {
            slice: 0,
            devices: 129,
            limit: 128
        })
    );
    let mut advanced = devices(64);
    advanced.push(tainted("t"));
    assert!(matches!(
        Pool::from_slices(vec![Slice::devices(advanced)]).validate(),
        Err(InvalidPool::TooManyDevices { limit: 64, .. })
    ));
    let both = Pool::from_slices(vec![Slice {
        devices: devices(1),
        shared_counters: vec![counter_set("s", &["c"])],
    }]);
    assert_eq!(
        both.validate(),
        Err(InvalidPool::DevicesAndCounters { slice: 0 })
    );
    let twice = Pool::from_slices(vec![Slice::devices(devices(2)), Slice::devices(devices(1))]);
    assert_eq!(
        twice.validate(),
        Err(InvalidPool::DuplicateDevice("gpu-0".into()))
    );
    let unknown_set = Pool::with_counters(
        vec![counter_set("s", &["memory"])],
        vec![consuming("p", "other", "memory")],
    );
    assert!(matches!(
        unknown_set.validate(),
        Err(InvalidPool::UnknownCounterSet { .. })
    ));
    let unknown_counter = Pool::with_counters(
        vec![counter_set("s", &["memory"])],
        vec![consuming("p", "s", "cores")],
    );
    assert!(matches!(
        unknown_counter.validate(),
        Err(InvalidPool::UnknownCounter { .. })
    ));
    let mut pinned = device("pinned");
    pinned.all_nodes = Some(true);
    assert!(matches!(
        Pool::new(vec![pinned.clone()]).validate(),
        Err(InvalidPool::DeviceNodeSelection {
            per_device: false,
            ..
        })
    ));
    Pool::new(vec![pinned])
        .node_selection(NodeSelection::PerDevice)
        .validate()
        .unwrap();
    assert!(matches!(
        Pool::new(devices(1))
            .node_selection(NodeSelection::PerDevice)
            .validate(),
        Err(InvalidPool::DeviceNodeSelection {
            per_device: true,
            ..
        })
    ));
}
