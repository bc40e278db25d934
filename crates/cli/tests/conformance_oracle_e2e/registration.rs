//! Registration faults of a DRA driver behind the kubelet's plugin manager
//! and DRA plugin manager: what becomes of the pods that use its claims.

use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::Value;
use tokio::process::Command;

use super::common::signal;
use super::dra::{DRIVER, pod_with_claims, with_fault};
use super::{cluster, faulty_plugin, kubelet, root};

fn message(event: &Value) -> &str {
    event["message"].as_str().unwrap_or_default()
}

/// Pod `name`'s prepare failed because the kubelet knows no such driver.
async fn driver_unknown(kubelet: &mut GoProcess, name: &str) {
    let unknown = format!("DRA driver {DRIVER} is not registered");
    kubelet
        .event(TIMEOUT, "prepare_failed", |e| {
            e["name"] == name && message(e).contains(&unknown)
        })
        .await;
}

/// The kubelet and `faulty-plugin dra` with `fault`, which the kubelet
/// never registers, once its registration socket is there; then a pod
/// using a claim of the driver, whose prepare fails for want of it.
async fn never_registered(fault: &str, mut before_the_pod: impl AsyncFnMut(&mut GoProcess)) {
    let api = cluster().await;
    let root = root();
    let mut kubelet = kubelet(&api, root.path()).await;
    let _plugin = faulty_plugin(root.path(), "dra", fault);
    let socket = root
        .path()
        .join(format!("plugins_registry/{DRIVER}-reg.sock"));
    eventually("the registration socket", TIMEOUT, || async {
        socket.exists().then_some(())
    })
    .await;
    before_the_pod(&mut kubelet).await;
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    driver_unknown(&mut kubelet, "uses-one").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_get_info_slower_than_a_second_fails_the_driver_is_never_registered() {
    never_registered("slow-get-info", async |_| {}).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_type_fails_the_driver_is_never_registered() {
    never_registered("bad-type", async |_| {}).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_version_fails_the_kubelet_refuses_the_driver() {
    never_registered("bad-version", async |kubelet| {
        let refused = kubelet
            .event(TIMEOUT, "validation_failed", |e| e["name"] == DRIVER)
            .await;
        assert!(!refused["error"].as_str().unwrap().is_empty(), "{refused}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relative_endpoint_fails_the_kubelet_cannot_reach_the_driver() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, registered) =
        with_fault(&api, root.path(), "relative-endpoint").await;
    assert_eq!(registered["endpoint"], "plugins/faulty/dra.sock");
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    kubelet
        .event(TIMEOUT, "prepare_failed", |e| {
            e["name"] == "uses-one" && message(e).contains("NodePrepareResources")
        })
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registration_socket_left_behind_fails_the_kubelet_calls_a_driver_that_is_gone() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, mut plugin, _) = with_fault(&api, root.path(), "stale-socket").await;
    signal(&plugin, "-TERM").await;
    plugin.wait(TIMEOUT).await;
    // The socket stays, so the plugin manager keeps the driver registered:
    // the DRA manager calls it, and nothing answers.
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    kubelet
        .event(TIMEOUT, "prepare_failed", |e| {
            e["name"] == "uses-one" && message(e).contains("NodePrepareResources")
        })
        .await;
    assert!(
        kubelet.seen("deregistered").is_empty(),
        "never deregistered"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_registration_socket_after_a_restart_fails_the_driver_is_gone_for_the_kubelet() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, mut plugin, _) = with_fault(&api, root.path(), "no-socket-on-restart").await;
    signal(&plugin, "-TERM").await;
    plugin.wait(TIMEOUT).await;
    kubelet
        .event(TIMEOUT, "deregistered", |e| e["name"] == DRIVER)
        .await;
    // Started again, it never makes its registration socket.
    let _again = faulty_plugin(root.path(), "dra", "no-socket-on-restart");
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    driver_unknown(&mut kubelet, "uses-one").await;
}

/// `faulty-plugin dra` instance `instance` with `fault`.
fn instance(root: &std::path::Path, fault: &str, instance: &str) -> ChildProcess {
    let mut command = Command::new(binary("nodeplugins-test-support", "faulty-plugin"));
    command
        .arg("dra")
        .arg("--registry-dir")
        .arg(root.join("plugins_registry"))
        .arg("--plugin-dir")
        .arg(root.join("plugins/faulty"))
        .args(["--instance", instance, "--fault", fault]);
    ChildProcess::spawn("faulty-plugin", command)
}

#[tokio::test(flavor = "multi_thread")]
async fn no_second_instance_beside_the_first_is_a_warning_the_first_keeps_serving() {
    let api = cluster().await;
    let root = root();
    let mut kubelet = kubelet(&api, root.path()).await;
    // Its socket names ignore the instance: a second cannot start beside
    // the first (a DaemonSet surge update stalls; one that stops the old
    // pod first works).
    let _first = instance(root.path(), "ignores-instance", "a");
    kubelet
        .event(TIMEOUT, "registered", |e| e["name"] == DRIVER)
        .await;
    let mut second = instance(root.path(), "ignores-instance", "b");
    assert_eq!(
        second.wait(TIMEOUT).await,
        Some(1),
        "the second cannot start"
    );
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == "uses-one")
        .await;
}
