//! Device plugin resources in the Node's status, as the kubelet writes them:
//! capacity is every device of a resource (healthy or not), allocatable the
//! healthy ones. A resource that went away (its plugin gone past the grace
//! period) is written as 0 and never deleted: it shows that a device plugin
//! managed it. After an agent restart, resources from the device checkpoint
//! read 0 until their plugin is back.
//!
//! A node may patch `nodes/<self>/status` but not read it, so the write is a
//! merge patch of exactly the resources the agent manages; every other
//! capacity (cpu, memory, ...) is left alone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::error::{KubeApiError, request};
use crate::device::ResourceStatus;

/// Per resource: (capacity, allocatable).
pub type NodeResources = BTreeMap<String, (usize, usize)>;

/// What the Node's status should show for `resources`, with 0 for every
/// resource in `published` that is no longer known.
pub fn desired(resources: &[ResourceStatus], published: &BTreeSet<String>) -> NodeResources {
    let mut desired: NodeResources = published
        .iter()
        .map(|name| (name.clone(), (0, 0)))
        .collect();
    for r in resources {
        desired.insert(r.name.clone(), (r.capacity, r.allocatable));
    }
    desired
}

/// The merge patch that writes `resources`.
pub fn patch(resources: &NodeResources) -> Value {
    let mut capacity = Map::new();
    let mut allocatable = Map::new();
    for (name, (cap, alloc)) in resources {
        capacity.insert(name.clone(), Value::String(cap.to_string()));
        allocatable.insert(name.clone(), Value::String(alloc.to_string()));
    }
    json!({"status": {"capacity": capacity, "allocatable": allocatable}})
}

/// Writes `resources` to the status of Node `node`.
pub(crate) async fn write(
    client: &kube::Client,
    node: &str,
    resources: &NodeResources,
    timeout: Duration,
) -> Result<(), KubeApiError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = patch(resources);
    request(
        || format!("patch node {node} status"),
        timeout,
        nodes.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(name: &str, capacity: usize, allocatable: usize) -> ResourceStatus {
        ResourceStatus {
            name: name.into(),
            capacity,
            allocatable,
            allocated: 0,
            reserved: 0,
            devices: Vec::new(),
            instances: Vec::new(),
            removal_in_ms: None,
        }
    }

    #[test]
    fn a_resource_once_published_stays_as_zero() {
        let published: BTreeSet<String> = ["example.com/gone".to_string()].into();
        let got = desired(&[resource("example.com/gpu", 4, 3)], &published);
        assert_eq!(
            patch(&got),
            json!({"status": {
                "capacity": {"example.com/gone": "0", "example.com/gpu": "4"},
                "allocatable": {"example.com/gone": "0", "example.com/gpu": "3"},
            }})
        );
    }
}
