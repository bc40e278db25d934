//! What a pod asks of the node's plugins, read from the pod as the API has
//! it: whether it is still active, its containers in the order the kubelet
//! admits them, each container's device plugin resources, and the names of
//! its claims.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pods::admit::container::ContainerKind;
use crate::pods::pod::PodRef;

/// The pod's namespace, name and UID; `None` for an object without a UID.
pub(crate) fn pod_ref(pod: &Pod) -> Option<PodRef> {
    Some(PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone()?,
    })
}

/// The pod as `namespace/name`, for messages.
pub(crate) fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether the pod still runs or is to run here: not `Succeeded` or
/// `Failed`, and not being deleted. A pod that is not active gives back
/// what it holds.
pub(crate) fn is_active(pod: &Pod) -> bool {
    let terminal = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|phase| phase == "Succeeded" || phase == "Failed");
    !terminal && pod.metadata.deletion_timestamp.is_none()
}

/// The annotation that makes a pod the mirror of a static pod.
pub(crate) const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// A static pod's hash (its UID), on it and on its mirror pod.
pub(crate) const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Where a pod came from: `file` for a static pod, `api` for the API's.
pub(crate) const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// When the node first saw a static pod.
pub(crate) const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";

/// Whether the pod is a static pod: read from the node's own files, not
/// from the API (`kubernetes.io/config.source: file`).
pub(crate) fn is_static(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .is_some_and(|source| source == "file")
        && !is_mirror(pod)
}

/// Whether the pod is a mirror pod: the API's copy of a static pod that a
/// kubelet runs from its own files, never admitted from the API.
pub(crate) fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

/// The pod's containers as the kubelet admits them: init containers first,
/// then app containers, each in spec order.
pub(crate) fn containers(pod: &Pod) -> Vec<(&Container, ContainerKind)> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let init = spec.init_containers.iter().flatten().map(|c| {
        let kind = if c.restart_policy.as_deref() == Some("Always") {
            ContainerKind::Sidecar
        } else {
            ContainerKind::Init
        };
        (c, kind)
    });
    let app = spec.containers.iter().map(|c| (c, ContainerKind::App));
    init.chain(app).collect()
}

/// The device plugin resources `container` of `pod` asks for: its limits
/// (extended resources may not be overcommitted, so requests equal limits)
/// of the resources `is_device_resource` knows, left out those a
/// DeviceClass backs through the pod's extended-resource claim (prepared by
/// DRA instead) and those of no device.
pub(crate) fn device_requests(
    pod: &Pod,
    container: &Container,
    is_device_resource: impl Fn(&str) -> bool,
) -> BTreeMap<String, usize> {
    limits(pod, container)
        .filter(|(resource, _)| is_device_resource(resource))
        .collect()
}

/// The extended resources `container` of `pod` asks for that
/// `is_device_resource` does not know (no plugin serves them): its
/// limits of domain-qualified names outside `kubernetes.io`, left out
/// those DRA backs and those of none.
pub(crate) fn unserved_requests(
    pod: &Pod,
    container: &Container,
    is_device_resource: impl Fn(&str) -> bool,
) -> BTreeMap<String, usize> {
    limits(pod, container)
        .filter(|(resource, _)| is_extended_resource(resource) && !is_device_resource(resource))
        .collect()
}

/// Whether `resource` is an extended resource name, as the kubelet's
/// `IsExtendedResourceName` says: domain-qualified, outside
/// `kubernetes.io`, not a quota's `requests.` name.
pub(crate) fn is_extended_resource(resource: &str) -> bool {
    let Some((domain, _)) = resource.split_once('/') else {
        return false;
    };
    !(domain == "kubernetes.io"
        || domain.ends_with(".kubernetes.io")
        || resource.starts_with("requests."))
}

/// `container`'s non-zero limits, left out the resources a DeviceClass
/// backs through the pod's extended-resource claim.
fn limits<'a>(
    pod: &'a Pod,
    container: &'a Container,
) -> impl Iterator<Item = (String, usize)> + 'a {
    let mappings = pod
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .map(|s| s.request_mappings.as_slice())
        .unwrap_or_default();
    let backed_by_dra = move |resource: &str| {
        mappings
            .iter()
            .any(|m| m.container_name == container.name && m.resource_name == resource)
    };
    container
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .into_iter()
        .flatten()
        .filter(move |(resource, _)| !backed_by_dra(resource))
        .filter_map(|(resource, quantity)| {
            let count = quantity_value(&quantity.0)?;
            (count > 0).then(|| (resource.clone(), count))
        })
}

