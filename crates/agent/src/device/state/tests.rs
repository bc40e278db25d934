// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The device manager's state transitions, without a plugin: devices
//! reported, planned, reserved, committed and released; the last instance
//! leaving; what the snapshot shows of each.

use std::path::Path;
use std::time::Duration;

use std::sync::Arc;
use std::time::SystemTime;

use nodeplugins_api::constants::device_plugin::{HEALTHY, UNHEALTHY};
use nodeplugins_api::deviceplugin::v1beta1::{Device, DevicePluginOptions, NumaNode, TopologyInfo};
use tokio::time::Instant;

use super::super::resource::Instance;
use super::*;
use crate::device::allocation::allocate_error::AllocateError;
use crate::device::allocation::allocate_steps::{Choice, Chosen, Planned};
use crate::device::allocation::container_allocation::{AllocationRequest, ContainerAllocation};
use crate::device::registration::plugin_client::PluginClient;
use crate::device::snapshot::DeviceSnapshot;

const GPU: &str = "example.com/gpu";
const GRACE: Duration = Duration::from_secs(300);

fn device(id: &str, health: &str, numa: i64) -> Device {
    Device {
        id: id.into(),
        health: health.into(),
        topology: Some(TopologyInfo {
            nodes: vec![NumaNode { id: numa }],
        }),
    }
}

/// A state with one instance of `GPU` reporting `devices`.
fn state_with(devices: &[Device]) -> State {
    let mut state = State::default();
    let plugin = PluginClient::unconnected(
        Path::new("/run/test/gpu.sock"),
        DevicePluginOptions::default(),
    );
    let resource = state.resources.entry(GPU.into()).or_default();
    resource.instances.insert(
        1,
        Instance {
            plugin,
            connected_at: SystemTime::now(),
            devices: Some(Arc::new(
                devices.iter().map(|d| (d.id.clone(), d.clone())).collect(),
            )),
        },
    );
    state
}

fn request(pod: &str, count: usize) -> AllocationRequest {
    AllocationRequest::new(pod, "default", pod, "main").resource(GPU, count)
}

fn needed(planned: Vec<Planned>) -> Vec<String> {
    match planned.into_iter().next() {
        Some(Planned::Needed { order, .. }) => order,
        _ => panic!("devices are needed"),
    }
}

/// Plans, reserves the first `count` of the plan and commits them.
fn allocate(state: &mut State, pod: &str, count: usize) -> Vec<String> {
    let order = needed(
        state
            .allocator
            .plan(&state.resources, &request(pod, count))
            .unwrap(),
    );
    let choice = Choice {
        resource: GPU.into(),
        devices: order[..count].to_vec(),
        reused: Vec::new(),
    };
    let (reservation, mut chosen) = state
        .allocator
        .reserve(&state.resources, vec![choice])
        .unwrap();
    let Chosen { devices, numa } = chosen.remove(0);
    let allocation = ContainerAllocation::new(
        &request(pod, count),
        GPU,
        devices.clone(),
        numa,
        Default::default(),
    );
    state.allocator.commit(reservation, vec![allocation]);
    devices
}

#[tokio::test]
async fn reserved_devices_are_not_offered_again_and_become_the_containers_when_committed() {
    let devices = [
        device("a", HEALTHY, 0),
        device("b", HEALTHY, 0),
        device("c", HEALTHY, 1),
    ];
    let mut state = state_with(&devices);
    let order = needed(
        state
            .allocator
            .plan(&state.resources, &request("p1", 2))
            .unwrap(),
    );
    assert_eq!(order.len(), 3, "every free healthy device is offered");
    let (reservation, _) = state
        .allocator
        .reserve(
            &state.resources,
            vec![Choice {
                resource: GPU.into(),
                devices: order[..2].to_vec(),
                reused: Vec::new(),
            }],
        )
        .unwrap();
    let snapshot = DeviceSnapshot::of(&state, GRACE, None);
    let status = &snapshot.status_at(Instant::now())[0];
    assert_eq!((status.reserved, status.allocated), (2, 0));

    // Another request meanwhile gets only what is left.
    let left = needed(
        state
            .allocator
            .plan(&state.resources, &request("p2", 1))
            .unwrap(),
    );
    assert_eq!(left.len(), 1);
    assert!(!order[..2].contains(&left[0]));

    state.allocator.commit(reservation, Vec::new());
    assert!(
        !state.allocator.reserving(),
        "the reservation ends with the commit"
    );
}

#[tokio::test]
async fn a_repeated_request_gets_what_the_container_holds_and_a_new_count_is_refused() {
    let mut state = state_with(&[device("a", HEALTHY, 0), device("b", HEALTHY, 0)]);
    let held = allocate(&mut state, "p1", 1);
    match state
        .allocator
        .plan(&state.resources, &request("p1", 1))
        .unwrap()
        .remove(0)
    {
        Planned::Held(allocation) => assert_eq!(allocation.devices, held),
        Planned::Needed { .. } => panic!("the container holds its devices"),
    }
    assert!(matches!(
        state.allocator.plan(&state.resources, &request("p1", 2)),
        Err(AllocateError::ChangedRequest { from: 1, to: 2, .. })
    ));
    let snapshot = DeviceSnapshot::of(&state, GRACE, None);
    assert_eq!(snapshot.status_at(Instant::now())[0].allocated, 1);
    assert_eq!(snapshot.allocations().len(), 1);
    assert_eq!(
        snapshot.allocatable().len(),
        2,
        "allocatable counts healthy devices"
    );
}

