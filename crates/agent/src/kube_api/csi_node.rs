//! Registered CSI drivers on the Node and its CSINode, as the kubelet's CSI
//! plugin writes them:
//!
//! - the Node annotation `csi.volume.kubernetes.io/nodeid`, a JSON map from
//!   driver name to the node's id in that driver (removed when empty);
//! - one Node label per topology key a driver reports, refused when the Node
//!   has that label with another value ("topology value collision"); labels
//!   stay when the driver goes;
//! - the CSINode named like the node (created with an owner reference to the
//!   Node when missing) with one entry per driver: name, node id, sorted
//!   topology keys, and the volume limit when there is one. An entry's node
//!   id and topology keys cannot change on the server: a changed one is
//!   removed and added again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Map, Value, json};

use super::error::{KubeApiError, request};
use crate::csi::CsiDriver;

/// The Node annotation mapping driver names to the node's id in each.
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";

/// What a registered driver puts on the Node and its CSINode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiNodeEntry {
    /// The node's id in the driver.
    pub node_id: String,
    /// Topology key → value.
    pub topology: BTreeMap<String, String>,
    /// Volumes attachable to the node; 0 for no limit.
    pub max_volumes: i64,
}

/// Driver name → what it puts on the Node.
pub type CsiDrivers = BTreeMap<String, CsiNodeEntry>;

/// The drivers whose NodeGetInfo answered, as the Node should show them.
pub fn desired(drivers: &[CsiDriver]) -> CsiDrivers {
    drivers
        .iter()
        .filter(|d| !d.node_id.is_empty())
        .map(|d| {
            let entry = CsiNodeEntry {
                node_id: d.node_id.clone(),
                topology: d.accessible_topology.clone(),
                max_volumes: d.max_volumes_per_node,
            };
            (d.name.clone(), entry)
        })
        .collect()
}

fn csinode_driver(name: &str, entry: &CsiNodeEntry) -> CSINodeDriver {
    let keys: Vec<String> = entry.topology.keys().cloned().collect();
    CSINodeDriver {
        name: name.to_string(),
        node_id: entry.node_id.clone(),
        topology_keys: Some(keys),
        allocatable: (entry.max_volumes > 0).then(|| VolumeNodeResources {
            count: i32::try_from(entry.max_volumes).ok(),
        }),
    }
}

/// Whether an entry on the server can become `wanted` by an update: only
/// the volume limit may change.
fn same_identity(current: &CSINodeDriver, wanted: &CSINodeDriver) -> bool {
    let keys = |d: &CSINodeDriver| d.topology_keys.clone().unwrap_or_default();
    current.node_id == wanted.node_id && keys(current) == keys(wanted)
}

/// Makes Node `node` and its CSINode show `desired`, and no longer show the
/// drivers in `removed`. A driver whose topology collides with the Node's
/// labels is left out and reported, after the others are written.
pub(crate) async fn write(
    client: &kube::Client,
    node: &str,
    desired: &CsiDrivers,
    removed: &BTreeSet<String>,
    timeout: Duration,
) -> Result<(), KubeApiError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let current = request(|| format!("get node {node}"), timeout, nodes.get_opt(node))
        .await?
        .ok_or_else(|| KubeApiError::NoNode(node.to_string()))?;
    let labels = current.metadata.labels.clone().unwrap_or_default();

    // Topology labels, refusing collisions.
    let mut collision = None;
    let mut accepted = CsiDrivers::new();
    let mut new_labels = Map::new();
    for (driver, entry) in desired {
        let clash = entry.topology.iter().find_map(|(key, wanted)| {
            labels
                .get(key)
                .filter(|existing| *existing != wanted)
                .map(|existing| KubeApiError::TopologyCollision {
                    driver: driver.clone(),
                    node: node.to_string(),
                    key: key.clone(),
                    existing: existing.clone(),
                    wanted: wanted.clone(),
                })
        });
        if let Some(clash) = clash {
            collision.get_or_insert(clash);
            continue;
        }
        for (key, value) in &entry.topology {
            if labels.get(key) != Some(value) {
                new_labels.insert(key.clone(), Value::String(value.clone()));
            }
        }
        accepted.insert(driver.clone(), entry.clone());
    }

    // The node id annotation.
    let annotations = current.metadata.annotations.clone().unwrap_or_default();
    let existing: BTreeMap<String, String> = annotations
        .get(NODE_ID_ANNOTATION)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    let mut ids = existing.clone();
    for driver in removed.iter().filter(|d| !desired.contains_key(*d)) {
        ids.remove(driver);
    }
    for (driver, entry) in &accepted {
        ids.insert(driver.clone(), entry.node_id.clone());
    }
    if ids != existing || !new_labels.is_empty() {
        let annotation = if ids.is_empty() {
            Value::Null
        } else {
            Value::String(serde_json::to_string(&ids).unwrap_or_default())
        };
        let patch = json!({"metadata": {
            "annotations": {NODE_ID_ANNOTATION: annotation},
            "labels": new_labels,
        }});
        request(
            || format!("patch node {node}"),
            timeout,
            nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await?;
    }

    write_csinode(client, &current, &accepted, removed, timeout).await?;
    match collision {
        Some(collision) => Err(collision),
        None => Ok(()),
    }
}

/// Makes the CSINode of `node` hold `accepted` and none of `removed`.
async fn write_csinode(
    client: &kube::Client,
    node: &Node,
    accepted: &CsiDrivers,
    removed: &BTreeSet<String>,
    timeout: Duration,
) -> Result<(), KubeApiError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let csinodes: Api<CSINode> = Api::all(client.clone());
    let wanted: Vec<CSINodeDriver> = accepted
        .iter()
        .map(|(driver, entry)| csinode_driver(driver, entry))
        .collect();
    let Some(mut current) = request(
        || format!("get csinode {name}"),
        timeout,
        csinodes.get_opt(&name),
    )
    .await?
    else {
        let created = CSINode {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.clone(),
                    uid: node.metadata.uid.clone().unwrap_or_default(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: CSINodeSpec { drivers: wanted },
            ..Default::default()
        };
        request(
            || format!("create csinode {name}"),
            timeout,
            csinodes.create(&PostParams::default(), &created),
        )
        .await?;
        return Ok(());
    };

    let drivers = &current.spec.drivers;
    let keep = |d: &CSINodeDriver| {
        let gone = removed.contains(&d.name) && !accepted.contains_key(&d.name);
        let changed = wanted
            .iter()
            .any(|w| w.name == d.name && !same_identity(d, w));
        !gone && !changed
    };
    let kept: Vec<CSINodeDriver> = drivers.iter().filter(|d| keep(d)).cloned().collect();
    if kept.len() != drivers.len() {
        // Entries to remove first: gone, or with another identity.
        current.spec.drivers = kept;
        current = request(
            || format!("update csinode {name}"),
            timeout,
            csinodes.replace(&name, &PostParams::default(), &current),
        )
        .await?;
    }
    let mut next = current.spec.drivers.clone();
    for w in &wanted {
        match next.iter_mut().find(|d| d.name == w.name) {
            Some(d) => *d = w.clone(),
            None => next.push(w.clone()),
        }
    }
    if next != current.spec.drivers {
        current.spec.drivers = next;
        request(
            || format!("update csinode {name}"),
            timeout,
            csinodes.replace(&name, &PostParams::default(), &current),
        )
        .await?;
    }
    Ok(())
}
