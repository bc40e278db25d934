use super::*;

const GPU: &str = "gpu.example.com";
const NIC: &str = "nic.example.com";

fn claim(uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "ns".into(),
        name: format!("claim-{uid}"),
        uid: uid.into(),
    }
}

fn pod(uid: &str, name: &str) -> ClaimPod {
    ClaimPod::new(uid, name, vec!["main".into()])
}

fn request(uid: &str, drivers: &[&str], user: Option<ClaimPod>) -> ClaimToPrepare {
    ClaimToPrepare {
        claim: claim(uid),
        drivers: drivers.iter().map(|d| d.to_string()).collect(),
        user,
    }
}

fn prepared(uid: &str, device: &str, error: Option<&str>) -> PreparedClaim {
    PreparedClaim {
        claim: claim(uid),
        devices: vec![PreparedDevice {
            request_names: vec!["req".into()],
            pool: "pool".into(),
            device: device.into(),
            cdi_device_ids: vec![format!("example.com/gpu={device}")],
            share_id: None,
        }],
        error: error.map(Into::into),
    }
}

fn none() -> HashSet<String> {
    HashSet::new()
}

#[test]
fn a_claim_is_recorded_pending_with_its_pod_before_the_driver_is_called() {
    let mut claims = PreparedClaims::default();
    let (plan, changed) = claims
        .begin_prepare(
            &[request("a", &[GPU], Some(pod("p1", "train")))],
            &none(),
            1,
        )
        .unwrap();
    assert!(changed);
    assert_eq!(plan.calls[GPU], [claim("a")]);
    assert!(plan.recorded.is_empty());
    let record = claims.get(GPU, "a").unwrap();
    assert!(!record.prepared, "pending until the driver answered");
    assert_eq!(record.pods, [pod("p1", "train")]);

    // The driver failed: the record stays pending, and the pod's unprepare
    // still calls the driver for it.
    assert!(!claims.finish_prepare(GPU, &[prepared("a", "gpu-0", Some("boom"))], 2));
    assert!(!claims.get(GPU, "a").unwrap().prepared);
    let (plan, _) = claims.begin_unprepare("p1");
    assert_eq!(plan.calls[GPU], [claim("a")]);
}

#[test]
fn a_prepared_claim_is_answered_from_its_record_and_a_second_pod_is_added() {
    let mut claims = PreparedClaims::default();
    claims
        .begin_prepare(
            &[request("a", &[GPU], Some(pod("p1", "train")))],
            &none(),
            1,
        )
        .unwrap();
    assert!(claims.finish_prepare(GPU, &[prepared("a", "gpu-0", None)], 2));
    assert!(
        !claims.finish_prepare(GPU, &[prepared("a", "gpu-0", None)], 3),
        "nothing new"
    );
    let record = claims.get(GPU, "a").unwrap();
    assert!(record.prepared);
    assert_eq!(record.prepared_at_unix_ms, 2);

    let (plan, changed) = claims
        .begin_prepare(
            &[request("a", &[GPU], Some(pod("p2", "serve")))],
            &none(),
            4,
        )
        .unwrap();
    assert!(changed, "the second pod is recorded");
    assert!(plan.calls.is_empty(), "no call for a prepared claim");
    assert_eq!(
        plan.recorded,
        [(GPU.to_string(), prepared("a", "gpu-0", None))]
    );
    let (_, changed) = claims
        .begin_prepare(
            &[request("a", &[GPU], Some(pod("p2", "serve")))],
            &none(),
            5,
        )
        .unwrap();
    assert!(!changed, "the same pod again changes nothing");
}

#[test]
fn a_claim_of_two_drivers_is_called_and_recorded_per_driver() {
    let mut claims = PreparedClaims::default();
    let (plan, _) = claims
        .begin_prepare(&[request("a", &[GPU, NIC], None)], &none(), 1)
        .unwrap();
    assert_eq!(plan.calls.len(), 2);
    claims.finish_prepare(GPU, &[prepared("a", "gpu-0", None)], 2);
    claims.finish_prepare(NIC, &[prepared("a", "nic-0", Some("no"))], 2);
    let (plan, _) = claims
        .begin_prepare(&[request("a", &[GPU, NIC], None)], &none(), 3)
        .unwrap();
    assert_eq!(
        plan.calls.keys().collect::<Vec<_>>(),
        [NIC],
        "only the driver that failed is called again"
    );
    assert_eq!(plan.recorded.len(), 1);
    let drivers: Vec<&str> = claims.drivers_of("a").map(|c| c.driver.as_str()).collect();
    assert_eq!(drivers, [GPU, NIC]);
    assert!(claims.forget(NIC, ["a"]));
    assert!(claims.get(GPU, "a").is_some(), "the other driver's stays");
    assert!(!claims.forget(NIC, ["a"]));
}

