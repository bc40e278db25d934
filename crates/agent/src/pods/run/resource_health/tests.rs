use serde_json::json;

use super::*;
use crate::device::DeviceStatus;
use crate::dra::{ClaimRef, DeviceHealthStatus, PreparedDevice};

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "initContainers": [{"name": "setup"}],
            "containers": [
                {"name": "main", "resources": {"claims": [{"name": "gpu"}]}},
                {"name": "half", "resources": {"claims": [{"name": "gpu", "request": "b"}]}},
                {"name": "plain"},
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "the-claim"}],
        },
    }))
    .unwrap()
}

fn got(name: &str, devices: &[&str]) -> (String, ContainerResources) {
    let mut resources = ContainerResources {
        name: name.into(),
        ..ContainerResources::default()
    };
    if !devices.is_empty() {
        resources.devices.insert(
            "example.com/device".into(),
            devices.iter().map(|d| d.to_string()).collect(),
        );
    }
    (name.to_string(), resources)
}

fn plugin_devices(unhealthy: &[&str]) -> Vec<ResourceStatus> {
    let devices = ["dev-0", "dev-1", "dev-2"]
        .iter()
        .map(|id| DeviceStatus {
            id: id.to_string(),
            health: if unhealthy.contains(id) {
                "Unhealthy"
            } else {
                "Healthy"
            }
            .into(),
            numa_nodes: Vec::new(),
        })
        .collect();
    vec![ResourceStatus {
        name: "example.com/device".into(),
        capacity: 3,
        allocatable: 3 - unhealthy.len(),
        allocated: 0,
        reserved: 0,
        devices,
        instances: Vec::new(),
        removal_in_ms: None,
    }]
}

fn claim() -> RecordedClaim {
    let device = |name: &str, request: &str, cdi: &[&str]| PreparedDevice {
        request_names: vec![request.into()],
        pool: "node".into(),
        device: name.into(),
        cdi_device_ids: cdi.iter().map(|c| c.to_string()).collect(),
        share_id: None,
    };
    RecordedClaim {
        driver: "dra.example.com".into(),
        claim: ClaimRef {
            namespace: "ns".into(),
            name: "the-claim".into(),
            uid: "c-uid".into(),
        },
        devices: vec![
            device("gpu-0", "a", &["dra.example.com/gpu=gpu-0"]),
            device("gpu-1", "b", &[]),
        ],
        prepared_at_unix_ms: 0,
        prepared: true,
        pods: Vec::new(),
    }
}

fn driver(reports: Vec<DeviceHealthStatus>) -> DraDriverStatus {
    DraDriverStatus {
        name: "dra.example.com".into(),
        instances: Vec::new(),
        pending_cleanup: None,
        cleaned_up_at_unix_ms: None,
        devices: reports,
    }
}

fn report(device: &str, health: &str, message: &str, stale: bool) -> DeviceHealthStatus {
    DeviceHealthStatus {
        pool: "node".into(),
        device: device.into(),
        health: health.into(),
        message: message.into(),
        last_updated_unix_s: 0,
        stale,
    }
}

#[test]
fn plugin_devices_read_as_their_plugin_lists_them() {
    let pod = pod();
    let resources = BTreeMap::from([
        got("setup", &["dev-2"]),
        got("plain", &["dev-1", "dev-0", "gone"]),
    ]);
    let devices = plugin_devices(&["dev-1"]);
    let sources = HealthSources {
        devices: &devices,
        claims: &[],
        drivers: &[],
    };
    let status = allocated_resources_status(&pod, &resources, &sources);
    assert_eq!(
        status,
        BTreeMap::from([(
            "plain".to_string(),
            json!([{"name": "example.com/device", "resources": [
                {"resourceID": "dev-0", "health": "Healthy"},
                {"resourceID": "dev-1", "health": "Unhealthy"},
                // No longer listed: the kubelet's default.
                {"resourceID": "gone", "health": "Healthy"},
            ]}])
        )]),
        "init containers get none"
    );
}

#[test]
fn claim_devices_read_as_their_driver_reports_them() {
    let pod = pod();
    let claims = [claim()];
    let drivers = [driver(vec![
        report("gpu-0", "Unhealthy", "too hot", false),
        report("gpu-1", "Healthy", "", true),
    ])];
    let sources = HealthSources {
        devices: &[],
        claims: &claims,
        drivers: &drivers,
    };
    let status = allocated_resources_status(&pod, &BTreeMap::new(), &sources);
    assert_eq!(
        status["main"],
        json!([{"name": "claim:gpu", "resources": [
            {"resourceID": "dra.example.com/gpu=gpu-0", "health": "Unhealthy", "message": "too hot"},
            // A stale report is no report; without a CDI id, the device's
            // driver, pool and name.
            {"resourceID": "dra.example.com/node/gpu-1", "health": "Unknown"},
        ]}])
    );
    assert_eq!(
        status["half"],
        json!([{"name": "claim:gpu/b", "resources": [
            {"resourceID": "dra.example.com/node/gpu-1", "health": "Unknown"},
        ]}]),
        "a container naming one request gets that request's devices"
    );
    assert!(!status.contains_key("plain"));
}

#[test]
fn without_a_health_stream_claim_devices_are_unknown_and_unprepared_claims_left_out() {
    let pod = pod();
    let claims = [claim()];
    let sources = HealthSources {
        devices: &[],
        claims: &claims,
        drivers: &[driver(Vec::new())],
    };
    let status = allocated_resources_status(&pod, &BTreeMap::new(), &sources);
    assert_eq!(status["main"][0]["resources"][0]["health"], "Unknown");

    let sources = HealthSources {
        devices: &[],
        claims: &[],
        drivers: &[],
    };
    assert!(allocated_resources_status(&pod, &BTreeMap::new(), &sources).is_empty());
}
