//! Pods at scale: waves of pods created and deleted on one node while the
//! waves before them go, until nothing is left allocated or prepared; and
//! ten nodes on one machine (one agent, device plugin and DRA driver each,
//! each agent as its own node identity) under one control plane, a hundred
//! pods spread by the scheduler, one agent SIGKILLed mid-run and started
//! again: each node admits exactly its own pods, each once.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::cli;
use common::pods::*;
use nodeplugins_test_support::wait::eventually;
use serde_json::Value;

/// Whether pod `i` asks for a device: every other pod, and every fifth.
fn wants_device(i: usize) -> bool {
    i.is_multiple_of(2) || i.is_multiple_of(5)
}

/// Whether pod `i` asks for a GPU: every other pod, and every fifth.
fn wants_gpu(i: usize) -> bool {
    !i.is_multiple_of(2) || i.is_multiple_of(5)
}

/// Pod `name` on `node` (any node when `None`): every other pod asks for a
/// device, every other one for a GPU from template `gpu`, every fifth for
/// both.
fn mixed_pod(name: &str, i: usize, node: Option<&str>) -> Value {
    let devices = usize::from(wants_device(i));
    let gpu = wants_gpu(i);
    let claims: &[&str] = if gpu { &["gpu"] } else { &[] };
    let mut pod = pod(
        name,
        node.unwrap_or("any"),
        vec![container("main", devices, claims)],
    );
    if node.is_none() {
        pod["spec"].as_object_mut().unwrap().remove("affinity");
    }
    if gpu {
        pod = with_claims(pod, vec![from_template("gpu", "gpu")]);
    }
    pod
}

