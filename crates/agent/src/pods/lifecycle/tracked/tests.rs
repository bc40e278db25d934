use std::time::Duration;

use serde_json::json;

use super::*;
use crate::device::AllocateError;
use crate::pods::admit::claims::PodClaimsError;

fn pod(phase: &str, deleting: bool) -> Arc<Pod> {
    let mut metadata = json!({"namespace": "ml", "name": "train", "uid": "u1"});
    if deleting {
        metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    Arc::new(
        serde_json::from_value(json!({"metadata": metadata, "status": {"phase": phase}})).unwrap(),
    )
}

fn pod_ref() -> PodRef {
    PodRef {
        namespace: "ml".into(),
        name: "train".into(),
        uid: "u1".into(),
    }
}

fn seen() -> Tracked {
    Tracked::seen(pod("Pending", false), pod_ref(), SystemTime::now())
}

fn now() -> (Instant, SystemTime) {
    (Instant::now(), SystemTime::now())
}

const SECOND: fn(u32) -> Duration = |failures| Duration::from_secs(u64::from(failures));

fn devices_failed(resource: &str) -> AdmissionError {
    AdmissionError::Devices {
        container: "main".into(),
        source: AllocateError::NoHealthy(resource.into()),
    }
}

fn not_allocated() -> AdmissionError {
    AdmissionError::Claims(Arc::new(PodClaimsError::NotAllocated {
        claim: "ml/gpus".into(),
        uid: "c1".into(),
    }))
}

#[test]
fn an_active_pod_is_admitted_once_then_run_until_it_ends() {
    let mut pod = seen();
    let at = Instant::now();
    assert_eq!(pod.next(at), Some(Next::Admit));
    pod.started(Next::Admit);
    assert_eq!(pod.phase(), PodPhase::Admitting);
    assert_eq!(pod.next(at), None, "one operation at a time");
    pod.admitted(
        vec![ContainerResources::default()],
        false,
        SystemTime::now(),
    );
    assert_eq!(pod.phase(), PodPhase::Admitted);
    assert_eq!(pod.next(at), Some(Next::Run), "admitted once, then run");
    pod.started(Next::Run);
    assert_eq!(pod.next(at), None, "one worker at a time");
    pod.update(self::pod("Running", false));
    assert_eq!(
        pod.next(at),
        None,
        "a change of a running pod starts nothing"
    );
    pod.phase_written(ApiPhase::Running);
    assert_eq!(pod.status().pod_phase.as_deref(), Some("Running"));
    let status = pod.status();
    assert_eq!(status.phase, PodPhase::Admitted);
    assert_eq!(status.containers.len(), 1);
    assert!(status.ready_at_unix_us.is_some());

    // The runtime lost it: admitted again, setting up what it holds.
    pod.runtime_lost();
    assert_eq!(pod.next(at), Some(Next::Admit));
    assert!(pod.fresh());
    pod.started(Next::Admit);
    pod.admitted(
        vec![ContainerResources::default()],
        false,
        SystemTime::now(),
    );
    assert!(!pod.fresh(), "set up again once");
    pod.started(Next::Run);

    // Its worker found it ended: it is given back, whatever the API shows.
    pod.worker_ended(Some(ApiPhase::Succeeded));
    assert!(!pod.wants_admission());
    assert_eq!(pod.next(at), Some(Next::Release));
}

#[test]
fn a_waiting_pod_is_tried_again_after_its_backoff_or_at_once_when_it_changes() {
    let mut pod = seen();
    pod.started(Next::Admit);
    let (at, wall) = now();
    let warning = pod
        .not_admitted(&not_allocated(), SECOND, (at, wall))
        .expect("the kubelet records a Warning on each sync of a pod it cannot prepare");
    assert_eq!(warning.reason, "FailedPrepareDynamicResources");
    assert!(
        warning
            .message
            .starts_with("Failed to prepare dynamic resources: prepare dynamic resources: "),
        "{warning:?}"
    );
    assert_eq!(pod.phase(), PodPhase::Waiting);
    assert_eq!(pod.next(at), None);
    assert_eq!(pod.retry_at(), Some(at + Duration::from_secs(1)));
    assert_eq!(pod.next(at + Duration::from_secs(1)), Some(Next::Admit));
    pod.update(self::pod("Pending", false));
    assert_eq!(pod.next(at), Some(Next::Admit), "the pod changed: at once");
    let status = pod.status();
    assert_eq!(status.reason, None, "waiting is no failure");
    assert!(status.message.unwrap().contains("not allocated"));
    pod.started(Next::Admit);
    assert_eq!(
        pod.not_admitted(&not_allocated(), SECOND, now()),
        None,
        "the same wait is not recorded again"
    );
}

#[test]
fn a_failure_is_warned_once_per_change_of_message_with_the_kubelets_reason() {
    let mut pod = seen();
    pod.started(Next::Admit);
    let warning = pod
        .not_admitted(&devices_failed("example.com/gpu"), SECOND, now())
        .unwrap();
    assert_eq!(warning.reason, "UnexpectedAdmissionError");
    assert_eq!(
        warning.message,
        "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/gpu, which is unexpected",
        "the kubelet's words: no container named"
    );
    pod.started(Next::Admit);
    assert_eq!(
        pod.not_admitted(&devices_failed("example.com/gpu"), SECOND, now()),
        None,
        "the same failure again"
    );
    assert_eq!(pod.status().failures, 2);
    pod.started(Next::Admit);
    let other = pod.not_admitted(&devices_failed("example.com/nic"), SECOND, now());
    assert!(other.is_some(), "another failure is recorded");
    pod.started(Next::Admit);
    let dra = AdmissionError::Prepare(vec!["ResourceClaim ml/gpus: boom".into()]);
    let warning = pod.not_admitted(&dra, SECOND, now()).unwrap();
    assert_eq!(warning.reason, "FailedPrepareDynamicResources");
    assert!(
        warning
            .message
            .starts_with("Failed to prepare dynamic resources: ")
    );
    assert_eq!(pod.phase(), PodPhase::Failed);
}

#[test]
fn a_pod_that_ends_gives_back_what_it_holds_and_is_forgotten_once_gone() {
    let mut pod = seen();
    pod.started(Next::Admit);
    pod.admitted(Vec::new(), false, SystemTime::now());
    let at = Instant::now();
    pod.update(self::pod("Succeeded", false));
    assert_eq!(pod.next(at), Some(Next::Release));
    pod.started(Next::Release);
    pod.not_released(
        &ReleaseError::Unprepare(vec!["boom".into()]),
        SECOND,
        (at, SystemTime::now()),
    );
    assert_eq!(pod.phase(), PodPhase::Releasing);
    assert_eq!(pod.next(at), None, "backs off");
    assert_eq!(pod.next(at + Duration::from_secs(1)), Some(Next::Release));
    pod.started(Next::Release);
    pod.released();
    assert_eq!(pod.next(at), None);
    assert!(!pod.forgettable(), "the API still has it");
    pod.gone(None);
    assert!(pod.forgettable());
}

#[test]
fn a_pod_deleted_while_it_is_admitted_gives_back_what_it_got_afterwards() {
    let mut pod = seen();
    pod.started(Next::Admit);
    pod.gone(Some(self::pod("Pending", true)));
    let at = Instant::now();
    assert_eq!(pod.next(at), None, "the admission still runs");
    pod.admitted(Vec::new(), false, SystemTime::now());
    assert_eq!(pod.next(at), Some(Next::Release));
}

#[test]
fn a_pod_known_only_from_what_it_holds_is_given_back_then_forgotten() {
    let mut pod = Tracked::orphan(pod_ref(), SystemTime::now());
    assert!(!pod.wants_admission());
    assert_eq!(pod.next(Instant::now()), Some(Next::Release));
    pod.started(Next::Release);
    pod.released();
    assert!(pod.forgettable());
    pod.holds_again();
    assert_eq!(
        pod.next(Instant::now()),
        Some(Next::Release),
        "held again: given back again"
    );
}

#[test]
fn room_made_elsewhere_tries_a_failed_pod_again_at_once() {
    let mut pod = seen();
    pod.started(Next::Admit);
    let (at, wall) = now();
    pod.not_admitted(&devices_failed("example.com/gpu"), SECOND, (at, wall));
    assert_eq!(pod.next(at), None);
    assert!(pod.room_made(), "woken");
    assert_eq!(pod.next(at), Some(Next::Admit));
    assert!(!pod.room_made(), "already due: nothing to wake");
}

#[test]
fn a_deleted_or_terminal_pod_is_not_admitted() {
    for ended in [
        pod("Succeeded", false),
        pod("Failed", false),
        pod("Running", true),
    ] {
        let pod = Tracked::seen(ended, pod_ref(), SystemTime::now());
        assert!(!pod.wants_admission());
        assert_eq!(pod.next(Instant::now()), Some(Next::Release));
    }
}

#[test]
fn a_deleted_pod_whose_admission_was_cut_short_gives_back_what_it_got() {
    let mut pod = seen();
    pod.started(Next::Admit);
    assert!(pod.running());
    assert_eq!(pod.phase(), PodPhase::Admitting);
    pod.gone(Some(self::pod("Pending", true)));
    pod.admission_cancelled();
    assert!(!pod.running());
    assert_eq!(pod.phase(), PodPhase::Releasing);
    assert_eq!(pod.next(Instant::now()), Some(Next::Release), "at once");
}

#[test]
fn a_panicked_admission_is_a_failed_admission_tried_again() {
    let mut pod = seen();
    pod.started(Next::Admit);
    let (at, wall) = now();
    pod.admission_panicked(
        "admission failed unexpectedly: boom".into(),
        SECOND,
        (at, wall),
    );
    assert_eq!(pod.phase(), PodPhase::Failed, "not shown as giving back");
    assert_eq!(pod.next(at), None, "backs off");
    assert_eq!(pod.next(at + Duration::from_secs(1)), Some(Next::Admit));
    let status = pod.status();
    assert_eq!(status.failures, 1);
    assert_eq!(
        status.message.as_deref(),
        Some("admission failed unexpectedly: boom")
    );
}

#[test]
fn pods_are_admitted_oldest_first_then_by_namespace_and_name() {
    let made = |namespace: &str, name: &str, uid: &str, created: &str| {
        let pod: Pod = serde_json::from_value(json!({"metadata": {
            "namespace": namespace, "name": name, "uid": uid, "creationTimestamp": created,
        }}))
        .unwrap();
        let pod_ref = PodRef {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        };
        Tracked::seen(Arc::new(pod), pod_ref, SystemTime::now())
    };
    let mut pods = [
        made("default", "young", "u1", "2026-01-01T00:00:02Z"),
        made("default", "b-old", "u2", "2026-01-01T00:00:01Z"),
        made("default", "a-old", "u3", "2026-01-01T00:00:01Z"),
        made("aaa", "z-old", "u4", "2026-01-01T00:00:01Z"),
    ];
    pods.sort_by_key(Tracked::admission_order);
    let order: Vec<&str> = pods.iter().map(|p| p.pod_ref().name.as_str()).collect();
    assert_eq!(order, ["z-old", "a-old", "b-old", "young"]);
}

#[test]
fn waiting_for_an_unserved_resource_records_the_kubelets_reason_and_words() {
    let mut pod = seen();
    pod.started(Next::Admit);
    let unserved = AdmissionError::Unserved {
        container: "main".into(),
        resource: "example.com/gpu".into(),
        requested: 2,
        capacity: 0,
    };
    let warning = pod.not_admitted(&unserved, SECOND, now()).unwrap();
    assert_eq!(pod.phase(), PodPhase::Waiting, "it waits for the plugin");
    assert_eq!(warning.reason, "OutOfexample.com/gpu");
    assert_eq!(
        warning.message,
        "Node didn't have enough resource: example.com/gpu, requested: 2, used: 0, capacity: 0"
    );
}

#[test]
fn room_made_while_an_attempt_runs_makes_its_failure_try_again_at_once() {
    let mut pod = seen();
    pod.started(Next::Admit);
    assert!(!pod.room_made(), "nothing to wake while it runs");
    let (at, wall) = now();
    pod.not_admitted(&devices_failed("example.com/gpu"), SECOND, (at, wall));
    assert_eq!(
        pod.next(at),
        Some(Next::Admit),
        "at once, not after the backoff"
    );
    pod.started(Next::Admit);
    pod.not_admitted(&devices_failed("example.com/gpu"), SECOND, (at, wall));
    assert_eq!(pod.next(at), None, "a plain failure waits out its backoff");
}

#[test]
fn a_pod_the_node_stops_for_good_is_given_back_and_never_run_again() {
    let mut pod = seen();
    let at = Instant::now();
    pod.started(Next::Admit);
    pod.admitted(
        vec![ContainerResources::default()],
        false,
        SystemTime::now(),
    );
    assert!(pod.active(), "admitted: one of the node's active pods");
    pod.kill();
    assert!(!pod.active());
    assert!(!pod.wants_admission(), "whatever the API still shows");
    assert_eq!(pod.next(at), Some(Next::Release));
    pod.started(Next::Release);
    assert!(!pod.given_back(), "its release runs");
    pod.released();
    assert!(pod.given_back());
    pod.update(self::pod("Running", false));
    assert_eq!(pod.next(at), None, "a change does not bring it back");
}

#[test]
fn a_refused_pod_ends_once_its_status_says_so() {
    let mut pod = seen();
    let at = Instant::now();
    pod.started(Next::Admit);
    // The status could not be written: refused again after the backoff.
    pod.rejected(false, SECOND, now());
    assert_eq!(pod.next(at), None, "after the backoff");
    assert_eq!(pod.next(at + Duration::from_secs(2)), Some(Next::Admit));
    pod.started(Next::Admit);
    pod.rejected(true, SECOND, now());
    assert!(!pod.wants_admission());
    assert_eq!(
        pod.next(at),
        Some(Next::Release),
        "whatever it holds given back"
    );
}
