#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use serde_json::json;

use std::collections::BTreeMap;

use super::*;
use crate::runtime::{PodIdentity, SandboxStatus};

fn at(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
}

fn pod(policy: &str, init: &[(&str, bool)], app: &[&str]) -> Pod {
    let init: Vec<_> = init
        .iter()
        .map(|(name, sidecar)| {
            let mut c = json!({"name": name, "image": "i"});
            if *sidecar {
                c["restartPolicy"] = json!("Always");
            }
            c
        })
        .collect();
    let app: Vec<_> = app
        .iter()
        .map(|n| json!({"name": n, "image": "i"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"restartPolicy": policy, "initContainers": init, "containers": app},
    }))
    .unwrap()
}

fn sandbox(attempt: u32, ready: bool) -> SandboxStatus {
    SandboxStatus {
        id: format!("s{attempt}"),
        pod: PodIdentity::default(),
        attempt,
        ready,
        created_at: at(0),
    }
}

fn container(
    name: &str,
    attempt: u32,
    state: ContainerState,
    exit: Option<i32>,
) -> ContainerStatus {
    ContainerStatus {
        id: format!("{name}-{attempt}"),
        sandbox_id: "s0".into(),
        pod: PodIdentity::default(),
        name: name.into(),
        attempt,
        state,
        image_ref: "i".into(),
        image: String::new(),
        created_at: at(1),
        started_at: Some(at(1)),
        finished_at: exit.map(|_| at(2)),
        exit_code: exit,
        reason: String::new(),
        message: String::new(),
        user: None,
        log_path: String::new(),
        hash: None,
    }
}

fn observed(containers: Vec<ContainerStatus>) -> Observed {
    Observed {
        sandbox: Some(sandbox(0, true)),
        containers: containers
            .into_iter()
            .map(|c| (c.name.clone(), (c, None)))
            .collect(),
        next_attempts: BTreeMap::new(),
        ended_before: BTreeMap::new(),
    }
}

/// The back-off key of `pod`'s container `name`.
fn key(pod: &Pod, name: &str) -> String {
    let (spec, _) = containers(pod)
        .into_iter()
        .find(|(c, _)| c.name == name)
        .unwrap();
    backoff_key(spec)
}

fn names(plan: &SyncPlan) -> Vec<&str> {
    plan.start.iter().map(|s| s.name.as_str()).collect()
}

fn waiting(plan: &SyncPlan, name: &str) -> Option<String> {
    let view = plan.containers.iter().find(|c| c.name == name).unwrap();
    view.waiting.as_ref().map(|(reason, _)| reason.clone())
}

fn decide(pod: &Pod, observed: &Observed) -> SyncPlan {
    plan(
        pod,
        observed,
        &ProbeVerdicts::new(),
        &CrashBackoff::default(),
        &StartErrors::new(),
        &Replaced::new(),
        at(3),
    )
}

fn plan_with(pod: &Pod, observed: &Observed, backoff: &CrashBackoff) -> SyncPlan {
    plan(
        pod,
        observed,
        &ProbeVerdicts::new(),
        backoff,
        &StartErrors::new(),
        &Replaced::new(),
        at(3),
    )
}

#[test]
fn a_pod_without_a_ready_sandbox_gets_one_first_and_a_gone_one_is_replaced() {
    let pod = pod("Always", &[], &["main"]);
    let plan = decide(&pod, &Observed::default());
    assert_eq!(plan.sandbox, Some(0));
    assert!(plan.start.is_empty());
    assert_eq!(plan.phase, ApiPhase::Pending);
    assert_eq!(waiting(&plan, "main").as_deref(), Some(CONTAINER_CREATING));

    let stopped = Observed {
        sandbox: Some(sandbox(0, false)),
        ..Observed::default()
    };
    assert_eq!(decide(&pod, &stopped).sandbox, Some(1));
}

