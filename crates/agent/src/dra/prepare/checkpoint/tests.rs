use super::*;
use crate::dra::claim::PreparedDevice;

#[test]
fn a_checkpoint_written_with_one_record_per_claim_and_no_pending_state_still_loads() {
    // As written before claims were keyed by driver too, and before claims
    // were recorded pending: every record there was a prepared claim.
    let written = r#"{"claims":[{"driver":"gpu.example.com",
        "claim":{"namespace":"ns","name":"claim-a","uid":"a"},
        "devices":[{"request_names":["req"],"pool":"pool","device":"gpu-0",
            "cdi_device_ids":["example.com/gpu=gpu-0"],"share_id":null}],
        "prepared_at_unix_ms":7,
        "pods":[{"uid":"pod-1","name":"train","containers":["main"]}]}]}"#;
    let checkpoint: DraCheckpoint = serde_json::from_str(written).unwrap();
    let claims = PreparedClaims::restore(checkpoint.claims);
    let record = claims.get("gpu.example.com", "a").unwrap();
    assert_eq!(
        record.devices,
        [PreparedDevice {
            request_names: vec!["req".into()],
            pool: "pool".into(),
            device: "gpu-0".into(),
            cdi_device_ids: vec!["example.com/gpu=gpu-0".into()],
            share_id: None,
        }]
    );
    assert!(record.prepared);
    assert_eq!(record.prepared_at_unix_ms, 7);
    assert_eq!(record.pods[0].name, "train");
}

#[test]
fn a_pending_record_reads_back_as_pending() {
    let record = RecordedClaim {
        driver: "gpu.example.com".into(),
        claim: "ns/claim-a/a".parse().unwrap(),
        devices: Vec::new(),
        prepared_at_unix_ms: 1,
        prepared: false,
        pods: Vec::new(),
    };
    let checkpoint = DraCheckpoint {
        claims: vec![record.clone()],
    };
    let text = serde_json::to_string(&checkpoint).unwrap();
    let back: DraCheckpoint = serde_json::from_str(&text).unwrap();
    assert_eq!(back.claims, [record]);
}
