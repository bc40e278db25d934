//! The claim a pod has for extended resources a DeviceClass backs
//! (`DRAExtendedResource`, GA in v1.37): made by the scheduler and named in
//! `status.extendedResourceClaimStatus`, whose request mappings give each
//! container the requests for the extended resources it asks for.

use k8s_openapi::api::core::v1::{Container, Pod, PodExtendedResourceClaimStatus};

use crate::dra::ClaimPod;
use crate::pods::admit::spec::quantity_value;
use crate::pods::pod::PodRef;

/// The pod's claim for extended resources backed by DRA, once the
/// scheduler has made it.
pub(super) fn extended_claim(pod: &Pod) -> Option<&PodExtendedResourceClaimStatus> {
    pod.status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .filter(|e| !e.resource_claim_name.is_empty())
}

/// How the pod's `containers` use its extended-resource claim: each gets
/// the requests mapped to it for the extended resources it asks a non-zero
/// amount of, as the kubelet's `GetResources` gives them.
pub(super) fn extended_user(
    pod: &PodRef,
    containers: &[&Container],
    extended: &PodExtendedResourceClaimStatus,
) -> ClaimPod {
    let mut user = ClaimPod::new(pod.uid.clone(), pod.name.clone(), Vec::new());
    for container in containers {
        let asks = |resource: &str| {
            container
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource))
                .is_some_and(|q| quantity_value(&q.0) != Some(0))
                && backed_by_dra(resource)
        };
        let mut requests: Vec<String> = Vec::new();
        for mapping in &extended.request_mappings {
            if mapping.container_name == container.name
                && asks(&mapping.resource_name)
                && !requests.contains(&mapping.request_name)
            {
                requests.push(mapping.request_name.clone());
            }
        }
        if !requests.is_empty() {
            user.containers.push(container.name.clone());
            user.requests.insert(container.name.clone(), requests);
        }
    }
    user
}

/// Whether `resource` may be an extended resource backed by DRA: an
/// extended resource name (domain-qualified, outside `kubernetes.io`, not
/// `requests.`-prefixed), or a DeviceClass's implicit
/// `deviceclass.resource.kubernetes.io/<class>`.
pub(super) fn backed_by_dra(resource: &str) -> bool {
    if resource.starts_with("deviceclass.resource.kubernetes.io/") {
        return true;
    }
    crate::pods::admit::spec::is_extended_resource(resource)
}
