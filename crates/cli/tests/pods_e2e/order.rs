//! The kubelet's admission order and its protections, with a real control
//! plane: pods admitted one at a time, oldest first (the kubelet's own
//! code, `interop/cmd/kubelet-pods`, shows the same outcome); a claim whose
//! unprepare failed kept out of reach, and its pod's devices kept, until
//! the driver unprepared it; pods that wait for a plugin, a claim or a
//! device get the kubelet's Events and are woken when it comes; mirror
//! pods left alone; a deleted pod's admission cut short.

use std::time::SystemTime;

use nodeplugins_test_support::wait::{TIMEOUT, eventually};
use serde_json::json;

use super::common::pods::*;
use super::*;

use super::reference::REFERENCE;

/// `pod` bound to `node` by hand, past the scheduler (which would not
/// place a pod that does not fit).
fn bound(mut pod: Value, node: &str) -> Value {
    pod["spec"]["nodeName"] = json!(node);
    pod["spec"].as_object_mut().unwrap().remove("affinity");
    pod
}

/// A pod of two containers asking for one device each.
fn pair(name: &str, node: &str) -> Value {
    bound(
        pod(
            name,
            node,
            vec![container("first", 1, &[]), container("second", 1, &[])],
        ),
        node,
    )
}

/// Creates `pods` in order, each in a later second than the one before
/// (`creationTimestamp` has whole seconds).
async fn create_in_order(cluster: &Cluster, pods: &[Value]) {
    for (i, pod) in pods.iter().enumerate() {
        if i > 0 {
            let before = pods[i - 1]["metadata"]["name"].as_str().unwrap();
            let created = cluster.pod(before).await["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap()
                .to_string();
            let created: k8s_openapi::jiff::Timestamp = created.parse().unwrap();
            eventually("the next second", TIMEOUT, || async {
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_secs();
                (now > created.as_second() as u64).then_some(())
            })
            .await;
        }
        cluster.create(pod).await;
    }
}

const NO_DEVICE_LEFT: &str = "Allocate failed due to requested number of devices unavailable for example.com/device. Requested: 1, Available: 0, which is unexpected";

#[tokio::test(flavor = "multi_thread")]
async fn the_oldest_pod_is_admitted_whole_and_a_younger_one_waits_until_it_goes() {
    let cluster = Cluster::start(&[NODE, REFERENCE]).await;
    let mut node = Node::start(&cluster, NODE, 2, 1).await;

    // Two pods bound while the agent was away, each of two containers of
    // one device, on a plugin with two devices. The younger one's name
    // comes first, so neither name order nor chance picks the older one;
    // several rounds, each a new agent process (with new hash seeds).
    for round in 0..4 {
        node.stop_agent().await;
        let older = format!("b-older-{round}");
        let younger = format!("a-younger-{round}");
        create_in_order(&cluster, &[pair(&older, NODE), pair(&younger, NODE)]).await;
        let calls = node.allocate_calls();
        node.start_agent().await;

        let admitted_pod = node.pod_when(&older, "admitted", admitted).await;
        for container in ["first", "second"] {
            assert_eq!(
                devices_of(&admitted_pod, container).len(),
                1,
                "{admitted_pod}"
            );
        }
        let waiting = node
            .pod_when(&younger, "refused", |p| p["phase"] == "failed")
            .await;
        assert_eq!(
            waiting["message"], NO_DEVICE_LEFT,
            "round {round}: {waiting}"
        );
        assert_eq!(
            node.allocate_calls() - calls,
            2,
            "round {round}: one Allocate per container of the older pod"
        );

        cluster.delete(&older).await;
        let now_admitted = node.pod_when(&younger, "admitted", admitted).await;
        for container in ["first", "second"] {
            assert_eq!(devices_of(&now_admitted, container).len(), 1);
        }
        assert_eq!(node.allocate_calls() - calls, 4, "round {round}");
        cluster.delete(&younger).await;
        node.pods_when("every pod gone", |pods| pods.is_empty())
            .await;
    }

    // The kubelet's own admission, on a node of its own with two devices:
    // the older pod is admitted, the younger refused with the same words
    // (the kubelet marks it Failed for good; the agent retries it).
    let (root, _kubeconfig, mut kubelet) = super::reference::start_kubelet_pods(&cluster).await;
    let _plugin = start_device_plugin_for(root.path(), RESOURCE, 2, "device-plugin.log");
    kubelet
        .event(TIMEOUT, "node_status", |e| {
            e["allocatable"][RESOURCE] == "2"
        })
        .await;
    create_in_order(
        &cluster,
        &[
            pair("b-older-ref", REFERENCE),
            pair("a-younger-ref", REFERENCE),
        ],
    )
    .await;
    let admitted_ref = kubelet
        .event(LONG, "admitted", |e| e["name"] == "b-older-ref")
        .await;
    for container in admitted_ref["containers"].as_array().unwrap() {
        assert_eq!(container["devices"][RESOURCE].as_array().unwrap().len(), 1);
    }
    let rejected = kubelet
        .event(LONG, "rejected", |e| e["name"] == "a-younger-ref")
        .await;
    assert_eq!(rejected["reason"], "UnexpectedAdmissionError");
    assert_eq!(
        rejected["message"], NO_DEVICE_LEFT,
        "the kubelet's words are ours"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shared_claim_whose_unprepare_fails_is_not_reused_and_is_prepared_again_once_unprepared()
{
    let cluster = Cluster::start(&[NODE]).await;
    let mut node = Node::start(&cluster, NODE, 2, 2).await;
    cluster.claim("shared").await;
    let user = |name: &str, devices: usize| {
        with_claims(
            pod(name, NODE, vec![container("main", devices, &["shared"])]),
            vec![named_claim("shared", "shared")],
        )
    };
    cluster.create(&user("first", 1)).await;
    node.pod_when("first", "admitted", admitted).await;
    assert_eq!(node.prepare_calls(), 1);

    // The driver is gone when the claim's last pod goes: its unprepare
    // fails, the claim stays being unprepared and the pod keeps its device.
    node.kill_driver().await;
    cluster.delete("first").await;
    let releasing = node
        .pod_when("first", "failing to give back", |p| {
            p["phase"] == "releasing" && p["failures"].as_u64() >= Some(1)
        })
        .await;
    assert!(
        releasing["message"].as_str().unwrap().contains("shared"),
        "{releasing}"
    );
    assert_eq!(
        node.held().await,
        (1, 1),
        "its device and its claim are kept"
    );

    // A new pod on the claim waits: it does not get the old prepare.
    cluster.create(&user("second", 0)).await;
    let waiting = node
        .pod_when("second", "waiting", |p| {
            p["phase"] == "waiting"
                && p["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("is being unprepared"))
        })
        .await;
    assert_eq!(waiting["containers"], json!([]), "{waiting}");
    let events = eventually("the Warning on the waiting pod", TIMEOUT, || async {
        let events = cluster.events_of("second").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(events[0]["reason"], "FailedPrepareDynamicResources");
    assert_eq!(
        node.prepare_calls(),
        1,
        "no driver call for the new pod yet"
    );

    // The driver comes back: the unprepare is sent again and succeeds, the
    // first pod's device goes back, and the claim is prepared afresh for
    // the new pod.
    node.start_driver_again();
    let second = node.pod_when("second", "admitted", admitted).await;
    assert_eq!(claim_cdi_of(&second, "main").len(), 1, "{second}");
    node.pods_when("first forgotten", |pods| {
        !pods.iter().any(|p| p["name"] == "first")
    })
    .await;
    assert_eq!(node.prepare_calls(), 2, "prepared again for the new pod");
    assert_eq!(
        node.held().await,
        (0, 1),
        "the first pod's device given back"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_waiting_for_a_plugin_or_a_claim_get_the_kubelets_events_and_mirror_pods_are_left_alone()
 {
    const OTHER: &str = "example.com/other";
    let cluster = Cluster::start(&[NODE]).await;
    let node = Node::start(&cluster, NODE, 2, 1).await;

    // A mirror pod: its static pod is a kubelet's to run from its files.
    let mut mirror = bound(pod("mirror", NODE, vec![container("main", 1, &[])]), NODE);
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "static"});
    cluster.create(&mirror).await;
    // A pod asking for a resource no plugin serves yet.
    let mut other = bound(pod("other", NODE, vec![container("main", 0, &[])]), NODE);
    other["spec"]["containers"][0]["resources"] =
        json!({"limits": {OTHER: "1"}, "requests": {OTHER: "1"}});
    cluster.create(&other).await;
    // A pod whose claim does not exist (yet).
    let missing = with_claims(
        bound(
            pod("missing", NODE, vec![container("main", 0, &["c"])]),
            NODE,
        ),
        vec![named_claim("c", "not-made")],
    );
    cluster.create(&missing).await;

    let waiting = node
        .pod_when("other", "waiting", |p| p["phase"] == "waiting")
        .await;
    let unserved =
        "Node didn't have enough resource: example.com/other, requested: 1, used: 0, capacity: 0";
    assert_eq!(waiting["message"], unserved, "{waiting}");
    for (name, reason) in [
        ("other", "OutOfexample.com/other"),
        ("missing", "FailedPrepareDynamicResources"),
    ] {
        let events = eventually("the Warning on the waiting pod", TIMEOUT, || async {
            let events = cluster.events_of(name).await;
            (!events.is_empty()).then_some(events)
        })
        .await;
        assert_eq!(events[0]["reason"], reason, "{name}: {events:?}");
        assert_eq!(events[0]["type"], "Warning");
    }
    node.pod_when("missing", "waiting", |p| p["phase"] == "waiting")
        .await;

    // Its plugin registers: the pod is admitted at once, before its next
    // retry was due.
    let waiting = node
        .pod_when("other", "backing off 8 s", |p| {
            p["failures"].as_u64() >= Some(4)
        })
        .await;
    // The retry in effect when it is admitted: the last one seen while it
    // waited (on a busy machine the plugin may take longer to register
    // than one backoff).
    let last_retry =
        std::sync::atomic::AtomicU64::new(waiting["retry_at_unix_ms"].as_u64().unwrap());
    let _plugin = start_device_plugin_for(node.root(), OTHER, 1, "other-plugin.log");
    let admitted_pod = node
        .pod_when("other", "admitted", |p| {
            if let Some(at) = p["retry_at_unix_ms"].as_u64() {
                last_retry.store(at, std::sync::atomic::Ordering::Relaxed);
            }
            admitted(p)
        })
        .await;
    let retry_at_ms = last_retry.load(std::sync::atomic::Ordering::Relaxed);
    let ready_at_ms = admitted_pod["ready_at_unix_us"].as_u64().unwrap() / 1000;
    assert!(
        ready_at_ms < retry_at_ms,
        "woken by the plugin, not by the retry: ready at {ready_at_ms}, retry at {retry_at_ms}"
    );
    assert_eq!(devices_of_resource(&admitted_pod, "main", OTHER).len(), 1);

    let pods = node.pods().await;
    let names: Vec<&str> = pods["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"mirror"), "{names:?}");
    assert_eq!(node.held().await.0, 1, "only the other pod's device");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_deleted_while_it_is_admitted_has_its_admission_cut_short() {
    let cluster = Cluster::start(&[NODE]).await;
    // A driver call waits as long as the driver takes.
    let node = Node::start_with(&cluster, NODE, 2, 1, &["--dra-call-timeout", "1h"]).await;
    cluster.claim_template("gpu").await;
    node.signal_driver("-STOP").await;
    let slow = with_claims(
        pod("slow", NODE, vec![container("main", 1, &["gpu"])]),
        vec![from_template("gpu", "gpu")],
    );
    cluster.create(&slow).await;
    node.pod_when("slow", "admitting", |p| p["phase"] == "admitting")
        .await;
    // "Admitting" starts before the claim is read; its record (pending) is
    // made right before the driver is called, which hangs.
    eventually(
        "slow's claim recorded, its prepare at the driver",
        TIMEOUT,
        || async { (node.held().await == (1, 1)).then_some(()) },
    )
    .await;

    // Deleted while its claim's prepare hangs: the admission stops at once
    // and what it got is given back (its release waits for the driver).
    cluster.delete("slow").await;
    node.pod_when("slow", "giving back", |p| p["phase"] == "releasing")
        .await;
    node.signal_driver("-CONT").await;
    node.pods_when("slow forgotten", |pods| pods.is_empty())
        .await;
    assert_eq!(node.held().await, (0, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_bound_while_another_gives_its_devices_back_waits_for_them_and_one_asking_for_none_does_not()
 {
    let cluster = Cluster::start(&[NODE]).await;
    let node = Node::start(&cluster, NODE, 2, 1).await;
    cluster.claim_template("gpu").await;
    let going = with_claims(
        pod("going", NODE, vec![container("main", 2, &["gpu"])]),
        vec![from_template("gpu", "gpu")],
    );
    cluster.create(&going).await;
    node.pod_when("going", "admitted", admitted).await;

    // Its claim's unprepare hangs on a stopped driver, so its devices are
    // on their way back for as long as the driver is stopped.
    node.signal_driver("-STOP").await;
    cluster.delete("going").await;
    node.pod_when("going", "giving back", |p| p["phase"] == "releasing")
        .await;
    cluster
        .create(&bound(
            pod("next", NODE, vec![container("main", 2, &[])]),
            NODE,
        ))
        .await;
    let next = node.pod_when("next", "seen", |p| p["in_api"] == true).await;
    assert_eq!(
        next["phase"], "pending",
        "not admitted while devices go back: {next}"
    );
    // A pod that asks for no device does not wait for them.
    cluster
        .create(&bound(
            pod("plain", NODE, vec![container("main", 0, &[])]),
            NODE,
        ))
        .await;
    node.pod_when("plain", "admitted", admitted).await;
    let going = node.pod_when("going", "listed", |_| true).await;
    assert_eq!(going["phase"], "releasing", "still giving back: {going}");
    node.signal_driver("-CONT").await;
    let next = node.pod_when("next", "admitted", admitted).await;
    assert_eq!(devices_of(&next, "main").len(), 2);
    assert_eq!(next["failures"], 0, "never refused: {next}");
    assert!(cluster.events_of("next").await.is_empty());
}
