//! Back-offs against the oracle: the real kubelet v1.37.2 and our agent,
//! each on its own containerd, registered as two nodes of one API server,
//! run the same pods:
//!
//! - `absent`: an image no registry has, `IfNotPresent`. The container
//!   waits with `ErrImagePull` and the runtime's error, then, inside the
//!   pull back-off, `ImagePullBackOff` ("Back-off pulling image ...:
//!   ErrImagePull: ..."); Events `Pulling`, `Failed` ("Failed to pull
//!   image ...", "Error: ErrImagePull", "Error: ImagePullBackOff") and
//!   `BackOff`;
//! - `present`: an image the node has: a `Pulled` Event ("already present
//!   on machine"), then `Created` and `Started`;
//! - `crashing`: runs 3 s, exits 1, restarted always. Its second restart
//!   waits its back-off (10 s) from its exit, not from its last restart;
//!   a Warning `BackOff` Event ("Back-off restarting failed container app
//!   in pod ...").
//!
//! Compared on both nodes: the back-off's waiting message, the Events,
//! and whether the second restart came 10 s (to 16 s) after the exit
//! before it.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::two_nodes::{LONG, TwoNodes, container, normalized, one_container_pod};
use serde_json::{Value, json};

const ABSENT: &str = "registry.nodeplugins.invalid/absent:1";

fn pods(node: &str) -> Vec<Value> {
    vec![
        {
            let mut pod = one_container_pod(node, "absent", "exec sleep 3600", json!({}));
            pod["spec"]["containers"][0]["image"] = json!(ABSENT);
            pod
        },
        one_container_pod(node, "present", "exec sleep 3600", json!({})),
        one_container_pod(node, "crashing", "sleep 3; exit 1", json!({})),
    ]
}

/// Seconds between two RFC 3339 times of a status.
fn seconds_between(from: &Value, to: &Value) -> i64 {
    let parse = |v: &Value| {
        let text = v.as_str().unwrap();
        chrono_free_seconds(text)
    };
    parse(to) - parse(from)
}

/// Seconds since the epoch of an RFC 3339 time in UTC, whole seconds
/// (`2026-12-07T12:00:00Z`).
fn chrono_free_seconds(text: &str) -> i64 {
    let (date, time) = text.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|p| p.parse().unwrap()).collect();
    let t: Vec<i64> = time.split(':').map(|p| p.parse().unwrap()).collect();
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]
}

#[tokio::test(flavor = "multi_thread")]
async fn image_pull_and_crash_loop_back_offs_on_our_agent_are_the_real_kubelets() {
    let two = TwoNodes::start().await;
    let mut differences = Vec::new();
    for (ns, node) in two.nodes {
        for pod in pods(node) {
            two.create(ns, &pod).await;
        }
    }
    // The waiting reasons and messages each node shows, until both showed
    // the back-off.
    let mut seen: [BTreeSet<(String, String)>; 2] = Default::default();
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        for (i, (ns, _)) in two.nodes.iter().enumerate() {
            let path = format!("/api/v1/namespaces/{ns}/pods/absent");
            let pod = two.api.admin("GET", &path, None).await;
            let waiting = &container(&pod)["state"]["waiting"];
            if let Some(reason) = waiting["reason"].as_str() {
                let message = waiting["message"].as_str().unwrap_or_default();
                seen[i].insert((reason.to_string(), message.to_string()));
            }
        }
        let backed_off = |s: &BTreeSet<(String, String)>| {
            s.iter().any(|(reason, _)| reason == "ImagePullBackOff")
        };
        if seen.iter().all(backed_off) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ImagePullBackOff on both nodes: {seen:#?}"
        );
        // Polled: the reasons come and go with nothing to wait on.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // `ErrImagePull` lasts on both only until the next sync (the
    // sandbox's start, a runtime event), so a poll may miss it: its
    // message is compared within the back-off's and in the Events.
    for s in &mut seen {
        s.retain(|(reason, _)| reason == "ImagePullBackOff");
    }
    TwoNodes::compare(&mut differences, "the absent image's waiting", seen);
    let events = two
        .events("absent", &["Pulling", "Failed", "BackOff", "Pulled"])
        .await;
    TwoNodes::compare(&mut differences, "the absent image's Events", events);
    let events = two
        .events("present", &["Pulled", "Created", "Started"])
        .await;
    TwoNodes::compare(&mut differences, "the present image's Events", events);

    // Each node's container as it runs after its second restart (3 s
    // each time), both watched at once.
    let mut second: [Option<Value>; 2] = [None, None];
    let deadline = tokio::time::Instant::now() + LONG;
    while second.iter().any(Option::is_none) {
        for (i, (ns, _)) in two.nodes.iter().enumerate() {
            let path = format!("/api/v1/namespaces/{ns}/pods/crashing");
            let pod = two.api.admin("GET", &path, None).await;
            let c = container(&pod);
            if second[i].is_none() && c["restartCount"] == 2 && c["state"]["running"].is_object() {
                second[i] = Some(pod.clone());
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not seen running after its second restart on both nodes"
        );
        // Polled: nothing to wait on, and the state lasts 3 s.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut restarts = Vec::new();
    let mut uids = Vec::new();
    for pod in second.into_iter().flatten() {
        let c = container(&pod);
        let gap = seconds_between(
            &c["lastState"]["terminated"]["finishedAt"],
            &c["state"]["running"]["startedAt"],
        );
        restarts.push(json!({
            "lastState": c["lastState"]["terminated"]["reason"],
            // 10 s from the exit (the next sync can come some seconds
            // late), not 10 s from the restart before (7 s after the exit).
            "waited its back-off from the exit": (10..=16).contains(&gap),
        }));
        eprintln!("the second restart came {gap} s after the exit");
        uids.push(pod["metadata"]["uid"].as_str().unwrap().to_string());
    }
    let restarts: [Value; 2] = restarts.try_into().unwrap();
    TwoNodes::compare(&mut differences, "the second restart", restarts);
    let events = two.events("crashing", &["BackOff"]).await;
    let mut backoffs = Vec::new();
    for (i, (ns, _)) in two.nodes.iter().enumerate() {
        let events: BTreeSet<[String; 4]> = events[i]
            .iter()
            .map(|[kind, reason, message, field]| {
                [
                    kind.clone(),
                    reason.clone(),
                    normalized(message, ns, &uids[i]),
                    field.clone(),
                ]
            })
            .collect();
        backoffs.push(events);
    }
    let backoffs: [BTreeSet<[String; 4]>; 2] = backoffs.try_into().unwrap();
    TwoNodes::compare(&mut differences, "the crash-loop Events", backoffs);
    two.assert_alike(&differences);
}
