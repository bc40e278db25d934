// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::extended::backed_by_dra;
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

/// A pod `train` (UID pod-1) asking for extended resources: `main` for 2
/// `example.com/gpu` (backed by a DeviceClass) and 1
/// `deviceclass.resource.kubernetes.io/nic`, `idle` for 0 `example.com/gpu`,
/// `plain` for cpu only; the scheduler's claim maps requests to them.
fn extended_pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "train", "uid": "pod-1"},
        "spec": {"containers": [
            {"name": "main", "resources": {"requests": {
                "example.com/gpu": "2", "deviceclass.resource.kubernetes.io/nic": "1", "cpu": "1"}}},
            {"name": "idle", "resources": {"requests": {"example.com/gpu": "0"}}},
            {"name": "plain", "resources": {"requests": {"cpu": "1"}}},
        ]},
        "status": {"extendedResourceClaimStatus": {
            "resourceClaimName": "train-extended-resources-x",
            "requestMappings": [
                {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"},
                {"containerName": "main", "resourceName": "deviceclass.resource.kubernetes.io/nic", "requestName": "container-0-request-1"},
                {"containerName": "idle", "resourceName": "example.com/gpu", "requestName": "container-1-request-0"},
                {"containerName": "plain", "resourceName": "example.com/gpu", "requestName": "container-2-request-0"},
            ],
        }},
    }))
    .unwrap()
}

#[test]
fn an_extended_resource_claim_gives_each_container_the_requests_mapped_to_it() {
    let pod = extended_pod();
    let plan = plan(
        &pod,
        vec![claim(
            "train-extended-resources-x",
            "c-9",
            None,
            true,
            &["pod-1"],
        )],
    )
    .unwrap();
    assert_eq!(plan.claims.len(), 1);
    let extended = &plan.claims[0];
    assert_eq!(
        extended.claim.to_string(),
        "default/train-extended-resources-x/c-9"
    );
    // Only `main` asks a non-zero amount of a resource mapped to it.
    assert_eq!(extended.user.containers, ["main"]);
    assert_eq!(
        extended.user.requests.get("main").unwrap(),
        &["container-0-request-0", "container-0-request-1"]
    );
}

#[test]
fn an_extended_resource_claim_is_checked_like_any_other() {
    let pod = extended_pod();
    let error = plan(
        &pod,
        vec![claim(
            "train-extended-resources-x",
            "c-9",
            None,
            true,
            &["other"],
        )],
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("not allowed to use ResourceClaim default/train-extended-resources-x"),
        "{error}"
    );
    let error = plan(
        &pod,
        vec![claim(
            "train-extended-resources-x",
            "c-9",
            None,
            false,
            &["pod-1"],
        )],
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("is not allocated yet"), "{error}");
}

#[test]
fn extended_resource_names_are_told_from_native_ones() {
    for backed in [
        "example.com/gpu",
        "deviceclass.resource.kubernetes.io/gpu.example.com",
    ] {
        assert!(backed_by_dra(backed), "{backed}");
    }
    for native in [
        "cpu",
        "memory",
        "kubernetes.io/foo",
        "hugepages.kubernetes.io/x",
        "requests.example.com/gpu",
    ] {
        assert!(!backed_by_dra(native), "{native}");
    }
}

#[test]
fn a_pod_bound_to_another_node_or_to_none_is_not_prepared_here() {
    let mut bound = pod(statuses());
    assert!(matches!(
        bound_here(&bound, "node-1"),
        Err(PodClaimsError::OtherNode { bound: None, .. })
    ));
    bound.spec.as_mut().unwrap().node_name = Some("node-2".into());
    let error = bound_here(&bound, "node-1").unwrap_err();
    assert_eq!(
        error.to_string(),
        "pod default/train is bound to node node-2, not node-1"
    );
    bound.spec.as_mut().unwrap().node_name = Some("node-1".into());
    assert!(bound_here(&bound, "node-1").is_ok());
}

#[test]
fn a_claim_allocated_for_other_nodes_by_name_is_not_prepared_here() {
    let with_selector = |selector: Value| {
        let mut claim = claim("c", "c-1", None, true, &["pod-1"]);
        let mut allocation =
            serde_json::to_value(claim.status.as_ref().unwrap().allocation.clone()).unwrap();
        allocation["nodeSelector"] = selector;
        claim.status.as_mut().unwrap().allocation =
            Some(serde_json::from_value(allocation).unwrap());
        claim
    };
    let by_name = |nodes: &[&str]| {
        json!({"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": nodes}]}]})
    };
    assert!(
        allocated_here(
            &with_selector(by_name(&["node-1"])),
            "node-1",
            "default/train"
        )
        .is_ok()
    );
    let error = allocated_here(
        &with_selector(by_name(&["node-2"])),
        "node-1",
        "default/train",
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "ResourceClaim default/c of pod default/train is allocated for other nodes, not node-1"
    );
    let by_label = json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a"]}]}]});
    assert!(
        allocated_here(&with_selector(by_label), "node-1", "default/train").is_ok(),
        "a selector by labels cannot be judged without the Node's labels"
    );
    let unallocated = claim("c", "c-1", None, false, &["pod-1"]);
    assert!(allocated_here(&unallocated, "node-1", "default/train").is_ok());
}
