use super::*;

/// Each claim of `results` used by `pod`.
fn pods_of(results: &[PreparedClaim], pod: ClaimPod) -> ClaimPods {
    results
        .iter()
        .map(|r| (r.claim.uid.clone(), pod.clone()))
        .collect()
}

fn prepared(uid: &str, device: &str, error: Option<&str>) -> PreparedClaim {
    PreparedClaim {
        claim: ClaimRef {
            namespace: "ns".into(),
            name: format!("claim-{uid}"),
            uid: uid.into(),
        },
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

#[test]
fn only_successes_are_recorded_per_driver_and_unprepare_forgets() {
    let mut claims = PreparedClaims::default();
    let results = [
        prepared("a", "gpu-0", None),
        prepared("b", "gpu-1", Some("no")),
    ];
    assert!(claims.record("gpu.example.com", &results, &ClaimPods::new(), 1));
    assert!(
        !claims.record("gpu.example.com", &results[..1], &ClaimPods::new(), 2),
        "nothing new"
    );
    assert_eq!(
        claims.get("gpu.example.com", "a").unwrap().devices[0].device,
        "gpu-0"
    );
    assert!(
        claims.get("gpu.example.com", "b").is_none(),
        "a failure is not recorded"
    );
    assert!(
        claims.get("other.example.com", "a").is_none(),
        "another driver's claim"
    );
    let drivers: Vec<&str> = claims.drivers_of("a").map(|c| c.driver.as_str()).collect();
    assert_eq!(drivers, ["gpu.example.com"]);

    let restored = PreparedClaims::restore(claims.checkpoint());
    assert_eq!(restored.list(), claims.list());
    assert!(!claims.forget("other.example.com", ["a"]), "not its claim");
    assert!(claims.forget("gpu.example.com", ["a", "never"]));
    assert!(claims.list().is_empty());
    assert!(!claims.forget("gpu.example.com", ["a"]));
}

#[test]
fn pods_are_added_to_a_claim_once_with_their_containers() {
    let mut claims = PreparedClaims::default();
    let results = [prepared("a", "gpu-0", None)];
    let pod = |containers: &[&str]| {
        ClaimPod::new(
            "pod-1",
            "train",
            containers.iter().map(|c| c.to_string()).collect(),
        )
    };
    assert!(claims.record(
        "gpu.example.com",
        &results,
        &pods_of(&results, pod(&["main"])),
        1
    ));
    assert!(claims.knows_pods("gpu.example.com", &pods_of(&results, pod(&["main"]))));
    assert!(!claims.knows_pods("gpu.example.com", &pods_of(&results, pod(&["side"]))));
    assert!(!claims.record(
        "gpu.example.com",
        &results,
        &pods_of(&results, pod(&["main"])),
        2
    ));
    assert!(claims.record(
        "gpu.example.com",
        &results,
        &pods_of(&results, pod(&["side"])),
        3
    ));
    let record = claims.get("gpu.example.com", "a").unwrap();
    assert_eq!(record.pods, vec![pod(&["main", "side"])]);
    assert_eq!(record.prepared_at_unix_ms, 1, "prepared once");
    let restored = PreparedClaims::restore(claims.checkpoint());
    assert_eq!(restored.list(), claims.list());
    assert!(claims.forget("gpu.example.com", ["a"]));
    assert!(claims.list().is_empty());
    assert!(!claims.forget("gpu.example.com", ["a"]));
}

#[test]
fn a_claim_prepared_by_two_drivers_keeps_each_drivers_record_until_that_driver_unprepares() {
    let mut claims = PreparedClaims::default();
    assert!(claims.record(
        "gpu.example.com",
        &[prepared("a", "gpu-0", None)],
        &ClaimPods::new(),
        1
    ));
    assert!(claims.record(
        "nic.example.com",
        &[prepared("a", "nic-0", None)],
        &ClaimPods::new(),
        2
    ));
    assert!(
        !claims.record(
            "gpu.example.com",
            &[prepared("a", "gpu-0", None)],
            &ClaimPods::new(),
            3
        ),
        "the second driver did not replace the first one's record"
    );
    assert_eq!(
        claims.get("gpu.example.com", "a").unwrap().devices[0].device,
        "gpu-0"
    );
    assert_eq!(
        claims.get("nic.example.com", "a").unwrap().devices[0].device,
        "nic-0"
    );
    let drivers: Vec<&str> = claims.drivers_of("a").map(|c| c.driver.as_str()).collect();
    assert_eq!(drivers, ["gpu.example.com", "nic.example.com"]);
    assert_eq!(claims.drivers_of("b").count(), 0);
    assert_eq!(
        PreparedClaims::restore(claims.checkpoint()).list(),
        claims.list()
    );

    assert!(claims.forget("nic.example.com", ["a"]));
    assert!(claims.get("nic.example.com", "a").is_none());
    assert!(
        claims.get("gpu.example.com", "a").is_some(),
        "the other driver's stays"
    );
}

#[test]
fn a_checkpoint_written_with_one_record_per_claim_still_loads() {
    // As written before claims were keyed by driver too.
    let written = r#"{"claims":[{"driver":"gpu.example.com",
        "claim":{"namespace":"ns","name":"claim-a","uid":"a"},
        "devices":[{"request_names":["req"],"pool":"pool","device":"gpu-0",
            "cdi_device_ids":["example.com/gpu=gpu-0"],"share_id":null}],
        "prepared_at_unix_ms":7,
        "pods":[{"uid":"pod-1","name":"train","containers":["main"]}]}]}"#;
    let checkpoint: DraCheckpoint = serde_json::from_str(written).unwrap();
    let claims = PreparedClaims::restore(checkpoint);
    let record = claims.get("gpu.example.com", "a").unwrap();
    assert_eq!(record.devices, prepared("a", "gpu-0", None).devices);
    assert_eq!(record.prepared_at_unix_ms, 7);
    assert_eq!(record.pods[0].name, "train");
}

#[test]
fn a_pod_recorded_under_one_name_is_never_renamed() {
    let mut claims = PreparedClaims::default();
    let pod = |name: &str| ClaimPod::new("pod-1", name, vec!["main".into()]);
    let results = [prepared("a", "gpu-0", None)];
    assert!(claims.record(
        "gpu.example.com",
        &results,
        &pods_of(&results, pod("train")),
        1
    ));
    assert_eq!(claims.pod_name_conflict(&pod("train"), "ns"), None);
    assert_eq!(
        claims.pod_name_conflict(&pod("serve"), "ns"),
        Some(PodNameConflict {
            known: "ns/train".into(),
            given: "ns/serve".into()
        })
    );
    assert_eq!(
        claims
            .pod_name_conflict(&pod("train"), "other")
            .map(|c| c.given),
        Some("other/train".into()),
        "another namespace is another pod"
    );
    let other = [prepared("b", "gpu-1", None)];
    claims.record("gpu.example.com", &other, &pods_of(&other, pod("serve")), 2);
    claims.record(
        "gpu.example.com",
        &results,
        &pods_of(&results, pod("serve")),
        3,
    );
    for record in claims.iter() {
        assert!(record.pods.iter().all(|p| p.name == "train"), "{record:?}");
    }
}
