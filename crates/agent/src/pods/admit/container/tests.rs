use std::collections::BTreeMap;

use super::*;
use crate::dra::{ClaimRef, PodClaim, PreparedClaim, PreparedDevice};
use crate::pods::pod::PodRef;

fn device(request: &str, name: &str) -> PreparedDevice {
    PreparedDevice {
        request_names: vec![request.into()],
        pool: "node-1".into(),
        device: name.into(),
        cdi_device_ids: vec![format!("dra.example.com/gpu={name}")],
        share_id: None,
    }
}

fn pod_with(user: ClaimPod) -> PodClaims {
    PodClaims {
        pod: PodRef {
            namespace: "default".into(),
            name: "train".into(),
            uid: "pod-1".into(),
        },
        containers: vec!["init".into(), "whole".into(), "one".into()],
        claims: vec![PodClaim {
            claim: ClaimRef {
                namespace: "default".into(),
                name: "gpus".into(),
                uid: "claim-1".into(),
            },
            drivers: vec!["dra.example.com".into()],
            user,
        }],
    }
}

#[test]
fn a_container_naming_a_request_gets_its_devices_and_those_of_its_subrequests() {
    let mut user = ClaimPod::new("pod-1", "train", vec!["whole".into(), "one".into()]);
    user.requests.insert("one".into(), vec!["gpu".into()]);
    let pod = pod_with(user);
    let result = PodClaimResult {
        driver: "dra.example.com".into(),
        result: PreparedClaim {
            claim: pod.claims[0].claim.clone(),
            devices: vec![
                device("gpu/big", "gpu-0"),
                device("gpu-extra", "gpu-1"),
                device("extra", "gpu-2"),
            ],
            error: None,
        },
    };
    let containers = container_devices(&pod, &[result]);
    let ids = |i: usize| containers[i].cdi_device_ids.clone();
    assert!(ids(0).is_empty(), "the init container names no claim");
    assert_eq!(
        ids(1),
        [
            "dra.example.com/gpu=gpu-0",
            "dra.example.com/gpu=gpu-1",
            "dra.example.com/gpu=gpu-2"
        ]
    );
    assert_eq!(
        ids(2),
        ["dra.example.com/gpu=gpu-0"],
        "gpu/big serves gpu; gpu-extra is another request"
    );
}

fn allocation(
    resource: &str,
    devices: &[&str],
    env: (&str, &str),
    path: &str,
) -> ContainerAllocation {
    ContainerAllocation {
        pod_uid: "pod-1".into(),
        pod_namespace: "default".into(),
        pod_name: "train".into(),
        container: "main".into(),
        resource: resource.into(),
        devices: devices.iter().map(|d| d.to_string()).collect(),
        envs: BTreeMap::from([(env.0.to_string(), env.1.to_string())]),
        mounts: vec![MountSpec {
            container_path: path.into(),
            host_path: format!("/host/{resource}"),
            read_only: true,
            propagation: crate::runtime::MountPropagation::Private,
            selinux_relabel: false,
            recursive_read_only: false,
            image: None,
        }],
        device_specs: vec![DeviceNodeSpec {
            container_path: "/dev/shared".into(),
            host_path: format!("/dev/{resource}"),
            permissions: "rw".into(),
        }],
        annotations: BTreeMap::from([("a".to_string(), resource.to_string())]),
        cdi_devices: vec![
            "vendor.com/dev=common".into(),
            format!("vendor.com/dev={resource}"),
        ],
        numa: BTreeMap::from([(devices[0].to_string(), vec![0])]),
    }
}

#[test]
fn allocations_of_several_resources_merge_as_the_kubelet_merges_them_first_setting_wins() {
    let gpu = allocation(
        "example.com/gpu",
        &["gpu-0", "gpu-1"],
        ("VISIBLE", "gpu"),
        "/gpu",
    );
    let nic = allocation("example.com/nic", &["nic-0"], ("VISIBLE", "nic"), "/gpu");
    let merged = ContainerResources::new(
        "main",
        ContainerKind::App,
        &[&gpu, &nic],
        vec!["dra.example.com/gpu=gpu-9".into()],
    );
    assert_eq!(merged.devices["example.com/gpu"], ["gpu-0", "gpu-1"]);
    assert_eq!(merged.devices["example.com/nic"], ["nic-0"]);
    assert_eq!(merged.numa.len(), 2);
    assert_eq!(merged.envs["VISIBLE"], "gpu", "the first resource's value");
    assert_eq!(merged.annotations["a"], "example.com/gpu");
    assert_eq!(merged.mounts.len(), 1, "one mount per container path");
    assert_eq!(
        merged.device_specs.len(),
        1,
        "one device per container path"
    );
    assert_eq!(merged.device_specs[0].host_path, "/dev/example.com/gpu");
    assert_eq!(
        merged.cdi_devices,
        [
            "vendor.com/dev=common",
            "vendor.com/dev=example.com/gpu",
            "vendor.com/dev=example.com/nic"
        ],
        "each CDI name once"
    );
    let all: Vec<&String> = merged.all_cdi_devices().collect();
    assert_eq!(all.len(), 4);
    assert_eq!(all[3], "dra.example.com/gpu=gpu-9");
}
