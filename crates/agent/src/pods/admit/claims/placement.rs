//! Whether a pod and its claims are this node's to prepare: the pod bound
//! to it, and each claim allocated for it. The kubelet trusts the
//! scheduler for both; a node agent that may read other nodes' pods (a
//! ServiceAccount's grants) must not prepare them, or a device could end
//! up used twice.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;

use super::PodClaimsError;
use crate::pods::admit::spec::pod_name;

/// Whether `pod` is bound to `node`: a node prepares only its own pods, or
/// a device of it could be used twice.
pub(crate) fn bound_here(pod: &Pod, node: &str) -> Result<(), PodClaimsError> {
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if bound == Some(node) {
        return Ok(());
    }
    Err(PodClaimsError::OtherNode {
        pod: pod_name(pod),
        bound: bound.map(str::to_string),
        node: node.to_string(),
    })
}

/// Whether `claim`'s allocation is for `node`, as far as its node selector
/// tells without the Node's labels: a selector whose every term names nodes
/// by `metadata.name` (as an allocation of node-local devices does) must
/// name this one; one that selects by labels, or none, is taken as is.
pub(crate) fn allocated_here(
    claim: &ResourceClaim,
    node: &str,
    pod: &str,
) -> Result<(), PodClaimsError> {
    let Some(selector) = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.node_selector.as_ref())
    else {
        return Ok(());
    };
    let terms = &selector.node_selector_terms;
    let names_only = |term: &k8s_openapi::api::core::v1::NodeSelectorTerm| {
        term.match_expressions.as_ref().is_none_or(Vec::is_empty)
            && term
                .match_fields
                .iter()
                .flatten()
                .all(|f| f.key == "metadata.name" && f.operator == "In")
    };
    if terms.is_empty() || !terms.iter().all(names_only) {
        return Ok(());
    }
    let selects = terms.iter().any(|term| {
        term.match_fields
            .iter()
            .flatten()
            .all(|f| f.values.iter().flatten().any(|value| value == node))
            && term.match_fields.as_ref().is_some_and(|f| !f.is_empty())
    });
    if selects {
        return Ok(());
    }
    Err(PodClaimsError::AllocatedElsewhere {
        claim: format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default()
        ),
        pod: pod.to_string(),
        node: node.to_string(),
    })
}
