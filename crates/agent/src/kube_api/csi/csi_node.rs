//! Registered CSI drivers on the Node and its CSINode, as the kubelet's CSI
//! plugin writes them:
//!
//! - the Node annotation `csi.volume.kubernetes.io/nodeid`, a JSON map from
//!   driver name to the node's id in that driver (removed when empty); one
//!   that is not a JSON map is an error naming the node, never replaced;
//! - one Node label per topology key a driver reports, refused when the Node
//!   has that label with another value ("topology value collision"); labels
//!   stay when the driver goes;
//! - the CSINode named like the node, owned by the Node (one owned by an
//!   earlier Node of that name is deleted and made again), annotated with
//!   the in-tree plugins migrated to CSI, with one entry per driver: name,
//!   node id, sorted topology keys, and the volume limit when there is one.
//!   An entry's node id and topology keys cannot change on the server: a
//!   changed one is removed and added again.
//!
//! Every update carries the resourceVersion it was computed from; one that
//! lost the race (409) is computed again from a fresh read, up to
//! [`CONFLICT_ATTEMPTS`] times.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Map, Value, json};

use crate::csi::CsiDriver;
use crate::kube_api::error::{KubeApiError, request};

/// The Node annotation mapping driver names to the node's id in each.
pub(in crate::kube_api) const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";
/// The CSINode annotation listing the in-tree volume plugins whose volumes
/// go through CSI drivers on this node.
pub(in crate::kube_api) const MIGRATED_PLUGINS_ANNOTATION: &str =
    "storage.alpha.kubernetes.io/migrated-plugins";
/// The in-tree plugins the kubelet of v1.37 migrates, all of them: the
/// annotation's value, sorted and comma-separated as the kubelet writes it.
pub(in crate::kube_api) const MIGRATED_PLUGINS: &str = "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume";
/// How many times an update that lost a race is computed again.
pub(in crate::kube_api) const CONFLICT_ATTEMPTS: u32 = 5;

/// What a registered driver puts on the Node and its CSINode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::kube_api) struct CsiNodeEntry {
    /// The node's id in the driver.
    pub node_id: String,
    /// Topology key → value.
    pub topology: BTreeMap<String, String>,
    /// Volumes attachable to the node; 0 for no limit.
    pub max_volumes: i64,
}

/// Driver name → what it puts on the Node.
pub(in crate::kube_api) type CsiDrivers = BTreeMap<String, CsiNodeEntry>;

/// The drivers whose NodeGetInfo answered, as the Node should show them.
pub(in crate::kube_api) fn desired(drivers: &[CsiDriver]) -> CsiDrivers {
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
        // A limit past what the field holds is the most it holds, as the
        // kubelet writes it.
        allocatable: (entry.max_volumes > 0).then(|| VolumeNodeResources {
            count: Some(i32::try_from(entry.max_volumes).unwrap_or(i32::MAX)),
        }),
    }
}

/// Whether an entry on the server can become `wanted` by an update: only
/// the volume limit may change.
fn same_identity(current: &CSINodeDriver, wanted: &CSINodeDriver) -> bool {
    let keys = |d: &CSINodeDriver| d.topology_keys.clone().unwrap_or_default();
    current.node_id == wanted.node_id && keys(current) == keys(wanted)
}

/// The node id map of `node`'s annotation: empty without one, an error
/// naming the node when it is not a JSON map.
fn node_ids(node: &Node) -> Result<BTreeMap<String, String>, KubeApiError> {
    let Some(text) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NODE_ID_ANNOTATION))
    else {
        return Ok(BTreeMap::new());
    };
    serde_json::from_str(text).map_err(|source| KubeApiError::NodeIdAnnotation {
        node: node.metadata.name.clone().unwrap_or_default(),
        annotation: NODE_ID_ANNOTATION,
        value: text.clone(),
        source,
    })
}

/// Whether `node` and `csinode` show `desired` and none of `removed`, as
/// far as the agent's writes go. A driver whose topology collides with
/// the Node's labels cannot be shown: it does not count.
pub(in crate::kube_api) fn shows(
    node: &Node,
    csinode: Option<&CSINode>,
    desired: &CsiDrivers,
    removed: &BTreeSet<String>,
) -> bool {
    let Ok(ids) = node_ids(node) else {
        return false;
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let showable: Vec<(&String, &CsiNodeEntry)> = desired
        .iter()
        .filter(|(_, entry)| {
            entry
                .topology
                .iter()
                .all(|(key, value)| labels.get(key).is_none_or(|v| v == value))
        })
        .collect();
    let on_node = showable.iter().all(|(driver, entry)| {
        ids.get(*driver) == Some(&entry.node_id)
            && entry
                .topology
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value))
    }) && removed.iter().all(|d| !ids.contains_key(d));
    if !on_node {
        return false;
    }
    let Some(csinode) = csinode else {
        return false;
    };
    let owned = owned_by(csinode, node);
    let annotated = csinode
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIGRATED_PLUGINS_ANNOTATION))
        .is_some_and(|v| v == MIGRATED_PLUGINS);
    let drivers = &csinode.spec.drivers;
    owned
        && annotated
        && showable
            .iter()
            .all(|(driver, entry)| drivers.contains(&csinode_driver(driver, entry)))
        && removed.iter().all(|d| drivers.iter().all(|c| &c.name != d))
}

