//! Device plugin resources in the Node's status, as the kubelet writes them:
//! capacity is every device of a resource (healthy or not), allocatable the
//! healthy ones. A resource that went away (its plugin gone past the grace
//! period) is written as 0 and never deleted: it shows that a device plugin
//! managed it. After an agent restart, resources from the device checkpoint
//! read 0 until their plugin is back.
//!
//! The write is a server-side apply of `nodes/<node>/status` by the field
//! manager `nodeplugins` (forced), holding exactly the resources the agent
//! manages: it owns those keys of `status.capacity` and
//! `status.allocatable`, and every other key (cpu, memory, pods, another
//! writer's resources) is left alone. The keys it owned before a restart
//! are read back from the Node's `managedFields`, so a resource whose
//! plugin went away while the agent was down is written as 0 too. The
//! agent watches its Node, and writes again whenever what the Node shows
//! for these keys differs from what it should show: a Node deleted and made
//! again, another writer, a lost write.
//!
//! When the agent serves the node's pods, the same write holds
//! `status.volumesInUse` (a list the agent then owns whole; written once
//! the volume manager knows what is mounted), and the Node is annotated
//! `volumes.kubernetes.io/controller-managed-attach-detach: "true"`, as
//! the kubelet annotates it, so that the attach/detach controller attaches
//! the volumes of the node's pods.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value, json};

use crate::device::ResourceStatus;
use crate::kube_api::error::{KubeApiError, request};

/// The field manager of the agent's writes.
pub(in crate::kube_api) const FIELD_MANAGER: &str = "nodeplugins";

/// Per resource: (capacity, allocatable).
pub(in crate::kube_api) type NodeResources = BTreeMap<String, (usize, usize)>;

/// The annotation that hands the node's attaching and detaching to the
/// attach/detach controller.
pub(crate) const CONTROLLER_MANAGED_ATTACH_DETACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";

/// What the agent writes into its Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::kube_api) struct NodeStatusWant {
    /// The device plugins' resources.
    pub(in crate::kube_api) resources: NodeResources,
    /// The volumes in use, sorted (`None`: the agent does not serve pods,
    /// or does not know yet; the list is left alone).
    pub(in crate::kube_api) volumes_in_use: Option<Vec<String>>,
}

impl NodeStatusWant {
    /// Whether the Node is annotated for the attach/detach controller:
    /// when the agent serves its pods' volumes.
    fn annotates(&self) -> bool {
        self.volumes_in_use.is_some()
    }
}

/// What the Node's status should show for `resources`, with 0 for every
/// resource in `published` that is no longer known.
pub(in crate::kube_api) fn desired(
    resources: &[ResourceStatus],
    published: &BTreeSet<String>,
) -> NodeResources {
    let mut desired: NodeResources = published
        .iter()
        .map(|name| (name.clone(), (0, 0)))
        .collect();
    for r in resources {
        desired.insert(r.name.clone(), (r.capacity, r.allocatable));
    }
    desired
}

/// The apply configuration that writes `want` to Node `node`'s status.
pub(in crate::kube_api) fn apply(node: &str, want: &NodeStatusWant) -> Value {
    let mut capacity = Map::new();
    let mut allocatable = Map::new();
    for (name, (cap, alloc)) in &want.resources {
        capacity.insert(name.clone(), Value::String(cap.to_string()));
        allocatable.insert(name.clone(), Value::String(alloc.to_string()));
    }
    let mut status = json!({"capacity": capacity, "allocatable": allocatable});
    // An empty list is left out: the field the agent owned goes with it.
    if let Some(volumes) = want.volumes_in_use.as_ref().filter(|v| !v.is_empty()) {
        status["volumesInUse"] = json!(volumes);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node},
        "status": status,
    })
}

/// The apply configuration of Node `node`'s annotation for the
/// attach/detach controller.
fn annotation(node: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "annotations": {CONTROLLER_MANAGED_ATTACH_DETACH: "true"}},
    })
}

/// Whether `node` is annotated for the attach/detach controller.
fn annotated(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTROLLER_MANAGED_ATTACH_DETACH))
        .is_some_and(|v| v == "true")
}

/// Whether `node` shows `want` as it should be.
pub(in crate::kube_api) fn shows(node: &Node, want: &NodeStatusWant) -> bool {
    let status = node.status.as_ref();
    if let Some(volumes) = &want.volumes_in_use {
        let shown = status
            .and_then(|s| s.volumes_in_use.as_deref())
            .unwrap_or_default();
        if shown != volumes.as_slice() || !annotated(node) {
            return false;
        }
    }
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    want.resources.iter().all(|(name, (cap, alloc))| {
        let value = |list: Option<&BTreeMap<String, Quantity>>| {
            list.and_then(|l| l.get(name))
                .and_then(|q| q.0.parse::<usize>().ok())
        };
        value(capacity) == Some(*cap) && value(allocatable) == Some(*alloc)
    })
}

