//! Publishing device resources to a real kube-apiserver (with etcd) as the
//! node identity: how long after a ListAndWatch update the new allocatable
//! count is visible through a GET on the Node, how many writes 1000
//! rapid device health flips cost, and how long after another writer
//! changes the Node, or the Node is deleted and made again, the agent's
//! part is back.
//!
//! Run: `cargo bench -p nodeplugins-cli --bench kube_api` (builds the Go
//! programs of `interop/` first if they are missing).

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use nodeplugins_api::deviceplugin::v1beta1::registration_client::RegistrationClient;
use nodeplugins_api::deviceplugin::v1beta1::{Device, DevicePluginOptions, RegisterRequest};
use nodeplugins_api::transport::dial;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::fake_device_plugin::FakeDevicePlugin;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::stats::percentiles;
use serde_json::json;
use tokio::process::Command;
use tokio::time::Instant;

const NODE: &str = "bench-node";
const RESOURCE: &str = "example.com/bench";
const ROUNDS: usize = 200;
const FLIPS: usize = 1000;
const REPAIRS: usize = 50;
const REMAKES: usize = 20;

fn devices(healthy: usize) -> Vec<Device> {
    (0..8)
        .map(|i| Device {
            id: format!("d{i}"),
            health: if i < healthy { "Healthy" } else { "Unhealthy" }.into(),
            topology: None,
        })
        .collect()
}

async fn allocatable(nodes: &Api<Node>) -> Option<String> {
    let node = nodes.get(NODE).await.ok()?;
    let value = node.status?.allocatable?.get(RESOURCE)?.0.clone();
    Some(value)
}

async fn wait_allocatable(nodes: &Api<Node>, want: usize) {
    let want = want.to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    while allocatable(nodes).await.as_deref() != Some(want.as_str()) {
        assert!(Instant::now() < deadline, "allocatable never became {want}");
    }
}

fn new_node() -> Node {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}))
        .unwrap()
}

/// The agent's count of successful node status writes.
async fn node_status_writes(metrics_addr: &str) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(metrics_addr).await.unwrap();
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: {metrics_addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    text.lines()
        .find(|l| {
            l.starts_with(r#"nodeplugins_kube_api_writes_total{kind="node_status",result="ok"}"#)
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn run() {
    let api = KubeApi::start(NODE).await;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}});
    let created = api
        .request(Identity::Admin, "POST", "/api/v1/nodes", Some(&node))
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let kubeconfig = kube::config::Kubeconfig::read_from(api.admin_kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());

    let root = tempfile::tempdir().unwrap();
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let mut command = Command::new(binary("nodeplugins-cli", "nodeplugins"));
    command
        .args([
            "run",
            "--log-level",
            "warn",
            "--metrics-addr",
            &metrics_addr,
            "--root-dir",
        ])
        .arg(root.path())
        .arg("--kubeconfig")
        .arg(api.node_kubeconfig())
        .args(["--container-runtime-endpoint", "simulated"])
        .args(["--node-name", NODE]);
    let _agent = ChildProcess::spawn("nodeplugins run", command);
    let plugins = root.path().join("device-plugins");
    let kubelet = plugins.join("kubelet.sock");
    while !kubelet.exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let plugin = FakeDevicePlugin::serve(
        plugins.join("bench.sock"),
        DevicePluginOptions::default(),
        devices(8),
    )
    .await;
    let channel = dial(&kubelet, Duration::from_secs(5)).await.unwrap();
    RegistrationClient::new(channel)
        .register(RegisterRequest {
            version: "v1beta1".into(),
            endpoint: "bench.sock".into(),
            resource_name: RESOURCE.into(),
            options: None,
        })
        .await
        .unwrap();
    wait_allocatable(&nodes, 8).await;

    let mut latencies = Vec::with_capacity(ROUNDS);
    for i in 0..ROUNDS {
        let want = if i % 2 == 0 { 7 } else { 8 };
        let start = Instant::now();
        plugin.set_devices(devices(want));
        wait_allocatable(&nodes, want).await;
        latencies.push(start.elapsed());
    }
    println!(
        "{}",
        percentiles(
            "ListAndWatch update -> visible in a GET of the Node",
            latencies
        )
    );

    // Rapid flips: every update as fast as the plugin can send them.
    wait_allocatable(&nodes, 8).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = node_status_writes(&metrics_addr).await;
    let start = Instant::now();
    for i in 0..FLIPS {
        plugin.set_devices(devices(if i % 2 == 0 { 7 } else { 8 }));
        tokio::task::yield_now().await;
    }
    plugin.set_devices(devices(6));
    wait_allocatable(&nodes, 6).await;
    let took = start.elapsed();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let writes = node_status_writes(&metrics_addr).await - before;
    println!(
        "{FLIPS} health flips then a final change: {writes} node status writes; final state visible after {took:?}"
    );

    // Another writer sets allocatable to capacity, as a kubelet that knows
    // nothing of the device plugin would: timed from sending its patch to
    // the agent's value seen again.
    let overwrite = json!({"status": {"allocatable": {RESOURCE: "8"}}});
    let mut repairs = Vec::with_capacity(REPAIRS);
    for _ in 0..REPAIRS {
        let start = Instant::now();
        nodes
            .patch_status(NODE, &PatchParams::default(), &Patch::Merge(&overwrite))
            .await
            .unwrap();
        wait_allocatable(&nodes, 6).await;
        repairs.push(start.elapsed());
    }
    println!(
        "{}",
        percentiles(
            "another writer's allocatable -> put right, seen in a GET",
            repairs
        )
    );

    // The Node deleted and made again, as a node re-registration does:
    // timed from sending the create to the device counts seen again.
    let mut remakes = Vec::with_capacity(REMAKES);
    for _ in 0..REMAKES {
        nodes.delete(NODE, &DeleteParams::default()).await.unwrap();
        let start = Instant::now();
        nodes
            .create(&PostParams::default(), &new_node())
            .await
            .unwrap();
        wait_allocatable(&nodes, 6).await;
        remakes.push(start.elapsed());
    }
    println!(
        "{}",
        percentiles(
            "Node deleted and made again -> devices back, seen in a GET",
            remakes
        )
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}
