//! Device manager latencies with a real device plugin over a Unix socket:
//! a ListAndWatch update until the new capacity is visible, and an allocate
//! round trip (selection, Allocate RPC, checkpoint write) plus release.
//!
//! Run: `cargo bench -p nodeplugins --bench devices`

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Duration;

use nodeplugins::device::{AllocationRequest, DeviceHandle, DeviceManager, DeviceManagerConfig};
use nodeplugins_api::deviceplugin::v1beta1::registration_client::RegistrationClient;
use nodeplugins_api::deviceplugin::v1beta1::{Device, DevicePluginOptions, RegisterRequest};
use nodeplugins_api::transport::dial;
use nodeplugins_test_support::fake_device_plugin::FakeDevicePlugin;
use nodeplugins_test_support::stats::percentiles;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const RESOURCE: &str = "example.com/bench";

fn devices(n: usize, healthy: usize) -> Vec<Device> {
    (0..n)
        .map(|i| Device {
            id: format!("d{i}"),
            health: if i < healthy { "Healthy" } else { "Unhealthy" }.into(),
            topology: None,
        })
        .collect()
}

fn line(label: &str, samples: Vec<Duration>) {
    println!("{}", percentiles(label, samples));
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("device-plugins");
    let (manager, devices_handle) = DeviceManager::new(DeviceManagerConfig::new(&plugins));
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(manager.run(shutdown.clone()));
    let manager = devices_handle;
    while !plugins.join("kubelet.sock").exists() {
        tokio::task::yield_now().await;
    }
    let plugin = FakeDevicePlugin::serve(
        plugins.join("bench.sock"),
        DevicePluginOptions::default(),
        devices(8, 8),
    )
    .await;
    let channel = dial(plugins.join("kubelet.sock"), Duration::from_secs(5))
        .await
        .unwrap();
    RegistrationClient::new(channel)
        .register(RegisterRequest {
            version: "v1beta1".into(),
            endpoint: "bench.sock".into(),
            resource_name: RESOURCE.into(),
            options: None,
        })
        .await
        .unwrap();
    let mut changes = manager.changes();
    while allocatable(&manager).await != 8 {
        changes.changed().await.unwrap();
    }

    let mut updates = Vec::new();
    for i in 0..2000 {
        let want = if i % 2 == 0 { 7 } else { 8 };
        let start = Instant::now();
        plugin.set_devices(devices(8, want));
        while allocatable(&manager).await != want {
            changes.changed().await.unwrap();
        }
        updates.push(start.elapsed());
    }
    line("ListAndWatch update -> allocatable visible", updates);

    let mut allocations = Vec::new();
    for i in 0..2000 {
        let pod = format!("pod-{i}");
        let start = Instant::now();
        let request = AllocationRequest::new(&pod, "default", &pod, "main").resource(RESOURCE, 2);
        manager.allocate(&request).await.unwrap();
        allocations.push(start.elapsed());
        manager.release(&pod).await.unwrap();
    }
    line(
        "allocate 2 devices (Allocate RPC + checkpoint)  ",
        allocations,
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

async fn allocatable(manager: &DeviceHandle) -> usize {
    let status = manager.status().await.unwrap();
    status.first().map_or(0, |r| r.allocatable)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}
