//! What the node holds for pods, whichever way it was made: every pod UID
//! the device manager's allocations or the DRA manager's records name,
//! with the pod's name as they give it. The pods owner's reconcile gives
//! back what belongs to pods the API does not have as active pods.

use std::collections::BTreeMap;

use crate::device::DeviceSnapshot;
use crate::dra::PreparedClaims;
use crate::pods::pod::PodRef;

/// Pod UID → the pod, for every pod that holds devices or claims.
pub(crate) fn held_pods(
    devices: &DeviceSnapshot,
    claims: &PreparedClaims,
) -> BTreeMap<String, PodRef> {
    let mut held = BTreeMap::new();
    for allocation in devices.allocations() {
        held.entry(allocation.pod_uid.clone())
            .or_insert_with(|| PodRef {
                namespace: allocation.pod_namespace.clone(),
                name: allocation.pod_name.clone(),
                uid: allocation.pod_uid.clone(),
            });
    }
    for record in claims.iter() {
        for pod in &record.pods {
            held.entry(pod.uid.clone()).or_insert_with(|| PodRef {
                namespace: record.claim.namespace.clone(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
            });
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::device::ContainerAllocation;
    use crate::dra::{ClaimPod, ClaimRef, RecordedClaim};

    #[test]
    fn pods_that_hold_devices_or_claims_are_named_as_they_were() {
        let allocation = ContainerAllocation {
            pod_uid: "u1".into(),
            pod_namespace: "ml".into(),
            pod_name: "train".into(),
            container: "main".into(),
            resource: "example.com/gpu".into(),
            devices: vec!["gpu-0".into()],
            envs: Default::default(),
            mounts: Vec::new(),
            device_specs: Vec::new(),
            annotations: Default::default(),
            cdi_devices: Vec::new(),
            numa: Default::default(),
        };
        let devices = DeviceSnapshot::with_allocations(vec![Arc::new(allocation)]);
        let record = RecordedClaim {
            driver: "dra.example.com".into(),
            claim: ClaimRef {
                namespace: "web".into(),
                name: "shared".into(),
                uid: "c1".into(),
            },
            devices: Vec::new(),
            prepared_at_unix_ms: 0,
            prepared: false,
            pods: vec![
                ClaimPod::new("u1", "train", vec!["main".into()]),
                ClaimPod::new("u2", "serve", vec!["main".into()]),
            ],
        };
        let claims = PreparedClaims::restore(vec![record]);
        let held = held_pods(&devices, &claims);
        let names: Vec<String> = held.values().map(|p| format!("{p} {}", p.uid)).collect();
        assert_eq!(names, ["ml/train u1", "web/serve u2"]);
    }
}
