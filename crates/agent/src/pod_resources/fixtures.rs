//! Inputs for the pod-resources tests: allocations and prepared claims as
//! the managers share them.

use std::collections::BTreeMap;

use crate::device::ContainerAllocation;
use crate::dra::{ClaimPod, ClaimRef, PreparedDevice, RecordedClaim};

/// Pod `(uid, namespace, name)`'s `container` holds `devices` (id and NUMA
/// nodes) of `resource`.
pub(super) fn allocation(
    pod: (&str, &str, &str),
    container: &str,
    resource: &str,
    devices: &[(&str, &[i64])],
) -> ContainerAllocation {
    ContainerAllocation {
        pod_uid: pod.0.into(),
        pod_namespace: pod.1.into(),
        pod_name: pod.2.into(),
        container: container.into(),
        resource: resource.into(),
        devices: devices.iter().map(|(id, _)| id.to_string()).collect(),
        envs: BTreeMap::new(),
        mounts: Vec::new(),
        device_specs: Vec::new(),
        annotations: BTreeMap::new(),
        cdi_devices: Vec::new(),
        numa: devices
            .iter()
            .filter(|(_, numa)| !numa.is_empty())
            .map(|(id, numa)| (id.to_string(), numa.to_vec()))
            .collect(),
    }
}

/// Claim `ml/NAME` with two GPUs of gpu.example.com, used by `pods`.
pub(super) fn claim(name: &str, pods: Vec<ClaimPod>) -> RecordedClaim {
    RecordedClaim {
        driver: "gpu.example.com".into(),
        claim: ClaimRef {
            namespace: "ml".into(),
            name: name.into(),
            uid: format!("{name}-uid"),
        },
        devices: ["gpu-0", "gpu-1"]
            .iter()
            .map(|d| PreparedDevice {
                request_names: vec!["gpus".into()],
                pool: "node-1".into(),
                device: d.to_string(),
                cdi_device_ids: vec![format!("gpu.example.com/gpu={d}")],
                share_id: None,
            })
            .collect(),
        prepared_at_unix_ms: 0,
        prepared: true,
        pods,
    }
}
