//! The view builder's transitions, fed snapshots as the managers publish
//! them, without a manager or a socket.

use std::time::Duration;

use super::*;
use crate::device::test_support as devices;
use crate::device::{ContainerAllocation, DeviceSnapshot};
use crate::dra::ClaimPod;
use crate::dra::test_support::{self as dra, PreparedClaims};
use crate::pod_resources::fixtures::{allocation, claim};
use crate::published::Publisher;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The managers' published state, as the test changes it, and the
/// builder's handle.
struct Harness {
    devices: Publisher<DeviceSnapshot>,
    claims: Publisher<PreparedClaims>,
    views: ViewsHandle,
    shutdown: CancellationToken,
}

fn start() -> Harness {
    let (devices, device_store) = Publisher::new(DeviceSnapshot::default());
    let (claims, store) = Publisher::new(PreparedClaims::default());
    let (builder, views) =
        ViewBuilder::new(devices::handle(device_store), dra::handle(store), None);
    let shutdown = CancellationToken::new();
    tokio::spawn(builder.run(shutdown.clone()));
    Harness {
        devices,
        claims,
        views,
        shutdown,
    }
}

impl Harness {
    /// The device manager publishes its `generation`th snapshot.
    fn devices(&self, generation: u64, allocations: Vec<ContainerAllocation>) {
        let snapshot = devices::snapshot(generation, allocations);
        self.devices.publish(snapshot);
    }

    async fn views(&self) -> Result<Arc<Views>, Closed> {
        tokio::time::timeout(TIMEOUT, self.views.views())
            .await
            .expect("views in time")
    }
}

fn gpu(pod: (&str, &str, &str)) -> ContainerAllocation {
    allocation(pod, "main", "example.com/gpu", &[("gpu-0", &[0])])
}

fn user(uid: &str, name: &str) -> ClaimPod {
    ClaimPod::new(uid, name, vec!["main".into()])
}

#[tokio::test]
async fn a_call_waits_for_both_managers_then_sees_every_change_it_could_have_seen() {
    let h = start();
    let early = tokio::spawn({
        let views = h.views.clone();
        async move { views.views().await.map(|v| v.list.list().len()) }
    });
    tokio::task::yield_now().await;
    assert!(!early.is_finished(), "no view before the managers run");

    h.devices(1, Vec::new());
    h.claims.publish(dra::loaded(Vec::new(), 0));
    let empty = tokio::time::timeout(TIMEOUT, early).await.unwrap().unwrap();
    assert_eq!(empty.ok(), Some(0), "nothing allocated yet");

    // Each call right after a change has the change.
    h.devices(2, vec![gpu(("u1", "ml", "train"))]);
    let views = h.views().await.ok().unwrap();
    assert!(views.list.get("ml", "train").is_some());
    assert!(views.list.get("ml", "serve").is_none());

    let claimed = claim("shared", vec![user("u2", "serve")]);
    h.claims.publish(dra::loaded(vec![claimed], 1));
    let views = h.views().await.ok().unwrap();
    assert!(views.list.get("ml", "train").is_some());
    assert!(views.list.get("ml", "serve").is_some());

    h.devices(3, Vec::new());
    let views = h.views().await.ok().unwrap();
    assert!(views.list.get("ml", "train").is_none(), "released");
    h.shutdown.cancel();
}

#[tokio::test]
async fn calls_fail_when_a_manager_stops_before_it_ran() {
    let h = start();
    h.claims.publish(dra::loaded(Vec::new(), 0));
    let Harness {
        devices,
        claims,
        views,
        shutdown: _shutdown,
    } = h;
    drop(devices);
    let stopped = tokio::time::timeout(TIMEOUT, views.views()).await.unwrap();
    assert!(stopped.is_err(), "the device manager is gone");
    drop(claims);
}
