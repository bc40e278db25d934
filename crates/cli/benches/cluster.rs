//! The API's cost of many nodes: N simulated nodes on this machine (20 by
//! default), each an agent with its own root and node name, its node's own
//! credentials (a client certificate of `system:node:<name>`, so the Node
//! authorizer judges it as a kubelet), the example device plugin, the
//! example CSI driver behind the CSI registrar, and the example DRA
//! driver, all against one real API server. The API server's own counters
//! (`apiserver_request_total`) give the requests it served, by verb and
//! resource, in each of these windows:
//!
//! - nothing changing, per node per hour (the watches, held open, are
//!   counted when they end and start again);
//! - one device health flip on every node (a device unhealthy, then healthy
//!   again), per flip;
//! - every node's DRA driver stopped and started again within the agent's
//!   cleanup grace, per restart (the driver's own requests included);
//! - one pod per node with a device and a claim, admitted, then deleted and
//!   given back, per pod (the benchmark's own requests left out).
//!
//! Each window ends once the API server has served nothing for a second
//! (the benchmark's own reads of `/metrics` aside). Left out of every
//! window: the benchmark's own requests (its reads of the counters, its
//! lists to see the nodes published, the pods and claims it makes), and
//! what the API server sends itself (its lease, its OpenAPI reads),
//! measured first, with no node running, as a rate.
//!
//! Run: `cargo bench -p nodeplugins-cli --bench cluster` (builds the Go
//! programs of `interop/` first if they are missing). `BENCH_NODES` and
//! `BENCH_IDLE_SECS` change the node count (20) and the idle window (120).

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use nodeplugins_test_support::kube_api::KubeApi;
use nodeplugins_test_support::kube_api::hand_allocated::PodDevices;
use nodeplugins_test_support::kube_api::requests::RequestCounts;
use nodeplugins_test_support::sim_node::{
    DEVICES, DRA_DRIVER, NODE_RESOURCES, RESOURCE, SimNode, build_programs, cluster_shows,
};
use serde_json::json;
use tokio::time::Instant;

const CLASS: &str = "gpu.example.com";
const PODS: &str = "/api/v1/namespaces/default/pods";
const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";
const TIMEOUT: Duration = Duration::from_secs(180);
/// How long the API must have served nothing for a window to end.
const QUIET: Duration = Duration::from_secs(1);
/// The benchmark's own read of the counters, as the counters show it.
const OWN_READ: (&str, f64) = ("GET ", 1.0);
/// The lists each look at the published cluster sends.
const OWN_LISTS: [&str; 3] = ["LIST nodes", "LIST csinodes", "LIST resourceslices"];
/// Looks at the published cluster so far.
static LOOKS: AtomicU64 = AtomicU64::new(0);

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `node`'s agent has the DRA driver connected, registered after
/// `since` (Unix ms).
async fn dra_connected_since(node: &SimNode, since: u64) -> bool {
    let Ok(status) = nodeplugins::admin::status(node.root()).await else {
        return false;
    };
    status.dra_drivers.iter().any(|d| {
        d.name == DRA_DRIVER
            && d.instances
                .iter()
                .any(|i| i.connected && i.registered_at_unix_ms >= since)
    })
}

/// `node`'s agent's pods.
async fn pods(node: &SimNode) -> Option<Vec<nodeplugins::pods::PodPhase>> {
    let reply = nodeplugins::admin::pods(node.root(), Some("default"), None)
        .await
        .ok()?;
    Some(reply.pods.iter().map(|p| p.phase).collect())
}

/// Polls `check` until it holds, failing the run after [`TIMEOUT`].
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + TIMEOUT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// [`cluster_shows`], counted as the benchmark's own requests.
async fn looks_published(api: &KubeApi, nodes: &[SimNode], allocatable: usize) -> bool {
    LOOKS.fetch_add(1, Ordering::SeqCst);
    cluster_shows(api, nodes, allocatable).await
}

