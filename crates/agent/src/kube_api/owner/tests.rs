//! The owner's transitions, fed the ends of writes, the Node as a watch
//! would show it and wipe reports, without an API server: its client
//! points at a port nobody listens on and is never used.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodeplugins_api::backoff::Backoff;

use super::*;
use crate::device::{DeviceManager, DeviceManagerConfig};
use crate::kube_api::config::KubeConfigSource;

const NODE: &str = "node-1";
const POLICY: RetryPolicy = RetryPolicy {
    backoff: Backoff::new(Duration::from_millis(100), Duration::from_secs(2)),
    slowly: Backoff::new(Duration::from_secs(10), Duration::from_secs(300)),
};

struct Harness {
    owner: Owner,
    state: State,
    events: broadcast::Receiver<AgentEvent>,
}

fn harness() -> Harness {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let connection = watch::channel(Connection {
        client,
        server: "http://127.0.0.1:9".into(),
    })
    .1;
    let (_, devices) = DeviceManager::new(DeviceManagerConfig::new("/nonexistent"));
    let events = broadcast::channel(16).0;
    let status = KubeApiStatus {
        server: String::new(),
        node: NODE.into(),
        user: None,
        last_success_unix_ms: None,
        pending: Vec::new(),
        last_error: None,
        failures: 0,
    };
    let owner = Owner {
        config: KubeApiConfig::new(KubeConfigSource::InCluster, NODE),
        policy: POLICY,
        connection,
        devices,
        csi: CsiDriverStore::default(),
        wipes: mpsc::unbounded_channel().1,
        events: events.clone(),
        metrics: KubeApiMetrics::default(),
        status: Publisher::new(status).0,
        node_mirror: None,
    };
    Harness {
        owner,
        state: State::new(),
        events: events.subscribe(),
    }
}

fn answered(code: u16) -> KubeApiError {
    KubeApiError::Request {
        what: format!("apply node {NODE} status"),
        source: kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        })),
    }
}

fn node(version: u64) -> Node {
    made_node(version, "uid-1")
}

/// The Node at `version`, made with UID `uid`.
fn made_node(version: u64, uid: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(NODE.into()),
            uid: Some(uid.into()),
            resource_version: Some(version.to_string()),
            ..ObjectMeta::default()
        },
        ..Node::default()
    }
}

fn resources() -> NodeResources {
    [("example.com/gpu".to_string(), (2, 2))].into()
}

/// The node status write ends with `result`.
fn node_status_done(h: &mut Harness, result: Result<Node, KubeApiError>) {
    h.state.node_status.start();
    let done = Done::NodeStatus {
        desired: resources(),
        result: result.map(Box::new),
    };
    h.owner.on_done(&mut h.state, done).unwrap();
    h.owner.publish_status(&h.state);
}

fn kinds(events: &mut broadcast::Receiver<AgentEvent>) -> Vec<EventKind> {
    std::iter::from_fn(|| events.try_recv().ok())
        .map(|e| e.kind)
        .collect()
}

#[tokio::test]
async fn a_failed_write_shows_in_status_is_said_once_and_a_success_catches_up() {
    let mut h = harness();
    let before = Instant::now();
    node_status_done(&mut h, Err(answered(503)));
    let status = h.owner.status.current();
    assert!(status.pending.contains(&WriteKind::NodeStatus));
    assert_eq!(status.failures, 1);
    assert!(status.last_error.as_deref().unwrap().contains("apply node"));
    let due = h.state.node_status.next_due().unwrap();
    assert!(
        due >= before + POLICY.backoff.delay(1),
        "retried after the backoff"
    );
    assert_eq!(*h.owner.status.store().changes().borrow(), 1);

    node_status_done(&mut h, Err(answered(503)));
    assert_eq!(h.owner.status.current().failures, 2);
    assert_eq!(
        kinds(&mut h.events),
        vec![EventKind::WriteFailed],
        "said once"
    );

    node_status_done(&mut h, Ok(node(7)));
    let status = h.owner.status.current();
    assert!(!status.pending.contains(&WriteKind::NodeStatus));
    assert_eq!((status.failures, status.last_error.clone()), (0, None));
    assert!(status.last_success_unix_ms.is_some());
    assert_eq!(kinds(&mut h.events), vec![EventKind::CaughtUp]);
    assert_eq!(
        h.state.node_status.next_due(),
        None,
        "nothing more to write"
    );
    assert!(h.state.owned_resources.contains("example.com/gpu"));
}

#[tokio::test]
async fn credentials_of_another_node_stop_the_publisher() {
    let mut h = harness();
    let mine = identity::WhoAmI {
        user: format!("system:node:{NODE}"),
        node: Some(NODE.into()),
    };
    h.owner
        .on_done(&mut h.state, Done::Identity(Ok(mine)))
        .unwrap();
    let other = identity::WhoAmI {
        user: "system:node:node-2".into(),
        node: Some("node-2".into()),
    };
    let fatal = h
        .owner
        .on_done(&mut h.state, Done::Identity(Ok(other)))
        .unwrap_err();
    assert!(matches!(fatal, KubeApiError::WrongNode { .. }), "{fatal}");
}

#[tokio::test]
async fn an_unknown_identity_is_asked_again_with_backoff() {
    let mut h = harness();
    let before = Instant::now();
    h.owner
        .on_done(&mut h.state, Done::Identity(Err(answered(503))))
        .unwrap();
    let retry = h.state.identity.due_at().unwrap();
    assert!(retry >= before + POLICY.backoff.delay(1));
    h.owner
        .on_done(&mut h.state, Done::Identity(Err(answered(503))))
        .unwrap();
    assert!(h.state.identity.due_at().unwrap() >= before + POLICY.backoff.delay(2));
    assert_eq!(h.state.identity.failures(), 2);
}