fn admitted_names(pods: &[Value]) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| p["phase"] == "admitted")
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_pods_in_overlapping_waves_of_fifty_leave_nothing_allocated_or_prepared() {
    const NODE: &str = "node-1";
    const WAVE: usize = 50;
    const WAVES: usize = 4;
    let cluster = Cluster::start(&[NODE]).await;
    cluster.claim_template("gpu").await;
    let node = Node::start(&cluster, NODE, 100, 64).await;
    let wave = |n: usize| -> Vec<String> { (0..WAVE).map(|i| format!("w{n}-{i:02}")).collect() };
    let create = |n: usize| {
        let cluster = &cluster;
        async move {
            for (i, name) in wave(n).iter().enumerate() {
                cluster.create(&mixed_pod(name, i, Some(NODE))).await;
            }
        }
    };
    create(0).await;
    for n in 0..WAVES {
        // The next wave comes while this one goes.
        let next = async {
            if n + 1 < WAVES {
                create(n + 1).await;
            }
        };
        let this: BTreeSet<String> = wave(n).into_iter().collect();
        let what = format!("wave {n} admitted");
        let admitted = node.pods_when(&what, |pods| this.is_subset(&admitted_names(pods)));
        let ((), pods) = tokio::join!(next, admitted);
        for pod in pods
            .iter()
            .filter(|p| this.contains(p["name"].as_str().unwrap()))
        {
            let main = &pod["containers"][0];
            let i: usize = pod["name"].as_str().unwrap()[3..].parse().unwrap();
            let devices = main["devices"][RESOURCE].as_array().map_or(0, Vec::len);
            let gpus = main["claim_cdi_devices"].as_array().map_or(0, Vec::len);
            assert_eq!(devices, usize::from(wants_device(i)), "{pod}");
            assert_eq!(gpus, usize::from(wants_gpu(i)), "{pod}");
        }
        for name in &this {
            cluster.delete(name).await;
        }
    }
    node.pods_when("every pod gone", |pods| pods.is_empty())
        .await;
    assert_eq!(node.held().await, (0, 0), "nothing allocated or prepared");
    assert_eq!(node.cdi_specs(), 0, "every CDI spec removed");
    eventually("every claim of the templates deleted", LONG, || async {
        cluster.claims().await.is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_nodes_admit_the_hundred_pods_the_scheduler_spreads_each_once_despite_a_sigkill() {
    const NODES: usize = 10;
    const PODS: usize = 100;
    let names: Vec<String> = (0..NODES).map(|n| format!("node-{n}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let cluster = Cluster::start(&refs).await;
    cluster.claim_template("gpu").await;
    let mut nodes = Vec::new();
    for name in &names {
        nodes.push(Node::start(&cluster, name, 10, 10).await);
    }
    let victim = 3;

    // The hundred pods at once, placed by the scheduler; the victim's
    // agent is killed once it has admitted some of its pods.
    for i in 0..PODS {
        cluster
            .create(&mixed_pod(&format!("p{i:03}"), i, None))
            .await;
    }
    let before = nodes[victim]
        .pods_when("the victim admitted a few pods", |pods| {
            admitted_names(pods).len() >= 2
        })
        .await;
    nodes[victim].kill_agent().await;
    let admitted_before = admitted_names(&before);
    let allocations_before = nodes[victim].allocate_calls();
    let prepares_before = nodes[victim].prepare_calls();
    nodes[victim].start_agent().await;

    // Every pod is admitted on the node the scheduler bound it to.
    let mut bound: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..PODS {
        let name = format!("p{i:03}");
        let pod = cluster.pod(&name).await;
        let node = eventually(&format!("{name} bound"), LONG, || async {
            let pod = cluster.pod(&name).await;
            pod["spec"]["nodeName"].as_str().map(str::to_string)
        })
        .await;
        let _ = pod;
        bound.insert(name, node);
    }
    for (n, node) in nodes.iter().enumerate() {
        let mine: BTreeSet<String> = bound
            .iter()
            .filter(|(_, on)| **on == names[n])
            .map(|(pod, _)| pod.clone())
            .collect();
        let pods = node
            .pods_when(&format!("{} admitted its pods", names[n]), |pods| {
                admitted_names(pods) == mine
            })
            .await;
        assert_eq!(
            pods.len(),
            mine.len(),
            "{}: only its own pods: {pods:?}",
            names[n]
        );
    }

    // The victim admitted each pod once: the pods it had admitted before it
    // was killed cost neither an Allocate nor a prepare after its restart,
    // and the others at most one each.
    let victim_pods: BTreeSet<String> = bound
        .iter()
        .filter(|(_, on)| **on == names[victim])
        .map(|(pod, _)| pod.clone())
        .collect();
    let pending = victim_pods.difference(&admitted_before).count();
    let allocations = nodes[victim].allocate_calls() - allocations_before;
    let prepares = nodes[victim].prepare_calls() - prepares_before;
    assert!(
        allocations <= pending,
        "{allocations} Allocate calls after the restart for {pending} pods not admitted before it"
    );
    assert!(
        prepares <= pending,
        "{prepares} prepares after the restart for {pending} pods not admitted before it"
    );
    let total_allocations: usize = nodes.iter().map(Node::allocate_calls).sum();
    let device_pods = (0..PODS).filter(|i| wants_device(*i)).count();
    assert!(
        total_allocations >= device_pods && total_allocations <= device_pods + 1,
        "{total_allocations} Allocate calls for {device_pods} pods with a device (one may be cut short by the SIGKILL)"
    );
    let out = cli(nodes[victim].root(), &["events", "-o", "json"]).await;
    let history = String::from_utf8_lossy(&out.stdout);
    for pod in &admitted_before {
        let uid = cluster.pod(pod).await["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            !history
                .lines()
                .filter(|l| l.contains("\"allocated\""))
                .any(|l| l.contains(&uid)),
            "{pod} admitted again after the restart"
        );
    }

    // Everything goes back.
    for i in 0..PODS {
        cluster.delete(&format!("p{i:03}")).await;
    }
    for node in &nodes {
        node.pods_when(&format!("{} empty", node.name), |pods| pods.is_empty())
            .await;
        assert_eq!(node.held().await, (0, 0), "{}", node.name);
    }
}