#[test]
fn refusals_change_nothing() {
    let mut claims = PreparedClaims::default();
    claims
        .begin_prepare(
            &[request("a", &[GPU], Some(pod("p1", "train")))],
            &none(),
            1,
        )
        .unwrap();
    let before = claims.list();

    // The same name under a new UID, while the old one is recorded.
    let mut replaced = request("b", &[GPU], Some(pod("p2", "serve")));
    replaced.claim.name = "claim-a".into();
    let fresh = request("c", &[GPU], Some(pod("p2", "serve")));
    let err = claims
        .begin_prepare(&[fresh.clone(), replaced], &none(), 2)
        .unwrap_err();
    assert!(matches!(err, DraError::ClaimReplaced { .. }), "{err}");

    // Pod p1 under another name.
    let err = claims
        .begin_prepare(
            &[request("c", &[GPU], Some(pod("p1", "serve")))],
            &none(),
            2,
        )
        .unwrap_err();
    assert_eq!(
        err,
        DraError::PodRenamed {
            pod: "p1".into(),
            known: "ns/train".into(),
            given: "ns/serve".into()
        }
    );

    // A claim being unprepared.
    let unpreparing: HashSet<String> = ["a".to_string()].into();
    let err = claims
        .begin_prepare(
            &[request("a", &[GPU], Some(pod("p3", "x")))],
            &unpreparing,
            2,
        )
        .unwrap_err();
    assert!(matches!(err, DraError::ClaimUnpreparing { .. }), "{err}");

    assert_eq!(claims.list(), before, "nothing recorded for a refusal");
    assert!(claims.get(GPU, "c").is_none());
}

#[test]
fn unpreparing_a_pod_forgets_it_from_shared_claims_and_calls_only_for_those_it_used_last() {
    let mut claims = PreparedClaims::default();
    for (uid, name) in [("p1", "train"), ("p2", "serve")] {
        claims
            .begin_prepare(
                &[request("shared", &[GPU], Some(pod(uid, name)))],
                &none(),
                1,
            )
            .unwrap();
    }
    claims
        .begin_prepare(
            &[request("own", &[GPU, NIC], Some(pod("p1", "train")))],
            &none(),
            1,
        )
        .unwrap();
    let (plan, changed) = claims.begin_unprepare("p1");
    assert!(changed, "p1 forgotten from the shared claim");
    assert_eq!(plan.calls[GPU], [claim("own")]);
    assert_eq!(plan.calls[NIC], [claim("own")]);
    assert_eq!(plan.shared, [(claim("shared"), vec![GPU.to_string()])]);
    assert_eq!(
        claims.get(GPU, "shared").unwrap().pods,
        [pod("p2", "serve")]
    );
    assert_eq!(
        claims.get(GPU, "own").unwrap().pods,
        [pod("p1", "train")],
        "kept until its drivers unprepared it"
    );
    let users: BTreeSet<&str> = claims
        .iter()
        .flat_map(|c| c.pods.iter().map(|p| p.uid.as_str()))
        .collect();
    assert_eq!(users, ["p1", "p2"].into());

    let (plan, changed) = claims.begin_unprepare("nobody");
    assert!(!changed);
    assert!(plan.calls.is_empty() && plan.shared.is_empty());
}

#[test]
fn a_checkpoint_of_the_records_restores_them() {
    let mut claims = PreparedClaims::default();
    claims
        .begin_prepare(
            &[request("a", &[GPU], Some(pod("p1", "train")))],
            &none(),
            1,
        )
        .unwrap();
    claims.finish_prepare(GPU, &[prepared("a", "gpu-0", None)], 2);
    claims
        .begin_prepare(&[request("b", &[NIC], None)], &none(), 3)
        .unwrap();
    let restored = PreparedClaims::restore(claims.list());
    assert_eq!(restored.list(), claims.list());
    assert_eq!(restored.pod_uids_named("ns", "train"), ["p1"].into());
}
