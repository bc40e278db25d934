//! Device plugin faults behind the kubelet's device manager.

use serde_json::{Value, json};

use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::{TIMEOUT, eventually};

use super::{bound_pod, cluster, faulty_plugin, kubelet, root};

/// `faulty-plugin`'s resource and device count.
const RESOURCE: &str = "example.com/faulty";
const DEVICES: &str = "4";

/// The kubelet and `faulty-plugin` with `fault`, once the node's status
/// shows the resource as `shown` says.
async fn with_fault(
    api: &nodeplugins_test_support::kube_api::KubeApi,
    root: &std::path::Path,
    fault: &str,
    shown: impl Fn(&Value, &Value) -> bool,
) -> (GoProcess, ChildProcess, Value) {
    let mut kubelet = kubelet(api, root).await;
    let plugin = faulty_plugin(root, "device", fault);
    let status = kubelet
        .event(TIMEOUT, "node_status", |e| {
            shown(&e["capacity"][RESOURCE], &e["allocatable"][RESOURCE])
        })
        .await;
    (kubelet, plugin, status)
}

/// All four devices allocatable.
fn all_allocatable(_: &Value, allocatable: &Value) -> bool {
    allocatable == DEVICES
}

/// The kubelet admitted pod `name` with `count` devices of the plugin.
async fn admitted_with(kubelet: &mut GoProcess, name: &str, count: usize) -> Value {
    let admitted = kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == name)
        .await;
    let devices = &admitted["containers"][0]["devices"][RESOURCE];
    assert_eq!(devices.as_array().map(Vec::len), Some(count), "{admitted}");
    admitted
}

fn devices(count: usize) -> Value {
    json!({RESOURCE: count.to_string()})
}

