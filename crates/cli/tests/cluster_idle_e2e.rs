//! Twenty simulated nodes against one real API server (each an agent with
//! its node's own credentials, a device plugin, a CSI driver and a DRA
//! driver): once everything is published and nothing changes, the nodes
//! send the API server nothing but their open watches and their heartbeats
//! (each its Lease renewed every 10 s, as a kubelet renews it, and nothing
//! else of it). The API server's own counters (`apiserver_request_total`)
//! tell.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nodeplugins_test_support::kube_api::KubeApi;
use nodeplugins_test_support::kube_api::requests::RequestCounts;
use nodeplugins_test_support::sim_node::{
    DEVICES, NODE_RESOURCES, SimNode, build_programs, cluster_lacks,
};
use serde_json::json;

const NODES: usize = 20;
/// Generous: twenty nodes' hundred processes start on two busy cores.
const PUBLISHED: Duration = Duration::from_secs(180);
/// How long nothing changes.
const WINDOW: Duration = Duration::from_secs(30);
/// The nodes' requests other than watches, between two counts.
fn beyond_watches(before: &RequestCounts, after: &RequestCounts) -> RequestCounts {
    after
        .since(before, &[])
        .only_resources(NODE_RESOURCES)
        .without_verbs(&["WATCH"])
}

/// Waits until every node shows what it publishes; past [`PUBLISHED`],
/// fails saying what is missing and what the agents of those nodes say of
/// themselves.
async fn published(api: &KubeApi, nodes: &mut [SimNode]) {
    let start = tokio::time::Instant::now();
    let deadline = start + PUBLISHED;
    loop {
        let lacks = cluster_lacks(api, nodes, DEVICES).await;
        if lacks.is_empty() {
            tracing::info!(elapsed = ?start.elapsed(), "every node published");
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            let mut said = String::new();
            for node in nodes.iter_mut() {
                if lacks
                    .iter()
                    .any(|l| l.starts_with(&format!("{}:", node.name())))
                {
                    let status = node.agent_status().await;
                    let logs = node.logs();
                    said += &format!("--- {}\n{status}\n{logs}\n", node.name());
                }
            }
            panic!(
                "after {PUBLISHED:?} the cluster still lacks:\n{}\nthose agents say:\n{said}",
                lacks.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_idle_nodes_send_nothing_beyond_their_watches() {
    nodeplugins_test_support::init_tracing();
    build_programs();
    let api = KubeApi::start("sim-00").await;
    for index in 0..NODES {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("sim-{index:02}")}});
        api.admin("POST", "/api/v1/nodes", Some(&node)).await;
    }
    let mut nodes: Vec<SimNode> = (0..NODES).map(|i| SimNode::start(&api, i)).collect();
    published(&api, &mut nodes).await;

    // Settled: a second with nothing from the nodes but watches.
    let mut last = api.request_counts().await;
    let deadline = tokio::time::Instant::now() + PUBLISHED;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = api.request_counts().await;
        let quiet = beyond_watches(&last, &now).total() == 0.0;
        last = now;
        if quiet {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the nodes kept sending requests"
        );
    }

    // The measured window: nothing changes.
    tokio::time::sleep(WINDOW).await;
    let after = api.request_counts().await;
    let sent = beyond_watches(&last, &after);
    assert_eq!(
        sent,
        RequestCounts::default(),
        "requests by {NODES} idle nodes over {WINDOW:?}, beyond their watches and heartbeats"
    );
    // The heartbeats: one Lease update per node every 10 s (up to 4% later),
    // nothing read.
    let heartbeats = after.since(&last, &[]).only_resources(&["leases"]);
    let renewals = heartbeats.0.get("PUT leases").copied().unwrap_or(0.0);
    let each = WINDOW.as_secs_f64() / 10.0;
    let (least, most) = (
        (NODES as f64) * (each / 1.04 - 1.0).floor(),
        (NODES as f64) * (each + 1.0),
    );
    assert!(
        (least..=most).contains(&renewals) && heartbeats.total() == renewals,
        "{NODES} idle nodes' Lease requests over {WINDOW:?}: {heartbeats:?}"
    );
}