#[tokio::test]
async fn a_deleted_node_holds_the_writes_until_it_is_made_again() {
    let mut h = harness();
    let mut csinode = CsiNodeFollow::Reading { next: None };
    node_status_done(&mut h, Ok(node(5)));
    assert_eq!(h.state.node_status.next_due(), None);

    h.owner.on_node(&mut h.state, &mut csinode, Seen::Now(None));
    assert!(h.state.node.is_none());
    h.state.node_status.mark(Instant::now(), Duration::ZERO);
    assert_eq!(h.state.node_status.next_due(), None, "nothing to write to");

    let made_again = Instant::now();
    h.owner.on_node(
        &mut h.state,
        &mut csinode,
        Seen::Now(Some(Arc::new(made_node(9, "uid-2")))),
    );
    let due = h.state.node_status.next_due().unwrap();
    assert!(due >= made_again && h.state.node_status.ready(Instant::now()));
    assert!(
        matches!(csinode, CsiNodeFollow::Reading { next: Some(_) }),
        "the CSINode is read again with the Node"
    );

    // The Node changes again (the agent's own status write): the CSINode
    // last read stands.
    csinode = CsiNodeFollow::Reading { next: None };
    let changed = Seen::Now(Some(Arc::new(made_node(10, "uid-2"))));
    h.owner.on_node(&mut h.state, &mut csinode, changed);
    assert!(matches!(csinode, CsiNodeFollow::Reading { next: None }));
}

#[tokio::test]
async fn a_node_older_than_what_a_write_returned_changes_nothing() {
    let mut h = harness();
    let mut csinode = CsiNodeFollow::Reading { next: None };
    node_status_done(&mut h, Ok(node(10)));
    h.owner.on_node(
        &mut h.state,
        &mut csinode,
        Seen::Now(Some(Arc::new(node(9)))),
    );
    assert_eq!(version(h.state.node.as_deref().unwrap()), 10);
    assert_eq!(h.state.node_status.next_due(), None);
    assert!(matches!(csinode, CsiNodeFollow::Reading { next: None }));
}

#[tokio::test]
async fn wipe_failures_show_until_a_wipe_succeeds() {
    let mut h = harness();
    let failed = Arc::new(answered(503));
    h.owner.on_wipe(&mut h.state, Err(failed.clone()));
    h.owner.on_wipe(&mut h.state, Err(failed));
    h.owner.publish_status(&h.state);
    let status = h.owner.status.current();
    assert!(status.pending.contains(&WriteKind::ResourceSlices));
    assert_eq!(status.failures, 2);
    assert_eq!(kinds(&mut h.events), vec![EventKind::WriteFailed]);

    h.owner.on_wipe(&mut h.state, Ok(()));
    h.owner.publish_status(&h.state);
    let status = h.owner.status.current();
    assert!(!status.pending.contains(&WriteKind::ResourceSlices));
    assert_eq!(status.failures, 0);
    assert_eq!(kinds(&mut h.events), vec![EventKind::CaughtUp]);
}

#[tokio::test]
async fn a_csinode_read_comes_again_within_the_recheck_period_and_a_failed_one_sooner() {
    let mut h = harness();
    let now = Instant::now();
    let mut csinode = CsiNodeFollow::Reading { next: None };
    h.owner
        .csinode_read_done(&mut h.state, &mut csinode, Ok(()), now);
    let CsiNodeFollow::Reading { next: Some(next) } = csinode else {
        panic!("a read is due again");
    };
    let recheck = crate::kube_api::CSINODE_RECHECK;
    let after = next.saturating_duration_since(now);
    assert!(
        after >= recheck && after <= recheck.mul_f64(1.2),
        "{after:?}"
    );

    let mut csinode = CsiNodeFollow::Reading { next: None };
    h.owner.csinode_read_done(
        &mut h.state,
        &mut csinode,
        Err(Arc::new(answered(503))),
        now,
    );
    let CsiNodeFollow::Reading { next: Some(next) } = csinode else {
        panic!("a failed read is asked again");
    };
    assert!(next.saturating_duration_since(now) < Duration::from_secs(5));
    assert_eq!(h.state.csinode_read.failures(), 1);

    // Due again already (the Node changed meanwhile): left as it is.
    let mut csinode = CsiNodeFollow::Reading { next: Some(now) };
    h.owner
        .csinode_read_done(&mut h.state, &mut csinode, Ok(()), now);
    assert!(matches!(csinode, CsiNodeFollow::Reading { next: Some(at) } if at == now));
}

#[tokio::test]
async fn a_writer_that_keeps_undoing_the_status_draws_a_few_repairs_then_one_per_period() {
    let mut h = harness();
    let mut csinode = CsiNodeFollow::Reading { next: None };
    let mut waits = Vec::new();
    for round in 0..7 {
        // The agent's write lands; another writer undoes it at once.
        node_status_done(&mut h, Ok(node(2 * round + 1)));
        let seen = Instant::now();
        let undone = Seen::Now(Some(Arc::new(node(2 * round + 2))));
        h.owner.on_node(&mut h.state, &mut csinode, undone);
        let due = h.state.node_status.next_due().expect("repaired");
        waits.push(due.saturating_duration_since(seen));
    }
    let at_once = waits
        .iter()
        .filter(|w| **w < Duration::from_secs(1))
        .count();
    assert_eq!(at_once, 5, "the burst goes at once: {waits:?}");
    assert!(
        waits[5] >= crate::kube_api::repair_limit::RepairLimit::EVERY - Duration::from_secs(1),
        "then one repair per period: {waits:?}"
    );
}