/// A quantity's value as a whole count, rounded up, as the kubelet's
/// `Quantity.Value()` reads an extended resource (`2`, `2000m`, `1k`,
/// `1Ki`, `2e3`); `None` for text that is not a quantity or too large.
pub(crate) fn quantity_value(text: &str) -> Option<usize> {
    nodeplugins_api::quantity::value(text)
        .filter(|v| (0..=1_000_000_000_000_000).contains(v))
        .and_then(|v| usize::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn quantities_read_as_whole_counts_rounded_up() {
        for (text, want) in [
            ("2", Some(2)),
            ("2000m", Some(2)),
            ("1500m", Some(2)),
            ("1k", Some(1000)),
            ("1Ki", Some(1024)),
            ("2e3", Some(2000)),
            ("0", Some(0)),
            ("0.0", Some(0)),
            ("0Gi", Some(0)),
            ("0m", Some(0)),
            ("+0", Some(0)),
            ("0.5", Some(1)),
            ("100m", Some(1)),
            ("x", None),
            ("-1", None),
        ] {
            assert_eq!(quantity_value(text), want, "{text}");
        }
    }

    #[test]
    fn init_containers_come_first_and_sidecars_are_told_apart() {
        let pod = pod(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "initContainers": [{"name": "setup"}, {"name": "proxy", "restartPolicy": "Always"}],
                "containers": [{"name": "main"}],
            },
        }));
        let kinds: Vec<(&str, ContainerKind)> = containers(&pod)
            .into_iter()
            .map(|(c, k)| (c.name.as_str(), k))
            .collect();
        assert_eq!(
            kinds,
            [
                ("setup", ContainerKind::Init),
                ("proxy", ContainerKind::Sidecar),
                ("main", ContainerKind::App)
            ]
        );
    }

    #[test]
    fn device_requests_are_the_known_resources_limits_without_dra_backed_ones() {
        let pod = pod(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {
                "example.com/gpu": "2", "example.com/nic": "1", "cpu": "1",
                "example.com/zero": "0", "example.com/dra": "1",
            }}}]},
            "status": {"extendedResourceClaimStatus": {
                "resourceClaimName": "c",
                "requestMappings": [{"containerName": "main", "resourceName": "example.com/dra", "requestName": "r"}],
            }},
        }));
        let main = &pod.spec.as_ref().unwrap().containers[0];
        let known = |r: &str| r.starts_with("example.com/") && r != "example.com/nic";
        let requests = device_requests(&pod, main, known);
        assert_eq!(
            requests,
            BTreeMap::from([("example.com/gpu".to_string(), 2)]),
            "unknown, zero and DRA-backed resources left out"
        );
    }

    #[test]
    fn unserved_requests_are_the_extended_resources_no_plugin_serves() {
        let pod = pod(json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {
                "example.com/gpu": "2", "example.com/nic": "1", "cpu": "1",
                "hugepages-2Mi": "1Gi", "kubernetes.io/batch": "1",
                "example.com/zero": "0", "example.com/dra": "1",
            }}}]},
            "status": {"extendedResourceClaimStatus": {
                "resourceClaimName": "c",
                "requestMappings": [{"containerName": "main", "resourceName": "example.com/dra", "requestName": "r"}],
            }},
        }));
        let main = &pod.spec.as_ref().unwrap().containers[0];
        let served = |r: &str| r == "example.com/gpu";
        assert_eq!(
            unserved_requests(&pod, main, served),
            BTreeMap::from([("example.com/nic".to_string(), 1)]),
            "native, zero, served and DRA-backed resources left out"
        );
    }

    #[test]
    fn terminal_and_deleted_pods_are_not_active() {
        let running =
            pod(json!({"metadata": {"name": "p", "uid": "u"}, "status": {"phase": "Running"}}));
        assert!(is_active(&running));
        for phase in ["Succeeded", "Failed"] {
            let done =
                pod(json!({"metadata": {"name": "p", "uid": "u"}, "status": {"phase": phase}}));
            assert!(!is_active(&done), "{phase}");
        }
        let deleting = pod(json!({"metadata": {"name": "p", "uid": "u",
            "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert!(!is_active(&deleting));
    }
}