/// The resources the agent's field manager owns in `node`'s status, from
/// its `managedFields` (what an earlier run of the agent wrote).
pub(in crate::kube_api) fn owned(node: &Node) -> BTreeSet<String> {
    let mut owned = BTreeSet::new();
    for entry in node.metadata.managed_fields.iter().flatten() {
        // The apply's entry only: the agent's status patches as the
        // node's kubelet (cpu, memory, ...) are updates of the same
        // manager.
        if entry.manager.as_deref() != Some(FIELD_MANAGER)
            || entry.operation.as_deref() != Some("Apply")
            || entry.subresource.as_deref() != Some("status")
        {
            continue;
        }
        let Some(fields) = &entry.fields_v1 else {
            continue;
        };
        for list in ["f:capacity", "f:allocatable"] {
            if let Some(keys) = fields.0["f:status"][list].as_object() {
                owned.extend(
                    keys.keys()
                        .filter_map(|k| k.strip_prefix("f:"))
                        .map(str::to_string),
                );
            }
        }
    }
    owned
}

/// Writes `want` to Node `node` (`seen`: the Node as last seen, whose
/// annotation is written only when it lacks it); the Node as stored.
pub(crate) async fn write(
    client: &kube::Client,
    node: &str,
    want: &NodeStatusWant,
    seen: Option<&Node>,
) -> Result<Node, KubeApiError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let marked = if want.annotates() && !seen.is_some_and(annotated) {
        let annotation = annotation(node);
        request(
            || format!("apply node {node} annotation {CONTROLLER_MANAGED_ATTACH_DETACH}"),
            nodes.patch(node, &params, &Patch::Apply(&annotation)),
        )
        .await
        .map(drop)
    } else {
        Ok(())
    };
    let result = match marked {
        Ok(()) => {
            let apply = apply(node, want);
            request(
                || format!("apply node {node} status"),
                nodes.patch_status(node, &params, &Patch::Apply(&apply)),
            )
            .await
        }
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.is_not_found() => Err(KubeApiError::NoNode(node.to_string())),
        other => other,
    }
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
        let got = NodeStatusWant {
            resources: desired(&[resource("example.com/gpu", 4, 3)], &published),
            volumes_in_use: None,
        };
        assert_eq!(
            apply("node-1", &got)["status"],
            json!({
                "capacity": {"example.com/gone": "0", "example.com/gpu": "4"},
                "allocatable": {"example.com/gone": "0", "example.com/gpu": "3"},
            })
        );
    }

    fn node(status: Value, managed: Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "node-1", "managedFields": managed},
            "status": status,
        }))
        .unwrap_or_default()
    }

    #[test]
    fn a_node_shows_the_resources_only_with_both_values_right() {
        let want = NodeStatusWant {
            resources: [("example.com/gpu".to_string(), (4, 3))].into(),
            volumes_in_use: None,
        };
        let right = node(
            json!({"capacity": {"example.com/gpu": "4", "cpu": "8"},
                   "allocatable": {"example.com/gpu": "3"}}),
            json!([]),
        );
        assert!(shows(&right, &want));
        let overwritten = node(
            json!({"capacity": {"example.com/gpu": "4"}, "allocatable": {"example.com/gpu": "4"}}),
            json!([]),
        );
        assert!(!shows(&overwritten, &want), "another writer's allocatable");
        assert!(!shows(&node(json!({}), json!([])), &want), "a new Node");
    }

    #[test]
    fn volumes_in_use_are_written_whole_and_shown_only_with_the_annotation() {
        let want = NodeStatusWant {
            resources: NodeResources::new(),
            volumes_in_use: Some(vec!["kubernetes.io/csi/csi.example.com^vol-1".into()]),
        };
        assert_eq!(
            apply("node-1", &want)["status"]["volumesInUse"],
            json!(["kubernetes.io/csi/csi.example.com^vol-1"])
        );
        let status = json!({"volumesInUse": ["kubernetes.io/csi/csi.example.com^vol-1"]});
        assert!(
            !shows(&node(status.clone(), json!([])), &want),
            "not annotated"
        );
        let mut annotated = node(status, json!([]));
        annotated.metadata.annotations = Some(
            [(
                CONTROLLER_MANAGED_ATTACH_DETACH.to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        assert!(shows(&annotated, &want));
        let none_now = NodeStatusWant {
            volumes_in_use: Some(Vec::new()),
            ..want.clone()
        };
        assert!(!shows(&annotated, &none_now), "a volume no longer in use");
        assert!(
            apply("node-1", &none_now)["status"]
                .get("volumesInUse")
                .is_none(),
            "an empty list is left out, and the field goes with it"
        );
        let not_serving = NodeStatusWant {
            volumes_in_use: None,
            ..want
        };
        assert!(
            apply("node-1", &not_serving)["status"]
                .get("volumesInUse")
                .is_none()
                && shows(&node(json!({}), json!([])), &not_serving),
            "an agent that serves no pods leaves the list alone"
        );
    }

    #[test]
    fn the_keys_an_earlier_run_wrote_are_read_back_from_managed_fields() {
        let managed = json!([
            {"manager": FIELD_MANAGER, "operation": "Apply", "subresource": "status",
             "fieldsV1": {"f:status": {
                 "f:capacity": {"f:example.com/gpu": {}, "f:example.com/gone": {}},
                 "f:allocatable": {"f:example.com/gpu": {}}}}},
            {"manager": "kubelet", "operation": "Update", "subresource": "status",
             "fieldsV1": {"f:status": {"f:capacity": {"f:cpu": {}}}}},
        ]);
        let owned = owned(&node(json!({}), managed));
        assert_eq!(
            owned.into_iter().collect::<Vec<_>>(),
            ["example.com/gone", "example.com/gpu"]
        );
    }
}