#[test]
fn a_never_pod_whose_sandbox_stopped_gets_no_new_one_and_ends_as_its_containers_did() {
    let mut stopped = observed(vec![container(
        "main",
        0,
        ContainerState::Exited,
        Some(137),
    )]);
    stopped.sandbox = Some(sandbox(0, false));
    let never = pod("Never", &[], &["main"]);
    let plan = decide(&never, &stopped);
    assert_eq!(plan.sandbox, None, "no new sandbox");
    assert!(plan.start.is_empty());
    assert_eq!(plan.phase, ApiPhase::Failed);

    // Restarted otherwise, in a new sandbox.
    let always = pod("Always", &[], &["main"]);
    assert_eq!(decide(&always, &stopped).sandbox, Some(1));
    // And a pod whose sandbox never got a container tries again.
    let empty = Observed {
        sandbox: Some(sandbox(0, false)),
        ..Observed::default()
    };
    assert_eq!(decide(&never, &empty).sandbox, Some(1));
}

#[test]
fn init_containers_run_one_after_another_then_sidecars_and_app_containers_start() {
    let pod = pod("Always", &[("setup", false), ("proxy", true)], &["a", "b"]);
    let plan = decide(&pod, &observed(vec![]));
    assert_eq!(names(&plan), ["setup"]);
    assert!(!plan.initialized);
    assert_eq!(plan.phase, ApiPhase::Pending);
    assert_eq!(waiting(&plan, "a").as_deref(), Some(POD_INITIALIZING));
    assert_eq!(waiting(&plan, "proxy").as_deref(), Some(POD_INITIALIZING));

    let setup_runs = observed(vec![container("setup", 0, ContainerState::Running, None)]);
    assert!(decide(&pod, &setup_runs).start.is_empty());

    let setup_done = observed(vec![container("setup", 0, ContainerState::Exited, Some(0))]);
    assert_eq!(names(&decide(&pod, &setup_done)), ["proxy"]);

    let proxy_runs = observed(vec![
        container("setup", 0, ContainerState::Exited, Some(0)),
        container("proxy", 0, ContainerState::Running, None),
    ]);
    let plan = decide(&pod, &proxy_runs);
    assert!(plan.initialized);
    assert_eq!(names(&plan), ["a", "b"]);

    let all_run = observed(vec![
        container("setup", 0, ContainerState::Exited, Some(0)),
        container("proxy", 0, ContainerState::Running, None),
        container("a", 0, ContainerState::Running, None),
        container("b", 0, ContainerState::Running, None),
    ]);
    let plan = decide(&pod, &all_run);
    assert!(plan.start.is_empty());
    assert_eq!(plan.phase, ApiPhase::Running);
}

#[test]
fn a_sidecar_that_stops_after_the_pod_initialized_restarts_while_the_app_containers_go_on() {
    let pod = pod("Always", &[("setup", false), ("proxy", true)], &["a", "b"]);
    // The proxy crashed; `a` exited and is restarted meanwhile; the
    // setup container was removed by the runtime.
    let crashed = observed(vec![
        container("proxy", 0, ContainerState::Exited, Some(1)),
        container("a", 0, ContainerState::Exited, Some(2)),
        container("b", 0, ContainerState::Running, None),
    ]);
    let plan = decide(&pod, &crashed);
    assert!(plan.initialized, "initialized once an app container ran");
    assert_eq!(plan.phase, ApiPhase::Running);
    assert_eq!(names(&plan), ["proxy", "a"], "setup is not run again");
    let b = plan.containers.iter().find(|c| c.name == "b").unwrap();
    assert!(b.running(), "b is shown as it runs: {b:?}");

    // In its back-off the proxy holds nothing back either.
    let mut backoff = CrashBackoff::default();
    backoff.restarted(&key(&pod, "proxy"), at(0), at(1));
    let crashed_again = observed(vec![
        container("setup", 0, ContainerState::Exited, Some(0)),
        container("proxy", 1, ContainerState::Exited, Some(1)),
        container("a", 0, ContainerState::Running, None),
        container("b", 0, ContainerState::Running, None),
    ]);
    let plan = plan_with(&pod, &crashed_again, &backoff);
    assert_eq!(
        waiting(&plan, "proxy").as_deref(),
        Some(CRASH_LOOP_BACK_OFF)
    );
    assert!(plan.initialized);
    assert_eq!(plan.phase, ApiPhase::Running);
    assert!(plan.start.is_empty());
    let a = plan.containers.iter().find(|c| c.name == "a").unwrap();
    assert_eq!(a.current.as_ref().map(|c| c.id.as_str()), Some("a-0"));
}