/// The counters at one time, and how many looks at the cluster the
/// benchmark had sent by then.
struct Mark {
    counts: RequestCounts,
    at: Instant,
    looks: u64,
}

/// The counters once the API server has served nothing (but these reads
/// and what it sends itself) for [`QUIET`].
async fn quiet(api: &KubeApi, own: &RequestCounts) -> Mark {
    let mut last = api.request_counts().await;
    let mut last_at = Instant::now();
    loop {
        tokio::time::sleep(QUIET).await;
        let now = api.request_counts().await;
        let at = Instant::now();
        // The API server's own, with room: it sends them in bursts.
        let own = own.scaled((at - last_at).as_secs_f64() * 2.0).entries();
        let mut ignore: Vec<(&str, f64)> =
            own.iter().map(|(k, n)| (k.as_str(), n.ceil())).collect();
        ignore.push(OWN_READ);
        if now.since(&last, &ignore).total() == 0.0 {
            return Mark {
                counts: now,
                at,
                looks: LOOKS.load(Ordering::SeqCst),
            };
        }
        last = now;
        last_at = at;
    }
}

/// The requests the API server sends itself, per second: what it served
/// over `window` with no node running.
async fn own_rate(api: &KubeApi, window: Duration) -> RequestCounts {
    let before = api.request_counts().await;
    tokio::time::sleep(window).await;
    let after = api.request_counts().await;
    after
        .since(&before, &[OWN_READ])
        .scaled(1.0 / window.as_secs_f64())
}

/// Requests served from `before` until quiet, the benchmark's own and the
/// API server's own (`own`, per second) and `ignore` left out.
async fn served_since(
    api: &KubeApi,
    own: &RequestCounts,
    before: &Mark,
    ignore: &[(&str, f64)],
) -> RequestCounts {
    let after = quiet(api, own).await;
    let mut left_out: Vec<(String, f64)> =
        ignore.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    let reads = after.counts.0.get(OWN_READ.0).copied().unwrap_or(0.0)
        - before.counts.0.get(OWN_READ.0).copied().unwrap_or(0.0);
    left_out.push((OWN_READ.0.to_string(), reads));
    let looks = (after.looks - before.looks) as f64;
    left_out.extend(OWN_LISTS.iter().map(|k| (k.to_string(), looks)));
    left_out.extend(own.scaled((after.at - before.at).as_secs_f64()).entries());
    let left_out: Vec<(&str, f64)> = left_out.iter().map(|(k, n)| (k.as_str(), *n)).collect();
    after.counts.since(&before.counts, &left_out)
}

