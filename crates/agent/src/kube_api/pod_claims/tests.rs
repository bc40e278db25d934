// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use serde_json::{Value, json};

/// A pod `train` (UID pod-1) with a template entry `gpus` and a direct
/// entry `shared`; container `whole` names `gpus` whole, `one` its request
/// `gpu`, `both` names `shared` whole and `gpus`'s `gpu` twice.
fn pod(statuses: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "train", "uid": "pod-1"},
        "spec": {
            "resourceClaims": [
                {"name": "gpus", "resourceClaimTemplateName": "gpu-template"},
                {"name": "shared", "resourceClaimName": "shared-claim"},
            ],
            "initContainers": [{"name": "init"}],
            "containers": [
                {"name": "whole", "resources": {"claims": [{"name": "gpus"}]}},
                {"name": "one", "resources": {"claims": [{"name": "gpus", "request": "gpu"}]}},
                {"name": "both", "resources": {"claims": [
                    {"name": "shared"}, {"name": "gpus", "request": "gpu"}, {"name": "gpus", "request": "gpu"}]}},
            ],
        },
        "status": {"resourceClaimStatuses": statuses},
    }))
    .unwrap()
}

fn claim(
    name: &str,
    uid: &str,
    owner: Option<&str>,
    allocated: bool,
    reserved: &[&str],
) -> ResourceClaim {
    let mut claim = json!({
        "metadata": {"namespace": "default", "name": name, "uid": uid},
        "spec": {},
        "status": {},
    });
    if let Some(owner) = owner {
        claim["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
            "name": "train", "uid": owner, "controller": true}]);
    }
    if allocated {
        claim["status"]["allocation"] = json!({"devices": {"results": [
            {"request": "gpu/big", "driver": "gpu.example.com", "pool": "p", "device": "d0"},
            {"request": "extra", "driver": "nic.example.com", "pool": "p", "device": "n0"},
            {"request": "extra", "driver": "gpu.example.com", "pool": "p", "device": "d1"},
        ]}});
    }
    claim["status"]["reservedFor"] = reserved
        .iter()
        .map(|uid| json!({"resource": "pods", "name": "train", "uid": uid}))
        .collect();
    serde_json::from_value(claim).unwrap()
}

fn plan(pod: &Pod, claims: Vec<ResourceClaim>) -> Result<PodClaims, PodClaimsError> {
    let names = claim_names(pod)?;
    let claims = claims
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap(), c))
        .collect();
    check(pod, &names, &claims)
}

fn statuses() -> Value {
    json!([{"name": "gpus", "resourceClaimName": "train-gpus-x"}])
}

#[test]
fn claims_resolve_with_their_drivers_and_each_containers_requests() {
    let pod = pod(statuses());
    let claims = vec![
        claim("train-gpus-x", "c-1", Some("pod-1"), true, &["pod-1"]),
        claim("shared-claim", "c-2", None, true, &["other", "pod-1"]),
    ];
    let plan = plan(&pod, claims).unwrap();
    assert_eq!(plan.pod.uid, "pod-1");
    assert_eq!(plan.containers, ["init", "whole", "one", "both"]);
    let gpus = &plan.claims[0];
    assert_eq!(gpus.claim.to_string(), "default/train-gpus-x/c-1");
    assert_eq!(gpus.drivers, ["gpu.example.com", "nic.example.com"]);
    assert_eq!(gpus.user.containers, ["whole", "one", "both"]);
    assert_eq!(gpus.user.requests.get("one").unwrap(), &["gpu"]);
    assert_eq!(gpus.user.requests.get("both").unwrap(), &["gpu"]);
    assert!(!gpus.user.requests.contains_key("whole"));
    let shared = &plan.claims[1];
    assert_eq!(shared.user.containers, ["both"]);
    assert!(shared.user.requests.is_empty());
}

#[test]
fn a_template_entry_without_its_claim_is_not_created_yet() {
    let error = claim_names(&pod(json!([]))).unwrap_err();
    assert!(
        matches!(error, PodClaimsError::NotCreated { ref entry, .. } if entry == "gpus"),
        "{error}"
    );
    // A status entry without a name: no claim is needed.
    let pod = pod(json!([{"name": "gpus"}]));
    let plan = plan(
        &pod,
        vec![claim("shared-claim", "c-2", None, true, &["pod-1"])],
    )
    .unwrap();
    assert_eq!(plan.claims.len(), 1);
}

#[test]
fn a_claim_made_for_another_pod_is_refused_naming_it() {
    let pod = pod(statuses());
    let claims = vec![
        claim("train-gpus-x", "c-1", Some("pod-0"), true, &["pod-1"]),
        claim("shared-claim", "c-2", None, true, &["pod-1"]),
    ];
    let error = plan(&pod, claims).unwrap_err().to_string();
    assert_eq!(
        error,
        "ResourceClaim default/train-gpus-x was not created for pod default/train (the pod is not its owner)"
    );
}

#[test]
fn unallocated_and_unreserved_claims_are_refused_naming_them() {
    let pod = pod(statuses());
    let error = plan(
        &pod,
        vec![
            claim("train-gpus-x", "c-1", Some("pod-1"), false, &[]),
            claim("shared-claim", "c-2", None, true, &["pod-1"]),
        ],
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        error,
        "ResourceClaim default/train-gpus-x (UID c-1) is not allocated yet"
    );
    let error = plan(
        &pod,
        vec![
            claim("train-gpus-x", "c-1", Some("pod-1"), true, &["pod-1"]),
            claim("shared-claim", "c-2", None, true, &["other"]),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("not allowed to use ResourceClaim default/shared-claim (UID c-2)"),
        "{error}"
    );
}
