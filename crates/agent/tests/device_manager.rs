//! The device manager with real device plugins over real sockets (spec §6,
//! §9 items 9-10): registration through kubelet.sock and plugins_registry,
//! health and capacity, instances, the grace period.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
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

#[tokio::test]
async fn kubelet_sock_registration_reports_capacity_and_health() {
    let node = Node::start(Duration::from_secs(300)).await;
    let plugin = node
        .plugin(
            "gpu.sock",
            vec![device("a", true), device("b", true), device("c", false)],
        )
        .await;
    node.register(RESOURCE, "gpu.sock", "v1beta1")
        .await
        .unwrap();
    let r = node.wait_resource("3 devices", |r| r.capacity == 3).await;
    assert_eq!(
        r.allocatable, 2,
        "capacity counts every device, allocatable only healthy ones"
    );
    assert_eq!(r.devices[0].numa_nodes, vec![1]);
    // Health arithmetic as in upstream's TestUpdateCapacityAllocatable.
    plugin.set_devices(vec![device("a", true), device("b", true)]);
    node.wait_resource("2/2", |r| r.capacity == 2 && r.allocatable == 2)
        .await;
    plugin.set_devices(vec![
        device("a", false),
        device("b", true),
        device("c", true),
    ]);
    node.wait_resource("3/2", |r| r.capacity == 3 && r.allocatable == 2)
        .await;
    plugin.set_devices(vec![device("a", false), device("c", true)]);
    node.wait_resource("2/1", |r| r.capacity == 2 && r.allocatable == 1)
        .await;
}

#[tokio::test]
async fn bad_registrations_get_upstream_errors() {
    let node = Node::start(Duration::from_secs(300)).await;
    let _plugin = node.plugin("gpu.sock", vec![device("a", true)]).await;
    let version = node
        .register(RESOURCE, "gpu.sock", "v1alpha")
        .await
        .unwrap_err();
    assert_eq!(
        version.message(),
        r#"requested API version "v1alpha" is not supported by kubelet. Supported version is "v1beta1""#
    );
    let name = node
        .register("gpu", "gpu.sock", "v1beta1")
        .await
        .unwrap_err();
    assert_eq!(name.message(), r#"the ResourceName "gpu" is invalid"#);
    let native = node
        .register("kubernetes.io/gpu", "gpu.sock", "v1beta1")
        .await
        .unwrap_err();
    assert!(native.message().contains("is invalid"));
    for endpoint in ["../gpu.sock", "sub/gpu.sock", "/tmp/gpu.sock", ""] {
        let err = node
            .register(RESOURCE, endpoint, "v1beta1")
            .await
            .unwrap_err();
        assert!(
            err.message().starts_with("invalid endpoint"),
            "{endpoint}: {}",
            err.message()
        );
    }
    let missing = node
        .register(RESOURCE, "nothing-here.sock", "v1beta1")
        .await
        .unwrap_err();
    assert!(
        missing
            .message()
            .starts_with("failed to dial device plugin:"),
        "{}",
        missing.message()
    );
    assert!(node.manager.status().await.unwrap().is_empty());
}

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
async fn the_same_socket_cannot_register_twice() {
    let node = Node::start(Duration::from_secs(300)).await;
    let _plugin = node.plugin("gpu.sock", vec![device("a", true)]).await;
    node.register(RESOURCE, "gpu.sock", "v1beta1")
        .await
        .unwrap();
    let again = node
        .register(RESOURCE, "gpu.sock", "v1beta1")
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists);
    assert!(
        again
            .message()
            .starts_with("device plugin already connected"),
        "{}",
        again.message()
    );
    assert_eq!(node.manager.status().await.unwrap()[0].instances.len(), 1);
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

#[tokio::test(flavor = "multi_thread")]
async fn a_grpcio_device_plugin_registers_through_kubelet_sock_with_a_path_authority() {
    let node = Node::start(Duration::from_secs(300)).await;
    let mut command = python_env().script("device_plugin.py");
    command
        .arg("--dir")
        .arg(&node.plugins)
        .args(["--resource", RESOURCE, "--devices", "3"]);
    let mut plugin = ChildProcess::spawn("device_plugin.py", command);
    let line = plugin
        .wait_for_line(TIMEOUT, |l| l.starts_with("REGISTER"))
        .await;
    assert_eq!(line, "REGISTERED");
    let r = node
        .wait_resource("3 devices from python", |r| r.capacity == 3)
        .await;
    assert_eq!(r.allocatable, 3);
    assert!(r.instances[0].get_preferred_allocation_available);
    assert_eq!(
        r.devices
            .iter()
            .map(|d| d.numa_nodes[0])
            .collect::<Vec<_>>(),
        vec![0, 1, 0]
    );
}

#[tokio::test]
async fn device_plugins_register_through_plugins_registry_too() {
    use nodeplugins::device::DevicePluginHandler;
    use nodeplugins::{PluginManager, PluginManagerConfig};
    use nodeplugins_test_support::fake_plugin::FakePlugin;

    let node = Node::start(Duration::from_secs(300)).await;
    let registry = node._dir.path().join("plugins_registry");
    let manager = PluginManager::new(PluginManagerConfig::new(&registry));
    manager.add_handler(
        "DevicePlugin",
        std::sync::Arc::new(DevicePluginHandler::new(node.manager.clone())),
    );
    tokio::spawn(manager.run(node.shutdown.clone()));
    // The device plugin serves DevicePlugin on its own socket and Registration
    // on a registration socket whose endpoint points at it.
    let plugin = node
        .plugin("probe.sock", vec![device("a", true), device("b", true)])
        .await;
    std::fs::create_dir_all(&registry).unwrap();
    let reg = FakePlugin::builder("DevicePlugin", RESOURCE)
        .endpoint(plugin.socket().to_str().unwrap())
        .versions(&["v1beta1"])
        .serve(registry.join("gpu-reg.sock"))
        .await;
    node.wait_resource("registered via plugins_registry", |r| r.capacity == 2)
        .await;
    reg.stop().await;
    node.wait_resource("disconnected on deregistration", |r| {
        r.instances.is_empty() && r.allocatable == 0
    })
    .await;
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

type Running = tokio::task::JoinHandle<Result<(), nodeplugins::device::DeviceManagerError>>;

async fn start_manager(
    plugins: &Path,
    grace: Duration,
) -> (DeviceHandle, CancellationToken, Running) {
    let mut config = DeviceManagerConfig::new(plugins);
    config.grace_period = grace;
    let manager = DeviceManager::new(config);
    let handle = manager.handle();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(manager.run(shutdown.clone()));
    (handle, shutdown, running)
}