/// Whether `csinode` is owned by this very `node` (its name and UID).
fn owned_by(csinode: &CSINode, node: &Node) -> bool {
    csinode.metadata.owner_references.iter().flatten().any(|o| {
        o.kind == "Node"
            && Some(&o.name) == node.metadata.name.as_ref()
            && Some(&o.uid) == node.metadata.uid.as_ref()
    })
}

/// Makes Node `node` and its CSINode show `desired`, and no longer show the
/// drivers in `removed`; the CSINode as the server has it then. A driver
/// whose topology collides with the Node's labels is left out and
/// reported, after the others are written.
pub(crate) async fn write(
    client: &kube::Client,
    node: &str,
    desired: &CsiDrivers,
    removed: &BTreeSet<String>,
) -> Result<CSINode, KubeApiError> {
    let mut attempt = 1;
    loop {
        match write_once(client, node, desired, removed).await {
            Err(e) if e.is_conflict() && attempt < CONFLICT_ATTEMPTS => attempt += 1,
            other => return other,
        }
    }
}

async fn write_once(
    client: &kube::Client,
    node: &str,
    desired: &CsiDrivers,
    removed: &BTreeSet<String>,
) -> Result<CSINode, KubeApiError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let current = request(|| format!("get node {node}"), nodes.get_opt(node))
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

    // The node id annotation: an unreadable one is not ours to replace.
    let existing = node_ids(&current)?;
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
            "resourceVersion": current.metadata.resource_version,
            "annotations": {NODE_ID_ANNOTATION: annotation},
            "labels": new_labels,
        }});
        request(
            || format!("patch node {node}"),
            nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await?;
    }

    let csinode = write_csinode(client, &current, &accepted, removed).await?;
    match collision {
        Some(collision) => Err(collision),
        None => Ok(csinode),
    }
}

/// A new CSINode for `node`, owned by it, with `drivers`.
// The fields of a CSINode differ between Kubernetes versions, and the
// application picks the version: the rest is defaulted whatever it is.
#[allow(clippy::needless_update)]
fn new_csinode(node: &Node, drivers: Vec<CSINodeDriver>) -> CSINode {
    let name = node.metadata.name.clone().unwrap_or_default();
    CSINode {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some(
                [(
                    MIGRATED_PLUGINS_ANNOTATION.to_string(),
                    MIGRATED_PLUGINS.to_string(),
                )]
                .into(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name,
                uid: node.metadata.uid.clone().unwrap_or_default(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: CSINodeSpec { drivers },
        ..Default::default()
    }
}

/// Makes the CSINode of `node` hold `accepted` and none of `removed`; the
/// CSINode as the server has it then.
async fn write_csinode(
    client: &kube::Client,
    node: &Node,
    accepted: &CsiDrivers,
    removed: &BTreeSet<String>,
) -> Result<CSINode, KubeApiError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let csinodes: Api<CSINode> = Api::all(client.clone());
    let wanted: Vec<CSINodeDriver> = accepted
        .iter()
        .map(|(driver, entry)| csinode_driver(driver, entry))
        .collect();
    let mut found = request(|| format!("get csinode {name}"), csinodes.get_opt(&name)).await?;
    if let Some(stale) = found.take_if(|c| !owned_by(c, node)) {
        // Made for an earlier Node of this name: its entries are not this
        // node's.
        tracing::info!(csinode = %name, "CSINode owned by an earlier Node of this name; making it again");
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: stale.metadata.uid.clone(),
                resource_version: stale.metadata.resource_version.clone(),
            }),
            ..Default::default()
        };
        let deleted = request(
            || format!("delete csinode {name}"),
            csinodes.delete(&name, &params),
        )
        .await;
        match deleted {
            Err(e) if !e.is_not_found() => return Err(e),
            _ => {}
        }
    }
    let Some(mut current) = found else {
        return request(
            || format!("create csinode {name}"),
            csinodes.create(&PostParams::default(), &new_csinode(node, wanted)),
        )
        .await;
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
    let annotations = current.metadata.annotations.get_or_insert_default();
    let annotated = annotations
        .get(MIGRATED_PLUGINS_ANNOTATION)
        .map(String::as_str)
        == Some(MIGRATED_PLUGINS);
    if next != current.spec.drivers || !annotated {
        annotations.insert(
            MIGRATED_PLUGINS_ANNOTATION.to_string(),
            MIGRATED_PLUGINS.to_string(),
        );
        current.spec.drivers = next;
        current = request(
            || format!("update csinode {name}"),
            csinodes.replace(&name, &PostParams::default(), &current),
        )
        .await?;
    }
    Ok(current)
}

#[cfg(test)]
mod tests;
