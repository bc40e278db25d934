//! The pod-resources API on a loaded node, over its Unix socket with our
//! gRPC client: 1000 pods, each holding 8 devices of a device plugin (NUMA
//! topology on every device) and one DRA claim used by two containers,
//! restored from the managers' checkpoints as after an agent restart, and
//! 8000 allocatable devices from a real plugin. Measures List and Get as a
//! monitoring agent repeats them (the view is cached until something
//! changes), List right after a change (the view built again), and
//! GetAllocatableResources. No rate limit, so every call is measured.
//!
//! Run: `cargo bench -p nodeplugins --bench pod_resources`

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nodeplugins::device::{
    BACKUP_FILE, CHECKPOINT_FILE, ContainerAllocation, DeviceCheckpoint, DeviceManager,
    DeviceManagerConfig,
};
use nodeplugins::dra::{
    ClaimPod, ClaimRef, DraCheckpoint, DraManager, DraManagerConfig, LoggingCleanup,
    PreparedDevice, RecordedClaim,
};
use nodeplugins::pod_resources::{PodResourcesConfig, PodResourcesMetrics};
use nodeplugins_api::checkpoint::CheckpointFile;
use nodeplugins_api::deviceplugin::v1beta1::registration_client::RegistrationClient;
use nodeplugins_api::deviceplugin::v1beta1::{
    Device, DevicePluginOptions, NumaNode, RegisterRequest, TopologyInfo,
};
use nodeplugins_api::podresources::v1;
use nodeplugins_api::podresources::v1::pod_resources_lister_client::PodResourcesListerClient;
use nodeplugins_api::transport::dial;
use nodeplugins_test_support::fake_device_plugin::FakeDevicePlugin;
use nodeplugins_test_support::stats::percentiles;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use prost::Message;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const RESOURCE: &str = "example.com/bench";
const PODS: usize = 1000;
const DEVICES_PER_POD: usize = 8;

fn device_id(i: usize) -> String {
    format!("dev-{i:05}")
}

fn numa(i: usize) -> i64 {
    (i % 2) as i64
}

fn device_checkpoint() -> DeviceCheckpoint {
    let allocations = (0..PODS)
        .map(|p| {
            let ids: Vec<usize> = (p * DEVICES_PER_POD..(p + 1) * DEVICES_PER_POD).collect();
            ContainerAllocation {
                pod_uid: format!("uid-{p:04}"),
                pod_namespace: "bench".into(),
                pod_name: format!("pod-{p:04}"),
                container: "main".into(),
                resource: RESOURCE.into(),
                devices: ids.iter().map(|&i| device_id(i)).collect(),
                envs: BTreeMap::new(),
                mounts: Vec::new(),
                device_specs: Vec::new(),
                annotations: BTreeMap::new(),
                cdi_devices: Vec::new(),
                numa: ids.iter().map(|&i| (device_id(i), vec![numa(i)])).collect(),
            }
        })
        .collect();
    DeviceCheckpoint {
        allocations,
        registered_devices: BTreeMap::new(),
    }
}

fn dra_checkpoint() -> DraCheckpoint {
    let claims = (0..PODS)
        .map(|p| RecordedClaim {
            driver: "gpu.example.com".into(),
            claim: ClaimRef {
                namespace: "bench".into(),
                name: format!("claim-{p:04}"),
                uid: format!("claim-uid-{p:04}"),
            },
            devices: vec![PreparedDevice {
                request_names: vec!["gpu".into()],
                pool: "node-1".into(),
                device: format!("gpu-{}", p % 8),
                cdi_device_ids: vec![format!("gpu.example.com/gpu=claim-uid-{p:04}-gpu")],
                share_id: None,
            }],
            prepared_at_unix_ms: 0,
            prepared: true,
            pods: vec![ClaimPod::new(
                format!("uid-{p:04}"),
                format!("pod-{p:04}"),
                vec!["main".into(), "sidecar".into()],
            )],
        })
        .collect();
    DraCheckpoint { claims }
}

fn plugin_devices() -> Vec<Device> {
    (0..PODS * DEVICES_PER_POD)
        .map(|i| Device {
            id: device_id(i),
            health: "Healthy".into(),
            topology: Some(TopologyInfo {
                nodes: vec![NumaNode { id: numa(i) }],
            }),
        })
        .collect()
}

fn line(label: &str, samples: Vec<Duration>) {
    println!("{}", percentiles(label, samples));
}

