//! The node registered as the kubelet registers it: how it is asked for
//! ([`NodeRegistration`], the kubelet's `--register-node` and the flags
//! beside it), the Node made when it is missing, and what is reconciled
//! onto a Node that already exists.
//!
//! - Made with its status (a Create takes it): the default labels
//!   (`kubernetes.io/{hostname,os,arch}` and their `beta.` forms), then the
//!   configured ones; the attach/detach controller's annotation; the
//!   taints to register with (only at Create: the kubelet never changes
//!   them after).
//! - A Node that exists (a restart, or made by someone else) gets only
//!   what the kubelet reconciles: the default labels' values, the
//!   annotation; everything else the status sync writes.
//! - Labels under `kubernetes.io` or `k8s.io` must be ones a kubelet may
//!   set ([`validate_node_labels`]): the NodeRestriction admission
//!   plugin refuses any other, so the kubelet refuses to start with them.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint};
use serde_json::{Map, Value, json};

use super::kubelet_status::default_labels;
use super::node_status::CONTROLLER_MANAGED_ATTACH_DETACH;

/// The kubelet's `maxPods` default.
pub const DEFAULT_MAX_PODS: u32 = 110;
/// The kubelet's serving port default (`port`), which the Node names as
/// its kubelet endpoint.
pub const DEFAULT_KUBELET_PORT: u16 = 10250;
/// How often the node's status is computed, and written when it changed
/// (the kubelet's `nodeStatusUpdateFrequency`).
pub const NODE_STATUS_UPDATE_FREQUENCY: Duration = Duration::from_secs(10);
/// The longest time between two writes of an unchanged status (the
/// kubelet's `nodeStatusReportFrequency`).
pub const NODE_STATUS_REPORT_FREQUENCY: Duration = Duration::from_secs(5 * 60);

/// The node registered and its status kept as the kubelet keeps them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeRegistration {
    /// Labels added to the defaults at registration (`--node-labels`);
    /// see [`validate_node_labels`].
    pub labels: BTreeMap<String, String>,
    /// Taints the Node is made with (`--register-with-taints`).
    pub taints: Vec<Taint>,
    /// The node's addresses (`--node-ip`); empty: found as the kubelet
    /// finds them (the host name, its DNS, the default route).
    pub node_ips: Vec<IpAddr>,
    /// The kubelet endpoint's port the Node gives.
    pub kubelet_port: u16,
    /// The pods the node takes (capacity and allocatable `pods`).
    pub max_pods: u32,
    /// The root directory, whose filesystem is the node's
    /// `ephemeral-storage`.
    pub root_dir: PathBuf,
    /// How often the status is computed ([`NODE_STATUS_UPDATE_FREQUENCY`]).
    pub status_update_frequency: Duration,
    /// The longest time between writes ([`NODE_STATUS_REPORT_FREQUENCY`]).
    pub status_report_frequency: Duration,
}

impl NodeRegistration {
    /// The kubelet's defaults, with `root_dir` the agent's root directory.
    pub fn new(root_dir: PathBuf) -> Self {
        Self {
            labels: BTreeMap::new(),
            taints: Vec::new(),
            node_ips: Vec::new(),
            kubelet_port: DEFAULT_KUBELET_PORT,
            max_pods: DEFAULT_MAX_PODS,
            root_dir,
            status_update_frequency: NODE_STATUS_UPDATE_FREQUENCY,
            status_report_frequency: NODE_STATUS_REPORT_FREQUENCY,
        }
    }
}

/// The `kubernetes.io` labels a kubelet may set, sorted.
const KUBELET_LABELS: [&str; 11] = [
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];
/// The label namespaces (and their subdomains) a kubelet may set.
const KUBELET_LABEL_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The namespace (prefix) of label `key`, or empty.
fn namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(prefix, _)| prefix)
}

/// Whether `namespace` is `domain` or a subdomain of it.
fn within(namespace: &str, domain: &str) -> bool {
    namespace == domain
        || namespace
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Whether a kubelet may set label `key` (`IsKubeletLabel`).
fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|allowed| within(namespace(key), allowed))
}

/// Refuses labels in the `kubernetes.io` and `k8s.io` namespaces that a
/// kubelet may not set, with the kubelet's sentence.
pub fn validate_node_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    let unknown: Vec<&str> = labels
        .keys()
        .map(String::as_str)
        .filter(|key| {
            let ns = namespace(key);
            (within(ns, "kubernetes.io") || within(ns, "k8s.io")) && !is_kubelet_label(key)
        })
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{}]\n\
         --node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix ({}) \
         or be in the specifically allowed set ({})",
        unknown.join(" "),
        KUBELET_LABEL_NAMESPACES.join(", "),
        KUBELET_LABELS.join(", ")
    ))
}