#[test]
fn a_failed_init_container_fails_a_never_pod_and_is_restarted_otherwise() {
    let failed = observed(vec![container("setup", 0, ContainerState::Exited, Some(1))]);
    let never = pod("Never", &[("setup", false)], &["main"]);
    let plan = decide(&never, &failed);
    assert_eq!(plan.phase, ApiPhase::Failed);
    assert!(plan.start.is_empty());

    let always = pod("Always", &[("setup", false)], &["main"]);
    let plan = decide(&always, &failed);
    assert_eq!(plan.phase, ApiPhase::Pending);
    assert_eq!(
        plan.start,
        [Start {
            name: "setup".into(),
            attempt: 1,
            restart: Some(at(2))
        }]
    );
}

#[test]
fn the_restart_policy_decides_restarts_and_the_phase() {
    let ok = observed(vec![container("main", 0, ContainerState::Exited, Some(0))]);
    let failed = observed(vec![container("main", 0, ContainerState::Exited, Some(2))]);

    let plan = decide(&pod("Never", &[], &["main"]), &ok);
    assert_eq!((plan.phase, plan.start.len()), (ApiPhase::Succeeded, 0));
    let plan = decide(&pod("Never", &[], &["main"]), &failed);
    assert_eq!((plan.phase, plan.start.len()), (ApiPhase::Failed, 0));
    let plan = decide(&pod("OnFailure", &[], &["main"]), &ok);
    assert_eq!((plan.phase, plan.start.len()), (ApiPhase::Succeeded, 0));
    let plan = decide(&pod("OnFailure", &[], &["main"]), &failed);
    assert_eq!(plan.phase, ApiPhase::Running);
    assert_eq!(names(&plan), ["main"]);
    let plan = decide(&pod("Always", &[], &["main"]), &ok);
    assert_eq!(plan.phase, ApiPhase::Running);
    assert_eq!(plan.start[0].attempt, 1);
}

#[test]
fn a_restart_within_its_back_off_waits_with_the_kubelets_words() {
    let pod = pod("Always", &[], &["main"]);
    let mut backoff = CrashBackoff::default();
    backoff.restarted(&key(&pod, "main"), at(0), at(1));
    let crashed = observed(vec![container("main", 1, ContainerState::Exited, Some(1))]);
    let plan = plan(
        &pod,
        &crashed,
        &ProbeVerdicts::new(),
        &backoff,
        &StartErrors::new(),
        &Replaced::new(),
        at(3),
    );
    assert!(plan.start.is_empty());
    // Ten seconds from its exit, not from its restart.
    assert_eq!(plan.wake_at, Some(at(12)));
    let view = &plan.containers[0];
    let (reason, message) = view.waiting.clone().unwrap();
    assert_eq!(reason, CRASH_LOOP_BACK_OFF);
    assert_eq!(
        message,
        "back-off 10s restarting failed container=main pod=p_ns(u)"
    );
    assert_eq!(view.restart_count(), 1);
    assert_eq!(
        plan.phase,
        ApiPhase::Running,
        "restarting counts as running"
    );
    assert_eq!(go_duration(Duration::from_secs(160)), "2m40s");
    assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
}

#[test]
fn a_start_that_failed_shows_its_reason_until_it_succeeds() {
    let pod = pod("Always", &[], &["main"]);
    let mut errors = StartErrors::new();
    errors.insert("main".into(), ("ErrImagePull".into(), "not found".into()));
    let plan = plan(
        &pod,
        &observed(vec![]),
        &ProbeVerdicts::new(),
        &CrashBackoff::default(),
        &errors,
        &Replaced::new(),
        at(3),
    );
    assert_eq!(names(&plan), ["main"]);
    assert_eq!(waiting(&plan, "main").as_deref(), Some("ErrImagePull"));
    assert_eq!(plan.phase, ApiPhase::Pending);
}

