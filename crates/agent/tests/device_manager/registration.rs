//! Registration through kubelet.sock (capacity and health, upstream's
//! errors, one socket once, a grpcio plugin) and through plugins_registry.

use std::time::Duration;

use nodeplugins::device::{DeviceError, DeviceManager, DeviceManagerConfig};
use nodeplugins_api::deviceplugin::v1beta1::DevicePluginOptions;
use nodeplugins_test_support::fake_device_plugin::FakeDevicePlugin;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::TIMEOUT;
use tokio_util::sync::CancellationToken;

use super::{Node, RESOURCE, device};

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
    let (manager, _) = PluginManager::new(PluginManagerConfig::new(&registry));
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

#[tokio::test]
async fn a_plugin_connected_before_the_manager_runs_is_recorded_once_it_runs_and_stops_with_it() {
    let dir = tempfile::tempdir().unwrap();
    // The plugin serves apart: the manager clears its own directory when it
    // starts.
    let (plugins, sockets) = (dir.path().join("plugins"), dir.path().join("sockets"));
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&sockets).unwrap();
    let socket = sockets.join("gpu.sock");
    let _plugin = FakeDevicePlugin::serve(
        socket.clone(),
        DevicePluginOptions::default(),
        vec![device("a", true), device("b", true)],
    )
    .await;
    let (manager, handle) = DeviceManager::new(DeviceManagerConfig::new(&plugins));
    let connecting = tokio::spawn({
        let (handle, socket) = (handle.clone(), socket.clone());
        async move { handle.connect(RESOURCE, &socket).await }
    });

    let shutdown = CancellationToken::new();
    let running = tokio::spawn(manager.run(shutdown.clone()));
    tokio::time::timeout(TIMEOUT, connecting)
        .await
        .expect("the connect ends once the manager runs")
        .unwrap()
        .unwrap();
    let resources = handle
        .wait_for(TIMEOUT, |all| all.iter().any(|r| r.allocatable == 2))
        .await
        .unwrap()
        .expect("its devices are listed");
    assert_eq!(resources[0].instances.len(), 1);

    // Its stream, started by the handle, ends with the manager.
    shutdown.cancel();
    tokio::time::timeout(TIMEOUT, running)
        .await
        .expect("the manager stops with a plugin's stream open")
        .unwrap()
        .unwrap();
    let refused = handle.connect(RESOURCE, &socket).await.unwrap_err();
    assert!(matches!(refused, DeviceError::Stopping), "{refused}");
}