/// The Node to make for `name`, with `status` (the kubelet's part).
pub(in crate::kube_api) fn initial_node(
    name: &str,
    registration: &NodeRegistration,
    status: &Value,
) -> Value {
    let mut labels = default_labels(name);
    labels.extend(registration.labels.clone());
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {CONTROLLER_MANAGED_ATTACH_DETACH: "true"},
        },
        "status": status,
    });
    if !registration.taints.is_empty() {
        node["spec"] = json!({"taints": registration.taints});
    }
    node
}

/// What the kubelet reconciles onto an existing Node `node` (as a
/// metadata patch), or `None` when it shows it already.
pub(in crate::kube_api) fn reconcile(name: &str, node: &Node) -> Option<Value> {
    let mut labels = Map::new();
    let existing = node.metadata.labels.clone().unwrap_or_default();
    for (key, value) in default_labels(name) {
        if existing.get(&key) != Some(&value) {
            labels.insert(key, Value::String(value));
        }
    }
    let annotated = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTROLLER_MANAGED_ATTACH_DETACH))
        .is_some_and(|v| v == "true");
    if labels.is_empty() && annotated {
        return None;
    }
    let mut metadata = json!({"labels": labels});
    if !annotated {
        metadata["annotations"] = json!({CONTROLLER_MANAGED_ATTACH_DETACH: "true"});
    }
    Some(json!({"metadata": metadata}))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn labels(keys: &[&str]) -> BTreeMap<String, String> {
        keys.iter()
            .map(|k| (k.to_string(), "v".to_string()))
            .collect()
    }

    #[test]
    fn labels_a_kubelet_may_set_are_accepted() {
        let ok = labels(&[
            "example.com/x",
            "node.kubernetes.io/role",
            "a.node.kubernetes.io/b",
            "kubelet.kubernetes.io/x",
            "topology.kubernetes.io/zone",
            "plain",
        ]);
        assert_eq!(validate_node_labels(&ok), Ok(()));
    }

    #[test]
    fn other_kubernetes_labels_are_refused_in_the_kubelets_words() {
        let bad = labels(&[
            "node-role.kubernetes.io/master",
            "x.k8s.io/y",
            "example.com/z",
        ]);
        let error = validate_node_labels(&bad).unwrap_err();
        assert!(
            error.starts_with("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [node-role.kubernetes.io/master x.k8s.io/y]\n"),
            "{error}"
        );
        assert!(error.contains("(kubelet.kubernetes.io, node.kubernetes.io)"));
    }

    #[test]
    fn a_new_node_has_the_default_labels_the_annotation_and_its_taints() {
        let mut registration = NodeRegistration::new("/var/lib/kubelet".into());
        registration.labels = labels(&["example.com/pool"]);
        registration.taints = vec![Taint {
            key: "example.com/dedicated".into(),
            value: Some("x".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }];
        let node = initial_node("node-a", &registration, &json!({"capacity": {}}));
        let labels = &node["metadata"]["labels"];
        assert_eq!(labels["kubernetes.io/hostname"], "node-a");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["beta.kubernetes.io/os"], "linux");
        assert_eq!(labels["example.com/pool"], "v");
        assert_eq!(
            node["metadata"]["annotations"][CONTROLLER_MANAGED_ATTACH_DETACH],
            "true"
        );
        assert_eq!(node["spec"]["taints"][0]["key"], "example.com/dedicated");
        assert_eq!(node["status"], json!({"capacity": {}}));
    }

    #[test]
    fn an_existing_node_gets_its_default_labels_and_annotation_back() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "node-a", "labels": {"kubernetes.io/os": "windows", "other": "kept"}},
        }))
        .unwrap();
        let patch = reconcile("node-a", &node).unwrap();
        assert_eq!(patch["metadata"]["labels"]["kubernetes.io/os"], "linux");
        assert_eq!(
            patch["metadata"]["labels"]["kubernetes.io/hostname"],
            "node-a"
        );
        assert!(patch["metadata"]["labels"].get("other").is_none());
        assert_eq!(
            patch["metadata"]["annotations"][CONTROLLER_MANAGED_ATTACH_DETACH],
            "true"
        );
        let mut shown = node.clone();
        shown.metadata.labels = Some(default_labels("node-a"));
        shown.metadata.annotations = Some(BTreeMap::from([(
            CONTROLLER_MANAGED_ATTACH_DETACH.to_string(),
            "true".to_string(),
        )]));
        assert_eq!(reconcile("node-a", &shown), None);
    }
}