#[test]
fn a_pod_stopped_for_good_shows_its_containers_stopped_and_ends() {
    let pod = pod("Always", &[], &["a", "b"]);
    // Killed: its sandbox stopped, one container exited 137, one 0.
    let mut seen = observed(vec![
        container("a", 0, ContainerState::Exited, Some(137)),
        container("b", 0, ContainerState::Exited, Some(0)),
    ]);
    seen.sandbox = Some(sandbox(0, false));
    let plan = terminal_plan(&pod, &seen, at(10));
    assert_eq!(plan.phase, ApiPhase::Failed);
    assert!(plan.start.is_empty(), "nothing restarts");
    assert_eq!(plan.sandbox, None, "no new sandbox");
    assert!(
        plan.containers
            .iter()
            .all(|c| c.waiting.is_none() && c.current.is_some()),
        "each container shows how it ended: {:?}",
        plan.containers
    );
    // Every app container exited 0: it succeeded.
    let seen = observed(vec![
        container("a", 0, ContainerState::Exited, Some(0)),
        container("b", 0, ContainerState::Exited, Some(0)),
    ]);
    assert_eq!(
        terminal_plan(&pod, &seen, at(10)).phase,
        ApiPhase::Succeeded
    );
    // A pod never started failed.
    let mut empty = observed(vec![]);
    empty.sandbox = None;
    assert_eq!(terminal_plan(&pod, &empty, at(10)).phase, ApiPhase::Failed);
}

/// The hash of container `name` made from `image`.
fn hash_of(name: &str, image: &str) -> Option<u64> {
    let spec: Container = serde_json::from_value(json!({"name": name, "image": image})).unwrap();
    Some(u64::from(container_hash(&spec)))
}

#[test]
fn a_running_container_whose_image_changed_is_killed_and_made_again_whatever_the_policy() {
    let pod = pod("Never", &[("setup", false), ("proxy", true)], &["main"]);
    let made = |name: &str, image: &str, state, exit| {
        let mut c = container(name, 0, state, exit);
        c.hash = hash_of(name, image);
        c
    };
    // Each made from image "i", as the pod says: nothing to do.
    let same = observed(vec![
        made("setup", "i", ContainerState::Exited, Some(0)),
        made("proxy", "i", ContainerState::Running, None),
        made("main", "i", ContainerState::Running, None),
    ]);
    let decided = decide(&pod, &same);
    assert!(
        decided.kill.is_empty() && decided.start.is_empty(),
        "{decided:?}"
    );

    // The pod's images were "old" when its sidecar and app were made.
    let changed = observed(vec![
        made("setup", "old", ContainerState::Exited, Some(0)),
        made("proxy", "old", ContainerState::Running, None),
        made("main", "old", ContainerState::Running, None),
    ]);
    let decided = decide(&pod, &changed);
    let kills: Vec<_> = decided
        .kill
        .iter()
        .map(|k| (k.name.as_str(), k.cause, k.restart))
        .collect();
    assert_eq!(
        kills,
        [
            ("proxy", KillCause::DefinitionChanged, true),
            ("main", KillCause::DefinitionChanged, true),
        ],
        "the ended init container is left alone; a Never pod's app is made again"
    );
    assert_eq!(decided.phase, ApiPhase::Running);

    // Killed: made again once, though the pod never restarts, and it
    // stays Running meanwhile.
    let killed = observed(vec![
        made("setup", "old", ContainerState::Exited, Some(0)),
        made("proxy", "old", ContainerState::Exited, Some(137)),
        made("main", "old", ContainerState::Exited, Some(137)),
    ]);
    let replaced: Replaced = ["proxy-0".to_string(), "main-0".to_string()].into();
    let decided = plan(
        &pod,
        &killed,
        &ProbeVerdicts::new(),
        &CrashBackoff::default(),
        &StartErrors::new(),
        &replaced,
        at(3),
    );
    assert_eq!(names(&decided), ["proxy", "main"]);
    assert_eq!(decided.start[1].attempt, 1, "it counts a restart");
    assert_eq!(decided.phase, ApiPhase::Running);
    // Once tried, the Never pod ends as its app did.
    let decided = decide(&pod, &killed);
    assert_eq!(names(&decided), Vec::<&str>::new());
    assert_eq!(decided.phase, ApiPhase::Failed);
}