/// Pod `name` with one device and claim `name` (GPU 0 of `node`'s pool,
/// allocated and reserved for it), bound to `node`: four requests.
async fn pod_on(api: &KubeApi, name: &str, node: &str) {
    let devices = PodDevices {
        resource: RESOURCE,
        class: CLASS,
        driver: DRA_DRIVER,
        pool: node,
        device: "gpu-0",
    };
    api.create_pod_with_allocated_claim(name, devices).await;
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    api.admin("POST", &format!("{PODS}/{name}/binding"), Some(&binding))
        .await;
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

#[tokio::main]
async fn main() {
    let count = setting("BENCH_NODES", 20) as usize;
    let idle = Duration::from_secs(setting("BENCH_IDLE_SECS", 120));
    let api = KubeApi::start("sim-00").await;
    api.ensure_default_service_account("default").await;
    for index in 0..count {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("sim-{index:02}")}});
        api.admin("POST", "/api/v1/nodes", Some(&node)).await;
    }
    let class = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRA_DRIVER}\"")}}]},
    });
    api.admin(
        "POST",
        "/apis/resource.k8s.io/v1/deviceclasses",
        Some(&class),
    )
    .await;

    let baseline = Duration::from_secs(setting("BENCH_BASELINE_SECS", 60));
    let server = own_rate(&api, baseline).await;
    println!(
        "the API server's own, per hour: {}",
        server.per(1.0 / 3600.0)
    );

    // Built (if need be) before the clock starts.
    build_programs();
    let started = Instant::now();
    let mut nodes: Vec<SimNode> = (0..count).map(|i| SimNode::start(&api, i)).collect();
    until("every node published", || {
        looks_published(&api, &nodes, DEVICES)
    })
    .await;
    println!("{count} nodes published in {:?}", started.elapsed());
    let n = count as f64;

    // Nothing changes.
    let before = quiet(&api, &server).await;
    tokio::time::sleep(idle).await;
    let served = served_since(&api, &server, &before, &[]).await;
    let hours = idle.as_secs_f64() / 3600.0;
    println!("nothing changing, over {idle:?}, per node per hour:");
    let nodes_own = served.only_resources(NODE_RESOURCES);
    println!("  on what nodes use:  {}", nodes_own.per(n * hours));
    let beyond = nodes_own.without_verbs(&["WATCH"]);
    println!("  beyond the watches: {}", beyond.per(n * hours));
    let informers = served.since(&nodes_own, &[]);
    println!(
        "  left out, the API server's own informers renewing their watches: {}",
        informers.per(n * hours)
    );

    // A device health flip on every node, and back.
    let before = quiet(&api, &server).await;
    for node in &nodes {
        node.signal_device_plugin("-USR1").await;
    }
    until("a device unhealthy on every node", || {
        looks_published(&api, &nodes, DEVICES - 1)
    })
    .await;
    for node in &nodes {
        node.signal_device_plugin("-USR2").await;
    }
    until("every device healthy again", || {
        looks_published(&api, &nodes, DEVICES)
    })
    .await;
    let served = served_since(&api, &server, &before, &[]).await;
    println!("per device health flip: {}", served.per(2.0 * n));

    // Every DRA driver restarted within the cleanup grace.
    let before = quiet(&api, &server).await;
    let since = unix_ms();
    for node in &mut nodes {
        node.restart_dra_driver().await;
    }
    until("every DRA driver back", || async {
        for node in &nodes {
            if !dra_connected_since(node, since).await {
                return false;
            }
        }
        true
    })
    .await;
    let served = served_since(&api, &server, &before, &[]).await;
    println!(
        "per DRA driver restart (driver and agent): {}",
        served.per(n)
    );

    // One pod per node admitted, then deleted and given back.
    let names: Vec<String> = nodes
        .iter()
        .map(|node| format!("pod-{}", node.name()))
        .collect();
    let before = quiet(&api, &server).await;
    for (node, name) in nodes.iter().zip(&names) {
        pod_on(&api, name, node.name()).await;
    }
    let admitted = nodeplugins::pods::PodPhase::Admitted;
    until("every pod admitted", || async {
        for node in &nodes {
            if pods(node).await != Some(vec![admitted]) {
                return false;
            }
        }
        true
    })
    .await;
    let made = [
        ("POST resourceclaims", n),
        ("POST pods", n),
        ("PATCH resourceclaims/status", n),
        ("POST pods/binding", n),
    ];
    let served = served_since(&api, &server, &before, &made).await;
    println!("per pod admitted: {}", served.per(n));

    let before = quiet(&api, &server).await;
    for name in &names {
        api.admin(
            "DELETE",
            &format!("{PODS}/{name}?gracePeriodSeconds=0"),
            None,
        )
        .await;
        api.admin("DELETE", &format!("{CLAIMS}/{name}"), None).await;
    }
    until("every pod given back", || async {
        for node in &nodes {
            if pods(node).await != Some(Vec::new()) {
                return false;
            }
        }
        true
    })
    .await;
    let made = [("DELETE pods", n), ("DELETE resourceclaims", n)];
    let served = served_since(&api, &server, &before, &made).await;
    println!("per pod deleted and given back: {}", served.per(n));
}