#[tokio::test(flavor = "multi_thread")]
async fn options_unlike_registers_are_a_warning_the_kubelet_admits_pods_with_them() {
    let api = cluster().await;
    let root = root();
    // Register says no PreStartContainer; GetDevicePluginOptions says one.
    let (mut kubelet, _plugin, _) =
        with_fault(&api, root.path(), "options-disagree", all_allocatable).await;
    bound_pod(&api, "uses-one", devices(1), &[]).await;
    // The kubelet reads the options from GetDevicePluginOptions alone.
    admitted_with(&mut kubelet, "uses-one", 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn accepting_unknown_ids_is_a_warning_the_kubelet_never_sends_one() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, _) =
        with_fault(&api, root.path(), "allocate-any-id", all_allocatable).await;
    bound_pod(&api, "uses-one", devices(1), &[]).await;
    admitted_with(&mut kubelet, "uses-one", 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_concurrent_allocates_is_a_warning_the_kubelet_admits_one_pod_at_a_time() {
    let api = cluster().await;
    let root = root();
    // Allocate answers "busy" while another Allocate runs.
    let (mut kubelet, _plugin, _) =
        with_fault(&api, root.path(), "allocate-one-at-a-time", all_allocatable).await;
    let names = ["first", "second", "third", "fourth"];
    for name in names {
        bound_pod(&api, name, devices(1), &[]).await;
    }
    // Bound at once, admitted one after the other: every Allocate answered.
    for name in names {
        admitted_with(&mut kubelet, name, 1).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poor_preferred_allocation_is_a_warning_the_kubelet_fills_it_up() {
    let api = cluster().await;
    let root = root();
    // GetPreferredAllocation answers one id when asked for two.
    let (mut kubelet, _plugin, _) =
        with_fault(&api, root.path(), "preferred-wrong-size", all_allocatable).await;
    bound_pod(&api, "uses-two", devices(2), &[]).await;
    admitted_with(&mut kubelet, "uses-two", 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_numa_nodes_are_a_warning_the_kubelet_admits_pods_under_its_default_policy() {
    let api = cluster().await;
    let root = root();
    // Every device on NUMA node -1.
    let (mut kubelet, _plugin, _) =
        with_fault(&api, root.path(), "bad-topology", all_allocatable).await;
    bound_pod(&api, "uses-one", devices(1), &[]).await;
    admitted_with(&mut kubelet, "uses-one", 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repeated_id_fails_the_kubelet_shows_fewer_devices_than_listed() {
    let api = cluster().await;
    let root = root();
    // Four entries, two of them dev-0.
    let (_kubelet, _plugin, status) = with_fault(&api, root.path(), "duplicate-ids", |c, a| {
        !c.is_null() && !a.is_null()
    })
    .await;
    assert_eq!(status["capacity"][RESOURCE], "3", "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn another_health_word_fails_the_kubelet_never_allocates_those_devices() {
    let api = cluster().await;
    let root = root();
    // Every device listed with health "Fine".
    let (_kubelet, _plugin, status) = with_fault(&api, root.path(), "bad-health", |c, a| {
        !c.is_null() && !a.is_null()
    })
    .await;
    assert_eq!(status["capacity"][RESOURCE], DEVICES, "{status}");
    assert_eq!(status["allocatable"][RESOURCE], "0", "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_device_list_stream_that_ends_fails_the_kubelet_marks_every_device_unhealthy() {
    let api = cluster().await;
    let root = root();
    // ListAndWatch sends the four devices and ends.
    let (_kubelet, _plugin, status) = with_fault(&api, root.path(), "list-once", |c, a| {
        c == DEVICES && a == "0"
    })
    .await;
    assert_eq!(status["allocatable"][RESOURCE], "0", "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_container_response_fails_the_kubelet_refuses_the_pod() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, _) =
        with_fault(&api, root.path(), "allocate-no-response", all_allocatable).await;
    bound_pod(&api, "uses-one", devices(1), &[]).await;
    let rejected = kubelet
        .event(TIMEOUT, "rejected", |e| e["name"] == "uses-one")
        .await;
    assert!(
        rejected["message"]
            .as_str()
            .unwrap()
            .contains("no containers return in allocation response"),
        "{rejected}"
    );
}

/// The kubelet refuses `fault`'s Register: the plugin, which exits when
/// Register fails, exits with an error.
async fn register_refused(fault: &str) {
    let api = cluster().await;
    let root = root();
    let _kubelet = kubelet(&api, root.path()).await;
    let mut plugin = faulty_plugin(root.path(), "device", fault);
    // The device manager dials the plugin for up to 10 s within Register.
    let code = plugin.wait(TIMEOUT).await;
    assert_eq!(code, Some(1), "Register was refused");
}

#[tokio::test(flavor = "multi_thread")]
async fn serving_only_after_register_fails_the_kubelet_refuses_the_registration() {
    register_refused("serve-after-register").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn another_version_fails_the_kubelet_refuses_the_registration() {
    register_refused("register-version").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_device_list_fails_the_kubelet_has_no_device_to_give() {
    let api = cluster().await;
    let root = root();
    let mut kubelet = kubelet(&api, root.path()).await;
    // Registers, and its ListAndWatch never sends a list.
    let _plugin = faulty_plugin(root.path(), "device", "no-list");
    bound_pod(&api, "uses-one", devices(1), &[]).await;
    // The device manager knows no device of the resource: the pod's
    // container gets none (the node shows no such resource, so a real
    // kubelet's resource admission refuses the pod before that).
    let admitted = kubelet
        .event(TIMEOUT, "admitted", |e| e["name"] == "uses-one")
        .await;
    assert_eq!(
        admitted["containers"][0]["devices"],
        json!({}),
        "{admitted}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_pre_start_container_fails_the_kubelet_does_not_start_the_container() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, _) =
        with_fault(&api, root.path(), "pre-start-fails", all_allocatable).await;
    bound_pod(&api, "uses-one", devices(1), &[]).await;
    let failed = kubelet
        .event(TIMEOUT, "start_failed", |e| e["name"] == "uses-one")
        .await;
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("PreStartContainer failed on purpose"),
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn not_registering_after_a_kubelet_restart_fails_the_kubelet_refuses_pods_for_the_resource() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, _) =
        with_fault(&api, root.path(), "no-reregister", all_allocatable).await;
    // The device manager writes its checkpoint (the registered devices)
    // just after it shows them: the restarted kubelet knows the resource
    // only from there.
    let checkpoint = root
        .path()
        .join("device-plugins/kubelet_internal_checkpoint");
    eventually(
        "the resource in the kubelet's checkpoint",
        TIMEOUT,
        || async {
            std::fs::read_to_string(&checkpoint)
                .ok()
                .filter(|c| c.contains(RESOURCE))
                .map(|_| ())
        },
    )
    .await;
    // The kubelet restarts: its device manager removes every socket in the
    // directory, the plugin's included, and serves kubelet.sock again.
    kubelet.kill().await;
    let mut kubelet = super::kubelet(&api, root.path()).await;
    bound_pod(&api, "uses-one", devices(1), &[]).await;
    kubelet
        .event(TIMEOUT, "rejected", |e| e["name"] == "uses-one")
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn not_starting_over_a_killed_instances_socket_fails_the_kubelet_refuses_pods_for_the_resource()
 {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, mut plugin, _) =
        with_fault(&api, root.path(), "no-unlink-on-start", all_allocatable).await;
    // Killed, its socket left behind; started again, it cannot bind.
    plugin.kill().await;
    let mut again = faulty_plugin(root.path(), "device", "no-unlink-on-start");
    assert_eq!(
        again.wait(TIMEOUT).await,
        Some(1),
        "it could not start again"
    );
    kubelet
        .event(TIMEOUT, "node_status", |e| {
            e["allocatable"][RESOURCE] == "0"
        })
        .await;
    bound_pod(&api, "uses-one", devices(1), &[]).await;
    kubelet
        .event(TIMEOUT, "rejected", |e| e["name"] == "uses-one")
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relative_mount_and_an_unqualified_cdi_name_fail_the_kubelet_hands_them_to_the_runtime() {
    let api = cluster().await;
    let root = root();
    let (mut kubelet, _plugin, _) =
        with_fault(&api, root.path(), "allocate-bad-response", all_allocatable).await;
    bound_pod(&api, "uses-one", devices(1), &[]).await;
    // The kubelet checks neither: the container's run options carry them
    // as they came, for the runtime to refuse.
    let admitted = admitted_with(&mut kubelet, "uses-one", 1).await;
    let container = &admitted["containers"][0];
    assert_eq!(
        container["mounts"][0]["container_path"], "faulty",
        "{admitted}"
    );
    let device = &container["devices"][RESOURCE][0];
    assert_eq!(container["cdi_devices"], json!([device]), "{admitted}");
}