#[test]
fn a_container_made_for_a_new_image_does_not_serve_the_old_ones_back_off() {
    let pod = pod("Always", &[], &["main"]);
    let old: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [{"name": "main", "image": "old"}]},
    }))
    .unwrap();
    let mut backoff = CrashBackoff::default();
    backoff.restarted(&key(&old, "main"), at(0), at(1));
    let crashed = observed(vec![container("main", 1, ContainerState::Exited, Some(1))]);
    assert_eq!(
        waiting(&plan_with(&old, &crashed, &backoff), "main").as_deref(),
        Some(CRASH_LOOP_BACK_OFF)
    );
    let plan = plan_with(&pod, &crashed, &backoff);
    assert_eq!(names(&plan), ["main"], "restarted at once");
}

#[test]
fn an_on_failure_pods_new_sandbox_does_not_run_again_what_succeeded() {
    let on_failure = pod("OnFailure", &[("setup", false)], &["a", "b"]);
    // Sandbox 0 stopped after `a` succeeded and while `b` ran.
    let mut seen = observed(vec![]);
    seen.sandbox = Some(sandbox(1, true));
    seen.ended_before.insert(
        "a".into(),
        container("a", 0, ContainerState::Exited, Some(0)),
    );
    seen.ended_before.insert(
        "b".into(),
        container("b", 0, ContainerState::Exited, Some(137)),
    );
    // The init container runs again first; then only `b`.
    let plan = decide(&on_failure, &seen);
    assert_eq!(names(&plan), ["setup"]);
    seen.containers.insert(
        "setup".into(),
        (container("setup", 0, ContainerState::Exited, Some(0)), None),
    );
    let plan = decide(&on_failure, &seen);
    assert_eq!(names(&plan), ["b"], "`a` succeeded: not run again");
    let a = plan.containers.iter().find(|c| c.name == "a").unwrap();
    assert_eq!(a.current.as_ref().and_then(|c| c.exit_code), Some(0));
    // Always: both run again.
    let always = pod("Always", &[], &["a", "b"]);
    assert_eq!(names(&decide(&always, &seen)), ["a", "b"]);

    // Every app container succeeded and the sandbox stopped: no new one,
    // the pod succeeded.
    let mut done = observed(vec![container("b", 1, ContainerState::Exited, Some(0))]);
    done.sandbox = Some(sandbox(1, false));
    done.ended_before.insert(
        "a".into(),
        container("a", 0, ContainerState::Exited, Some(0)),
    );
    let plan = decide(&on_failure, &done);
    assert_eq!(plan.sandbox, None);
    assert_eq!(plan.phase, ApiPhase::Succeeded);
    assert!(plan.start.is_empty());
}

#[test]
fn a_containers_own_restart_policy_and_rules_decide_its_restarts_and_the_phase() {
    let with = |own: serde_json::Value| -> Pod {
        let mut app = json!({"name": "main", "image": "i"});
        for (k, v) in own.as_object().unwrap() {
            app[k] = v.clone();
        }
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"restartPolicy": "Always", "containers": [app]},
        }))
        .unwrap()
    };
    let exited = |code| {
        observed(vec![container(
            "main",
            0,
            ContainerState::Exited,
            Some(code),
        )])
    };
    // Its own Never wins over the pod's Always: it ends, and so does the pod.
    let never = with(json!({"restartPolicy": "Never"}));
    let plan = decide(&never, &exited(1));
    assert_eq!((plan.phase, plan.start.len()), (ApiPhase::Failed, 0));
    let plan = decide(&never, &exited(0));
    assert_eq!(plan.phase, ApiPhase::Succeeded);
    // A rule restarts it on the codes it names.
    let ruled = with(json!({
        "restartPolicy": "Never",
        "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}],
    }));
    let plan = decide(&ruled, &exited(42));
    assert_eq!(names(&plan), ["main"]);
    assert_eq!(
        plan.phase,
        ApiPhase::Running,
        "restarting counts as running"
    );
    let plan = decide(&ruled, &exited(3));
    assert_eq!((plan.phase, plan.start.len()), (ApiPhase::Failed, 0));
}
