//! DRA driver faults behind the kubelet's plugin manager, DRA plugin
//! manager and DRA manager, with pods whose claims are allocated to the
//! driver.

use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::TIMEOUT;
use serde_json::{Value, json};

use super::{NODE, bound_pod, cluster, faulty_plugin, kubelet, root};

/// `faulty-plugin`'s driver name.
pub(crate) const DRIVER: &str = "faulty.example.com";
const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// The kubelet and `faulty-plugin` with `fault`, once the kubelet's plugin
/// manager registered it; returns the registration event.
pub(crate) async fn with_fault(
    api: &KubeApi,
    root: &std::path::Path,
    fault: &str,
) -> (GoProcess, ChildProcess, Value) {
    let mut kubelet = kubelet(api, root).await;
    let plugin = faulty_plugin(root, "dra", fault);
    let registered = kubelet
        .event(TIMEOUT, "registered", |e| e["type"] == "DRAPlugin")
        .await;
    (kubelet, plugin, registered)
}

/// Claim `default/NAME` allocated to device `device` of the driver.
fn allocation(device: &str, pod: &str, pod_uid: &str) -> Value {
    json!({"status": {
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device},
        ]}},
        "reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}],
    }})
}

/// Pod `name` on the node using `claims`, each allocated to a device of
/// the driver and reserved for the pod, as the scheduler would leave them.
pub(crate) async fn pod_with_claims(api: &KubeApi, name: &str, claims: &[&str]) {
    for claim in claims {
        let spec = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
        });
        api.admin("POST", CLAIMS, Some(&spec)).await;
    }
    let entries: Vec<(String, &str)> = claims
        .iter()
        .enumerate()
        .map(|(i, claim)| (format!("c{i}"), *claim))
        .collect();
    let entries: Vec<(&str, &str)> = entries.iter().map(|(e, c)| (e.as_str(), *c)).collect();
    let uid = bound_pod(api, name, json!({}), &entries).await;
    for (i, claim) in claims.iter().enumerate() {
        let status = allocation(&format!("dev-{i}"), name, &uid);
        api.admin("PATCH", &format!("{CLAIMS}/{claim}/status"), Some(&status))
            .await;
    }
    // The kubelet tries again at the pod's next update.
    let touch = json!({"metadata": {"labels": {"claims": "reserved"}}});
    api.admin("PATCH", &format!("{PODS}/{name}"), Some(&touch))
        .await;
}

/// The kubelet's failure to prepare pod `name`'s claims that says `why`
/// (the pod may be seen before its claims are reserved for it, and fail
/// for that first).
pub(crate) async fn prepare_failed(kubelet: &mut GoProcess, name: &str, why: &str) -> Value {
    let failed = kubelet
        .event(TIMEOUT, "prepare_failed", |e| {
            e["name"] == name && message(e).contains(why)
        })
        .await;
    assert_eq!(
        failed["reason"], "FailedPrepareDynamicResources",
        "{failed}"
    );
    failed
}