async fn run() {
    let root = tempfile::tempdir().unwrap();
    let plugins = root.path().join("device-plugins");
    let state = root.path().join("nodeplugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    CheckpointFile::new(
        "device checkpoint",
        plugins.join(CHECKPOINT_FILE),
        plugins.join(BACKUP_FILE),
    )
    .write(&device_checkpoint())
    .unwrap();
    CheckpointFile::new(
        "DRA claims checkpoint",
        state.join(nodeplugins::dra::CHECKPOINT_FILE),
        state.join(nodeplugins::dra::BACKUP_FILE),
    )
    .write(&dra_checkpoint())
    .unwrap();

    let shutdown = CancellationToken::new();
    let (devices, devices_handle) = DeviceManager::new(DeviceManagerConfig::new(&plugins));
    let (dra, dra_handle) = DraManager::new(
        DraManagerConfig {
            state_dir: Some(state.clone()),
            ..DraManagerConfig::default()
        },
        Arc::new(LoggingCleanup),
    );
    let mut config = PodResourcesConfig::new(root.path());
    config.rate_limit = None;
    let socket = config.socket.clone();
    let tasks = [
        tokio::spawn({
            let shutdown = shutdown.clone();
            async move { devices.run(shutdown).await.unwrap() }
        }),
        tokio::spawn(dra.run(shutdown.clone())),
        tokio::spawn({
            let (devices, dra, shutdown) = (devices_handle.clone(), dra_handle, shutdown.clone());
            async move {
                nodeplugins::pod_resources::serve(
                    config,
                    devices,
                    dra,
                    None,
                    PodResourcesMetrics::default(),
                    shutdown,
                )
                .await
                .unwrap()
            }
        }),
    ];
    // Bounded: a server that never comes up ends the run with a message
    // instead of spinning forever.
    eventually("kubelet.sock and the pod-resources socket", TIMEOUT, || {
        let up = plugins.join("kubelet.sock").exists() && socket.exists();
        std::future::ready(up.then_some(()))
    })
    .await;
    let _plugin = FakeDevicePlugin::serve(
        plugins.join("bench.sock"),
        DevicePluginOptions::default(),
        plugin_devices(),
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

    let channel = dial(&socket, Duration::from_secs(5)).await.unwrap();
    let mut client = PodResourcesListerClient::new(channel);
    let mut changes = devices_handle.changes();
    loop {
        let allocatable = client
            .get_allocatable_resources(v1::AllocatableResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        if allocatable.devices.len() == PODS * DEVICES_PER_POD {
            break;
        }
        changes.changed().await.unwrap();
    }

    let first = client
        .list(v1::ListPodResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.pod_resources.len(), PODS);
    println!(
        "List answer: {} pods, {} device entries, {} claims, {} bytes",
        first.pod_resources.len(),
        first
            .pod_resources
            .iter()
            .flat_map(|p| &p.containers)
            .map(|c| c.devices.len())
            .sum::<usize>(),
        first
            .pod_resources
            .iter()
            .flat_map(|p| &p.containers)
            .map(|c| c.dynamic_resources.len())
            .sum::<usize>(),
        first.encoded_len()
    );

    let mut lists = Vec::new();
    for _ in 0..300 {
        let start = Instant::now();
        let answer = client.list(v1::ListPodResourcesRequest {}).await.unwrap();
        lists.push(start.elapsed());
        assert_eq!(answer.into_inner().pod_resources.len(), PODS);
    }
    line("List, 1000 pods x 8 devices + 1 claim        ", lists);

    // The same calls with the answer's bytes taken as they are: what the
    // server and the transport cost, without the client's decoding.
    let channel = dial(&socket, Duration::from_secs(5)).await.unwrap();
    let mut raw = tonic::client::Grpc::new(channel);
    let mut received = Vec::new();
    for _ in 0..300 {
        let start = Instant::now();
        raw.ready().await.unwrap();
        let path = http::uri::PathAndQuery::from_static("/v1.PodResourcesLister/List");
        let answer = raw
            .unary(
                tonic::Request::new(v1::ListPodResourcesRequest {}),
                path,
                RawCodec,
            )
            .await
            .unwrap();
        received.push(start.elapsed());
        assert_eq!(answer.into_inner().len(), first.encoded_len());
    }
    line("List, answer received, not decoded           ", received);

    let mut gets = Vec::new();
    for p in 0..1000 {
        let start = Instant::now();
        client
            .get(v1::GetPodResourcesRequest {
                pod_name: format!("pod-{p:04}"),
                pod_namespace: "bench".into(),
            })
            .await
            .unwrap();
        gets.push(start.elapsed());
    }
    line("Get one pod                                  ", gets);

    let mut allocatable = Vec::new();
    for _ in 0..300 {
        let start = Instant::now();
        client
            .get_allocatable_resources(v1::AllocatableResourcesRequest {})
            .await
            .unwrap();
        allocatable.push(start.elapsed());
    }
    line("GetAllocatableResources, 8000 devices        ", allocatable);

    // A pod released before each List: the view is built again each time
    // (the released pod encoded again, the others reused).
    let mut rebuilt = Vec::new();
    let mut rebuilt_raw = Vec::new();
    for p in 0..200 {
        devices_handle
            .release(&format!("uid-{p:04}"))
            .await
            .unwrap();
        let start = Instant::now();
        if p % 2 == 0 {
            let answer = client.list(v1::ListPodResourcesRequest {}).await.unwrap();
            rebuilt.push(start.elapsed());
            assert_eq!(
                answer.into_inner().pod_resources.len(),
                PODS,
                "the pod keeps its claim"
            );
        } else {
            raw.ready().await.unwrap();
            let path = http::uri::PathAndQuery::from_static("/v1.PodResourcesLister/List");
            let request = tonic::Request::new(v1::ListPodResourcesRequest {});
            raw.unary(request, path, RawCodec).await.unwrap();
            rebuilt_raw.push(start.elapsed());
        }
    }
    line("List right after a change (view rebuilt)     ", rebuilt);
    line("  the same, answer received, not decoded     ", rebuilt_raw);

    shutdown.cancel();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Sends a prost request; takes the answer's bytes as they are.
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = v1::ListPodResourcesRequest;
    type Decode = bytes::Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = v1::ListPodResourcesRequest;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Self::Item,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Self::Error> {
        item.encode(dst)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = bytes::Bytes;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Self::Item>, Self::Error> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}
