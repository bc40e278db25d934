//! The device manager with real device plugins over real sockets (spec §6,
//! §9 items 9-10): registration through kubelet.sock and plugins_registry,
//! health and capacity, instances, the grace period.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod allocation;
mod instances;
mod registration;
mod restart;

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeplugins::device::{
    AllocateError, AllocationRequest, ContainerAllocation, DeviceHandle, DeviceManager,
    DeviceManagerConfig, ResourceStatus,
};
use nodeplugins_api::deviceplugin::v1beta1::registration_client::RegistrationClient;
use nodeplugins_api::deviceplugin::v1beta1::{
    Device, DevicePluginOptions, NumaNode, RegisterRequest, TopologyInfo,
};
use nodeplugins_api::transport::dial;
use nodeplugins_test_support::fake_device_plugin::FakeDevicePlugin;
use nodeplugins_test_support::wait::TIMEOUT;
use tokio_util::sync::CancellationToken;

const RESOURCE: &str = "example.com/gpu";

struct Node {
    _dir: tempfile::TempDir,
    plugins: PathBuf,
    manager: DeviceHandle,
    shutdown: CancellationToken,
}

/// Allocates `count` devices of one resource to a container.
async fn allocate(
    manager: &DeviceHandle,
    pod: &str,
    container: &str,
    resource: &str,
    count: usize,
) -> Result<ContainerAllocation, AllocateError> {
    let request = AllocationRequest::new(pod, "default", pod, container).resource(resource, count);
    let mut allocations = manager.allocate(&request).await?;
    assert_eq!(allocations.len(), 1);
    Ok(allocations.remove(0))
}

impl Node {
    async fn start(grace: Duration) -> Self {
        Self::start_with(grace, |_| {}).await
    }

    async fn start_with(grace: Duration, before: impl FnOnce(&Path)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("device-plugins");
        std::fs::create_dir_all(&plugins).unwrap();
        before(&plugins);
        let (manager, shutdown, _) = start_manager(&plugins, grace).await;
        let kubelet = plugins.join("kubelet.sock");
        nodeplugins_test_support::wait::eventually("kubelet.sock", TIMEOUT, || async {
            kubelet.exists().then_some(())
        })
        .await;
        Self {
            _dir: dir,
            plugins,
            manager,
            shutdown,
        }
    }

    async fn register(
        &self,
        resource: &str,
        endpoint: &str,
        version: &str,
    ) -> Result<(), tonic::Status> {
        let channel = dial(self.plugins.join("kubelet.sock"), TIMEOUT)
            .await
            .unwrap();
        RegistrationClient::new(channel)
            .register(RegisterRequest {
                version: version.into(),
                endpoint: endpoint.into(),
                resource_name: resource.into(),
                options: Some(DevicePluginOptions::default()),
            })
            .await
            .map(|_| ())
    }

    async fn plugin(&self, file: &str, devices: Vec<Device>) -> FakeDevicePlugin {
        FakeDevicePlugin::serve(
            self.plugins.join(file),
            DevicePluginOptions::default(),
            devices,
        )
        .await
    }

    async fn wait(
        &self,
        what: &str,
        mut pred: impl FnMut(&[ResourceStatus]) -> bool,
    ) -> Vec<ResourceStatus> {
        self.manager
            .wait_for(TIMEOUT, |all| pred(all))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("timed out after {TIMEOUT:?} waiting for {what}"))
    }

    async fn wait_resource(
        &self,
        what: &str,
        pred: impl Fn(&ResourceStatus) -> bool,
    ) -> ResourceStatus {
        let all = self
            .wait(what, |all| {
                all.iter().any(|r| r.name == RESOURCE && pred(r))
            })
            .await;
        all.into_iter().find(|r| r.name == RESOURCE).unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn device(id: &str, healthy: bool) -> Device {
    Device {
        id: id.into(),
        health: if healthy { "Healthy" } else { "Unhealthy" }.into(),
        topology: Some(TopologyInfo {
            nodes: vec![NumaNode { id: 1 }],
        }),
    }
}

fn numa_device(id: &str, node: i64) -> Device {
    Device {
        id: id.into(),
        health: "Healthy".into(),
        topology: Some(TopologyInfo {
            nodes: vec![NumaNode { id: node }],
        }),
    }
}

async fn plugin_with(
    node: &Node,
    file: &str,
    preferred: bool,
    devices: Vec<Device>,
) -> FakeDevicePlugin {
    let options = DevicePluginOptions {
        pre_start_required: true,
        get_preferred_allocation_available: preferred,
    };
    let plugin = FakeDevicePlugin::serve(node.plugins.join(file), options, devices).await;
    node.register(RESOURCE, file, "v1beta1").await.unwrap();
    plugin
}

type Running = tokio::task::JoinHandle<Result<(), nodeplugins::device::DeviceManagerError>>;

async fn start_manager(
    plugins: &Path,
    grace: Duration,
) -> (DeviceHandle, CancellationToken, Running) {
    let mut config = DeviceManagerConfig::new(plugins);
    config.grace_period = grace;
    let (manager, handle) = DeviceManager::new(config);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(manager.run(shutdown.clone()));
    (handle, shutdown, running)
}