fn message(event: &Value) -> &str {
    event["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_notification_answer_fails_the_kubelet_takes_the_registration_back() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, registered) = with_fault(&api, root.path(), "notify-fails").await;
    assert_eq!(registered["error"], "", "{registered}");
    // NotifyRegistrationStatus(true) answered an error: the plugin manager
    // deregisters the driver from its handler.
    kubelet
        .event(TIMEOUT, "deregistered", |e| e["name"] == DRIVER)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_driver_name_not_a_dns_subdomain_is_a_warning_the_kubelet_registers_it() {
    let api = cluster().await;
    let root = root();
    let (_kubelet, _plugin, registered) = with_fault(&api, root.path(), "bad-name").await;
    assert_eq!(registered["name"], "Faulty_Driver", "{registered}");
    assert_eq!(registered["error"], "", "the kubelet registers it");
    // But no claim can be allocated to it: the API refuses the name.
    let spec = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "named"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    });
    api.admin("POST", CLAIMS, Some(&spec)).await;
    let mut status = allocation("dev-0", "p", "0b7e6e1a-0000-4000-8000-000000000009");
    status["status"]["allocation"]["devices"]["results"][0]["driver"] = "Faulty_Driver".into();
    let refused = api
        .request(
            Identity::Admin,
            "PATCH",
            &format!("{CLAIMS}/named/status"),
            Some(&status),
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unserved_service_listed_first_fails_every_prepare_fails() {
    let api = cluster().await;
    let root = root();
    // Lists v1beta1.DRAPlugin first, and serves v1 only.
    let (mut kubelet, _plugin, _) = with_fault(&api, root.path(), "unserved-chosen-service").await;
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    prepare_failed(&mut kubelet, "uses-one", "Unimplemented").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unserved_service_listed_after_the_chosen_one_is_a_warning_claims_are_prepared() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, _) = with_fault(&api, root.path(), "unserved-service").await;
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    let admitted = kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == "uses-one")
        .await;
    let cdi = &admitted["containers"][0]["dra_cdi_devices"];
    assert_eq!(cdi, &json!([format!("{DRIVER}/gpu=dev-0")]), "{admitted}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_for_a_claim_not_asked_for_fails_the_pod_is_not_started() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, _) = with_fault(&api, root.path(), "extra-claim").await;
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    prepare_failed(&mut kubelet, "uses-one", "NodePrepareResources").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unprepare_answer_leaving_a_claim_out_fails_the_kubelet_retries_and_holds_it() {
    let api = cluster().await;
    let root = root();
    // Unprepare answers the first claim of a batch only.
    let (mut kubelet, _plugin, _) = with_fault(&api, root.path(), "unprepare-leaves-out").await;
    pod_with_claims(&api, "uses-two", &["claim-a", "claim-b"]).await;
    kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == "uses-two")
        .await;
    api.admin("DELETE", &format!("{PODS}/uses-two"), None).await;
    let failed = kubelet
        .event(TIMEOUT, "unprepare_failed", |e| e["name"] == "uses-two")
        .await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("skipped 1 ResourceClaims"),
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_whole_call_error_is_a_warning_the_kubelet_fails_the_prepare_as_for_a_claims_own_error() {
    let api = cluster().await;
    // The claim named fail-* is refused: in its own entry by the driver
    // without a fault, by failing the whole call with `whole-call-error`.
    let mut outcomes = Vec::new();
    for (fault, pod) in [("", "own-entry"), ("whole-call-error", "whole-call")] {
        let root = root();
        let (mut kubelet, mut plugin, _) = with_fault(&api, root.path(), fault).await;
        let claims = [format!("claim-{pod}"), format!("fail-{pod}")];
        let claims: Vec<&str> = claims.iter().map(String::as_str).collect();
        pod_with_claims(&api, pod, &claims).await;
        let why = match fault {
            "" => "refused on purpose",
            _ => "the call failed",
        };
        let failed = prepare_failed(&mut kubelet, pod, why).await;
        outcomes.push(failed["reason"].clone());
        api.admin("DELETE", &format!("{PODS}/{pod}"), None).await;
        plugin.kill().await;
        kubelet.kill().await;
    }
    // The same outcome: the pod's prepare failed, to be retried.
    assert_eq!(outcomes[0], outcomes[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn refusing_concurrent_batches_is_a_warning_the_kubelet_prepares_again_later() {
    let api = cluster().await;
    let root = root();
    // A batch that comes while another is prepared is refused as busy.
    let (mut kubelet, _plugin, _) = with_fault(&api, root.path(), "serial-prepare").await;
    let pods = ["first", "second", "third"];
    for pod in pods {
        let claim = format!("claim-{pod}");
        pod_with_claims(&api, pod, &[claim.as_str()]).await;
    }
    // The pod workers prepare at once; a refused prepare is tried again
    // (after 10 s, or at the pod's next update), and every pod starts.
    for pod in pods {
        kubelet
            .event(3 * TIMEOUT, "admitted", |e| e["name"] == pod)
            .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn not_starting_over_a_killed_instances_socket_fails_claims_are_never_prepared() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, mut plugin, _) = with_fault(&api, root.path(), "no-unlink-on-start").await;
    // Killed, its sockets left behind; started again, it cannot bind.
    plugin.kill().await;
    let mut again = faulty_plugin(root.path(), "dra", "no-unlink-on-start");
    assert_eq!(
        again.wait(TIMEOUT).await,
        Some(1),
        "it could not start again"
    );
    // Nothing serves the driver again: the DRA manager's calls fail
    // (while the plugin manager keeps the stale registration), or find no
    // driver (when the kill came before the registration was finished).
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    kubelet
        .event(TIMEOUT, "prepare_failed", |e| {
            e["name"] == "uses-one"
                && (message(e).contains("NodePrepareResources")
                    || message(e).contains(&format!("{DRIVER} is not registered")))
        })
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unqualified_cdi_id_fails_the_kubelet_hands_it_to_the_runtime() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, _) = with_fault(&api, root.path(), "bad-cdi-id").await;
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    // The DRA manager checks none: the container's CDI devices carry it as
    // it came, for the runtime to refuse.
    let admitted = kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == "uses-one")
        .await;
    let cdi = &admitted["containers"][0]["dra_cdi_devices"];
    assert_eq!(cdi, &json!(["dev-0"]), "{admitted}");
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_to_unprepare_a_claim_never_prepared_fails_the_kubelet_retries_and_holds_it() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, _) = with_fault(&api, root.path(), "unprepare-unknown-fails").await;
    // The driver refuses fail-b, so it never prepares it; the kubelet
    // unprepares every claim of the pod when it goes.
    pod_with_claims(&api, "refused", &["claim-a", "fail-b"]).await;
    prepare_failed(&mut kubelet, "refused", "refused on purpose").await;
    api.admin("DELETE", &format!("{PODS}/refused"), None).await;
    let failed = kubelet
        .event(TIMEOUT, "unprepare_failed", |e| e["name"] == "refused")
        .await;
    assert!(
        failed["error"].as_str().unwrap().contains("is unknown"),
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forgetting_prepared_claims_across_a_restart_fails_the_kubelet_retries_and_holds_them() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, mut plugin, _) = with_fault(&api, root.path(), "lose-state-on-restart").await;
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == "uses-one")
        .await;
    // The driver restarts, and forgets what it prepared.
    super::common::signal(&plugin, "-TERM").await;
    plugin.wait(TIMEOUT).await;
    let _again = faulty_plugin(root.path(), "dra", "lose-state-on-restart");
    kubelet
        .event(TIMEOUT, "registered", |e| e["name"] == DRIVER)
        .await;
    api.admin("DELETE", &format!("{PODS}/uses-one"), None).await;
    let failed = kubelet
        .event(TIMEOUT, "unprepare_failed", |e| e["name"] == "uses-one")
        .await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("prepared by an earlier instance"),
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn other_devices_for_a_claim_prepared_again_fail_the_container_gets_a_device_not_allocated() {
    let api = cluster().await;
    let root = root();
    // The first prepare records the claim and answers an error; the
    // kubelet prepares it again, and gets another device.
    let (mut kubelet, _plugin, _) = with_fault(
        &api,
        root.path(),
        "first-prepare-fails,different-devices-again",
    )
    .await;
    pod_with_claims(&api, "uses-one", &["claim-a"]).await;
    prepare_failed(
        &mut kubelet,
        "uses-one",
        "the first prepare fails on purpose",
    )
    .await;
    let touch = json!({"metadata": {"labels": {"again": "yes"}}});
    api.admin("PATCH", &format!("{PODS}/uses-one"), Some(&touch))
        .await;
    let admitted = kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == "uses-one")
        .await;
    // The claim is allocated dev-0; the kubelet hands the container what
    // the second answer said.
    let cdi = &admitted["containers"][0]["dra_cdi_devices"];
    assert_eq!(
        cdi,
        &json!([format!("{DRIVER}/gpu=dev-other-2")]),
        "{admitted}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_to_unprepare_a_claim_again_fails_the_kubelet_retries_and_holds_it() {
    let api = cluster().await;
    let root = root();
    // The first unprepare answers one claim of two; the kubelet unprepares
    // both again, and the one already unprepared fails.
    let (mut kubelet, _plugin, _) = with_fault(
        &api,
        root.path(),
        "unprepare-leaves-out,unprepare-twice-fails",
    )
    .await;
    pod_with_claims(&api, "uses-two", &["claim-a", "claim-b"]).await;
    kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == "uses-two")
        .await;
    api.admin("DELETE", &format!("{PODS}/uses-two"), None).await;
    let error = |e: &Value| e["error"].as_str().unwrap_or_default().to_string();
    let first = kubelet
        .event(TIMEOUT, "unprepare_failed", |e| e["name"] == "uses-two")
        .await;
    assert!(
        error(&first).contains("skipped 1 ResourceClaims"),
        "{first}"
    );
    // The retry's batch is in no fixed order, and the driver answers its
    // first claim only: within a few retries the claim it already
    // unprepared is asked for again, and fails.
    kubelet
        .event(3 * TIMEOUT, "unprepare_failed", |e| {
            e["name"] == "uses-two" && error(e).contains("is not prepared")
        })
        .await;
}