#[tokio::test]
async fn unhealthy_devices_are_not_offered_and_too_few_free_is_refused() {
    let mut state = state_with(&[device("a", HEALTHY, 0), device("b", UNHEALTHY, 0)]);
    assert_eq!(
        needed(
            state
                .allocator
                .plan(&state.resources, &request("p1", 1))
                .unwrap()
        ),
        ["a"]
    );
    assert!(matches!(
        state.allocator.plan(&state.resources, &request("p1", 2)),
        Err(AllocateError::Unavailable {
            requested: 2,
            available: 1,
            ..
        })
    ));
    allocate(&mut state, "p1", 1);
    assert!(matches!(
        state.allocator.plan(&state.resources, &request("p2", 1)),
        Err(AllocateError::Unavailable { available: 0, .. })
    ));
}

#[tokio::test]
async fn a_holding_whose_device_turned_unhealthy_is_kept_only_for_a_container_that_may_run() {
    let mut state = state_with(&[device("a", HEALTHY, 0), device("b", HEALTHY, 0)]);
    let held = allocate(&mut state, "p1", 1);
    let instance = state
        .resources
        .get_mut(GPU)
        .unwrap()
        .instances
        .get_mut(&1)
        .unwrap();
    instance.devices = Some(Arc::new(
        [device(&held[0], UNHEALTHY, 0)]
            .into_iter()
            .map(|d| (d.id.clone(), d))
            .collect(),
    ));
    // Asked again as a repeated request: the kubelet refuses unhealthy
    // devices a container held.
    assert!(matches!(
        state.allocator.plan(&state.resources, &request("p1", 1)),
        Err(AllocateError::PreviouslyAllocatedUnhealthy(_))
    ));
    // Asked by an admission after the agent restarted under the
    // container: kept as it is, as the kubelet keeps a running container's.
    let planned = state
        .allocator
        .plan(&state.resources, &request("p1", 1).may_be_running())
        .unwrap();
    assert!(matches!(&planned[..], [Planned::Held(a)] if a.devices == held));
    // A different count is refused either way.
    assert!(matches!(
        state
            .allocator
            .plan(&state.resources, &request("p1", 2).may_be_running()),
        Err(AllocateError::ChangedRequest { from: 1, to: 2, .. })
    ));
}

#[tokio::test]
async fn the_last_instance_leaving_turns_the_devices_unhealthy_and_starts_the_grace_period() {
    let mut state = state_with(&[device("a", HEALTHY, 0)]);
    let t0 = Instant::now();
    let resource = state.resources.get_mut(GPU).unwrap();
    assert!(resource.remove_instance(1, t0).is_some());
    assert_eq!(resource.counts(), (0, 1), "known but unhealthy");
    assert_eq!(resource.stopped_since, Some(t0));

    let snapshot = DeviceSnapshot::of(&state, GRACE, None);
    let later = t0 + Duration::from_secs(100);
    let status = &snapshot.status_at(later)[0];
    assert_eq!(status.removal_in_ms, Some(200_000), "worked out when read");
    assert_eq!(status.allocatable, 0);
    assert!(matches!(
        state.allocator.plan(&state.resources, &request("p1", 1)),
        Err(AllocateError::NoHealthy(_))
    ));
}

#[tokio::test]
async fn allocated_counts_a_device_handed_on_from_an_init_container_once() {
    let mut state = state_with(&[
        device("a", HEALTHY, 0),
        device("b", HEALTHY, 0),
        device("c", HEALTHY, 0),
        device("d", HEALTHY, 0),
    ]);
    // The init container's two devices, then the app container's three:
    // both of them handed on, and one more.
    let init = allocate(&mut state, "p1", 2);
    let handed_on = AllocationRequest::new("p1", "default", "p1", "app")
        .resource(GPU, 3)
        .reuse(GPU, init.clone());
    let Some(Planned::Needed { reused, order, .. }) = state
        .allocator
        .plan(&state.resources, &handed_on)
        .unwrap()
        .into_iter()
        .next()
    else {
        panic!("devices are needed");
    };
    assert_eq!(reused, init);
    let mut devices = reused.clone();
    devices.push(order[0].clone());
    let choice = Choice {
        resource: GPU.into(),
        devices,
        reused,
    };
    let (reservation, mut chosen) = state
        .allocator
        .reserve(&state.resources, vec![choice])
        .unwrap();
    let Chosen { devices, numa } = chosen.remove(0);
    let app = ContainerAllocation::new(&handed_on, GPU, devices, numa, Default::default());
    state.allocator.commit(reservation, vec![app]);

    let snapshot = DeviceSnapshot::of(&state, GRACE, None);
    let status = &snapshot.status_at(Instant::now())[0];
    assert_eq!(
        snapshot.allocations().len(),
        2,
        "two containers' allocations"
    );
    assert_eq!(
        status.allocated, 3,
        "three distinct devices held: {status:?}"
    );
}
