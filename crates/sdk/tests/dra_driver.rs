//! The SDK's DRA driver server against the kubelet's side, over real sockets:
//! a grpcio client (an independent stack, with the path-valued `:authority`
//! grpc-go sends), rolling-update socket names, serialization across
//! instances, device metadata files, and shutdown.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use nodeplugins_api::dra::v1;
use nodeplugins_api::dra::v1::dra_plugin_client::DraPluginClient;
use nodeplugins_api::transport::dial;
use nodeplugins_sdk::dra_driver::{
    ApiVersions, Claim, DEVICE_METADATA_API_VERSION, DeviceAttribute, DeviceHealth, DeviceMetadata,
    DraDriver, DraDriverError, DraDriverServer, HealthReporter, NetworkDeviceData, PrepareResults,
    PreparedClaim, PreparedDevice, UnprepareResults,
};
use nodeplugins_test_support::fake_kubelet;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::TIMEOUT;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

const DRIVER: &str = "gpu.example.com";

/// Gives each claim one device named after its UID. With a gate, every
/// prepare announces itself and waits for the gate to open.
#[derive(Default)]
struct Driver {
    gate: Option<(watch::Sender<u32>, Arc<Notify>)>,
}

#[async_trait::async_trait]
impl DraDriver for Driver {
    async fn prepare(&self, claims: Vec<Claim>) -> PrepareResults {
        if let Some((entered, open)) = &self.gate {
            entered.send_modify(|n| *n += 1);
            open.notified().await;
        }
        claims
            .into_iter()
            .map(|c| {
                let uid = c.claim.uid;
                let device = PreparedDevice {
                    pool: "pool".into(),
                    device: format!("dev-{uid}"),
                    cdi_device_ids: vec![format!("{DRIVER}/gpu=dev-{uid}")],
                    ..Default::default()
                };
                (uid, Ok(vec![device]))
            })
            .collect()
    }

    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults {
        claims.into_iter().map(|c| (c.claim.uid, Ok(()))).collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grpcio_kubelet_registers_prepares_and_watches_health_in_every_version() {
    let root = tempfile::tempdir().unwrap();
    let health = HealthReporter::new();
    health.set("pool", "gpu-0", DeviceHealth::Healthy, "");
    health.set("pool", "gpu-1", DeviceHealth::Unhealthy, "too hot");
    let shutdown = CancellationToken::new();
    let server = DraDriverServer::builder(DRIVER, Arc::new(Driver::default()))
        .root_dir(root.path())
        .health(health)
        .start(shutdown.clone())
        .await
        .unwrap();
    let registration = server.registration_socket().unwrap().to_owned();
    assert_eq!(
        registration,
        root.path()
            .join("plugins_registry/gpu.example.com-reg.sock")
    );
    assert_eq!(
        server.service_socket(),
        root.path().join("plugins/gpu.example.com/dra.sock")
    );

    let mut command = python_env().script("dra_client.py");
    command
        .arg("--registration")
        .arg(&registration)
        .arg("--service")
        .arg(server.service_socket());
    let mut client = ChildProcess::spawn("dra_client.py", command);
    client.wait_for_line(TIMEOUT, |l| l == "DONE").await;
    assert_eq!(client.wait(TIMEOUT).await, Some(0));
    let lines: Vec<serde_json::Value> = client
        .output()
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let info = &lines[0];
    assert_eq!(info["type"], "DRAPlugin");
    assert_eq!(info["name"], DRIVER);
    assert_eq!(info["endpoint"], server.service_socket().to_str().unwrap());
    assert_eq!(
        info["versions"],
        serde_json::json!([
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth"
        ])
    );
    for (line, version) in [(&lines[1], "v1"), (&lines[3], "v1beta1")] {
        assert_eq!(line["call"], "NodePrepareResources");
        assert_eq!(line["version"], version);
        assert_eq!(line["error"], "");
        assert_eq!(
            line["devices"],
            serde_json::json!([format!("dev-uid-{version}")])
        );
        assert_eq!(
            line["cdi"],
            serde_json::json!([format!("{DRIVER}/gpu=dev-uid-{version}")])
        );
    }
    for (line, version) in [(&lines[2], "v1"), (&lines[4], "v1beta1")] {
        assert_eq!(line["call"], "NodeUnprepareResources");
        assert_eq!(
            line["claims"],
            serde_json::json!([format!("uid-{version}")])
        );
        assert_eq!(line["error"], "");
    }
    for (line, version) in [(&lines[5], "v1"), (&lines[6], "v1alpha1")] {
        assert_eq!(line["call"], "NodeWatchResources");
        assert_eq!(line["version"], version);
        assert_eq!(
            line["devices"],
            serde_json::json!([["pool", "gpu-0", "HEALTHY"], ["pool", "gpu-1", "UNHEALTHY"]])
        );
    }

    // Shutdown removes both sockets.
    shutdown.cancel();
    server.wait().await.unwrap();
    assert!(!registration.exists());
    assert!(
        !root
            .path()
            .join("plugins/gpu.example.com/dra.sock")
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rolling_update_instances_get_their_own_sockets_and_serialize_through_a_file_lock() {
    let root = tempfile::tempdir().unwrap();
    let (entered, mut entries) = watch::channel(0);
    let open = Arc::new(Notify::new());
    let mut servers = Vec::new();
    for id in ["pod-a", "pod-b"] {
        let driver = Driver {
            gate: Some((entered.clone(), open.clone())),
        };
        let server = DraDriverServer::builder(DRIVER, Arc::new(driver))
            .root_dir(root.path())
            .instance(id)
            .start(CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(
            server.registration_socket().unwrap(),
            root.path()
                .join(format!("plugins_registry/{DRIVER}-{id}-reg.sock"))
        );
        assert_eq!(
            server.service_socket(),
            root.path().join(format!("plugins/{DRIVER}/dra-{id}.sock"))
        );
        let info = fake_kubelet::get_info(server.registration_socket().unwrap())
            .await
            .unwrap();
        assert_eq!(info.endpoint, server.service_socket().to_str().unwrap());
        servers.push(server);
    }

    // A prepare on instance a holds the lock: nobody else can take it.
    let channel = dial(servers[0].service_socket(), TIMEOUT).await.unwrap();
    let call = tokio::spawn(async move {
        DraPluginClient::new(channel)
            .node_prepare_resources(v1::NodePrepareResourcesRequest {
                claims: vec![v1::Claim {
                    namespace: "ns".into(),
                    uid: "u1".into(),
                    name: "c1".into(),
                }],
            })
            .await
    });
    tokio::time::timeout(TIMEOUT, entries.wait_for(|n| *n == 1))
        .await
        .unwrap()
        .unwrap();
    // Taken as the Go helper takes it (an open file description lock), the
    // lock is held while the call runs: an instance on the Go helper waits
    // too during a rolling update from one to the other.
    let lock_path = root.path().join(format!("plugins/{DRIVER}/serialize.lock"));
    assert_eq!(ofd_lock(&lock_path).await, "held");

    open.notify_one();
    let response = call.await.unwrap().unwrap().into_inner();
    assert_eq!(response.claims["u1"].devices[0].device_name, "dev-u1");
    assert_eq!(
        ofd_lock(&lock_path).await,
        "free",
        "the lock is free once the call returned"
    );
}

/// Whether the Go helper would find `path` locked: `held` or `free`.
async fn ofd_lock(path: &std::path::Path) -> String {
    let out = python_env()
        .script("ofd_lock.py")
        .arg(path)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test]
async fn a_driver_serving_no_api_version_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let error = DraDriverServer::builder(DRIVER, Arc::new(Driver::default()))
        .root_dir(root.path())
        .api_versions(ApiVersions {
            v1: false,
            v1beta1: false,
        })
        .start(CancellationToken::new())
        .await
        .err()
        .unwrap();
    assert!(matches!(error, DraDriverError::NoService));
    assert_eq!(
        error.to_string(),
        "no supported DRA gRPC API is implemented and enabled"
    );
}

/// Gives each claim two GPUs of a subrequest `gpu/big`, with attributes,
/// and one NIC with network data.
struct WithMetadata;

#[async_trait::async_trait]
impl DraDriver for WithMetadata {
    async fn prepare(&self, claims: Vec<Claim>) -> PrepareResults {
        let gpu = |name: &str| PreparedDevice {
            requests: vec!["gpu/big".into()],
            pool: "pool".into(),
            device: name.into(),
            metadata: Some(DeviceMetadata {
                attributes: [("model".to_string(), DeviceAttribute::String("big".into()))].into(),
                network_data: None,
            }),
            ..Default::default()
        };
        let nic = PreparedDevice {
            requests: vec!["nic".into()],
            pool: "pool".into(),
            device: "nic-0".into(),
            metadata: Some(DeviceMetadata {
                network_data: Some(NetworkDeviceData {
                    interface_name: "eth1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let devices = vec![gpu("gpu-0"), gpu("gpu-1"), nic];
        claims
            .into_iter()
            .map(|c| (c.claim.uid, Ok(devices.clone())))
            .collect()
    }

    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults {
        claims.into_iter().map(|c| (c.claim.uid, Ok(()))).collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn device_metadata_files_are_written_per_request_mounted_through_cdi_and_removed() {
    let root = tempfile::tempdir().unwrap();
    let cdi = root.path().join("cdi");
    let shutdown = CancellationToken::new();
    let server = DraDriverServer::builder(DRIVER, Arc::new(WithMetadata))
        .root_dir(root.path())
        .register(false)
        .cdi_dir(&cdi)
        .device_metadata(true)
        .start(shutdown.clone())
        .await
        .unwrap();
    let mut client = DraPluginClient::new(dial(server.service_socket(), TIMEOUT).await.unwrap());
    let claim = v1::Claim {
        namespace: "ns".into(),
        uid: "uid-1".into(),
        name: "claim".into(),
    };
    let answer = client
        .node_prepare_resources(v1::NodePrepareResourcesRequest {
            claims: vec![claim.clone()],
        })
        .await
        .unwrap()
        .into_inner();
    let devices = &answer.claims["uid-1"].devices;
    // The metadata device of each request goes with its first device.
    let ids: Vec<&[String]> = devices
        .iter()
        .map(|d| d.cdi_device_ids.as_slice())
        .collect();
    let gpu_id = format!("{DRIVER}/metadata=uid-1_gpu");
    let nic_id = format!("{DRIVER}/metadata=uid-1_nic");
    assert_eq!(ids, [&[gpu_id][..], &[], &[nic_id]]);

    let plugin = root.path().join(format!("plugins/{DRIVER}"));
    let file = plugin.join("dra-device-metadata/ns_claim/gpu/metadata.json");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.ends_with('\n'), "a JSON stream of lines");
    let object: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(object["apiVersion"], DEVICE_METADATA_API_VERSION);
    assert_eq!(object["kind"], "DeviceMetadata");
    assert_eq!(
        object["metadata"],
        serde_json::json!({"name": "claim", "namespace": "ns", "uid": "uid-1", "generation": 1})
    );
    assert_eq!(object["requests"][0]["name"], "gpu/big");
    let listed = &object["requests"][0]["devices"];
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert_eq!(
        listed[0],
        serde_json::json!({"driver": DRIVER, "pool": "pool", "name": "gpu-0",
            "attributes": {"model": {"string": "big"}}})
    );
    let nic = plugin.join("dra-device-metadata/ns_claim/nic/metadata.json");
    let nic: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&nic).unwrap().trim_end()).unwrap();
    assert_eq!(
        nic["requests"][0]["devices"][0]["networkData"]["interfaceName"],
        "eth1"
    );

    let spec = cdi.join(format!("{DRIVER}_metadata_uid-1_gpu.json"));
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&spec).unwrap()).unwrap();
    assert_eq!(spec["kind"], format!("{DRIVER}/metadata"));
    assert_eq!(spec["devices"][0]["name"], "uid-1_gpu");
    let mount = &spec["devices"][0]["containerEdits"]["mounts"][0];
    assert_eq!(mount["hostPath"], file.display().to_string());
    assert_eq!(
        mount["containerPath"],
        format!(
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/claim/gpu/{DRIVER}-metadata.json"
        )
    );
    assert_eq!(mount["options"], serde_json::json!(["ro", "bind"]));

    client
        .node_unprepare_resources(v1::NodeUnprepareResourcesRequest {
            claims: vec![claim],
        })
        .await
        .unwrap();
    assert!(!plugin.join("dra-device-metadata/ns_claim").exists());
    let left: Vec<_> = std::fs::read_dir(&cdi).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    shutdown.cancel();
    server.wait().await.unwrap();
}
