use super::*;

fn driver(name: &str, endpoint: &str) -> CsiDriver {
    CsiDriver {
        name: name.to_string(),
        endpoint: endpoint.to_string(),
        version: "1.0.0".to_string(),
        node_id: String::new(),
        max_volumes_per_node: 0,
        accessible_topology: BTreeMap::new(),
    }
}

#[test]
fn a_registration_begun_is_published_at_once_and_completing_it_replaces_the_entry() {
    let store = CsiDriverStore::default();
    let changes = store.changes();
    let before = store.snapshot();
    let pending = store.begin(driver("a", "/a.sock"));
    assert!(before.get("a").is_none(), "a snapshot never changes");
    assert_eq!(store.get("a").map(|d| d.endpoint), Some("/a.sock".into()));
    let mut answered = driver("a", "/a.sock");
    answered.node_id = "node-1".to_string();
    assert!(store.complete(&pending, answered));
    assert_eq!(store.get("a").map(|d| d.node_id), Some("node-1".into()));
    assert_eq!(*changes.borrow(), 2);
}

#[test]
fn a_later_registration_wins_over_an_earlier_registration_still_running() {
    let store = CsiDriverStore::default();
    let first = store.begin(driver("a", "/old.sock"));
    let second = store.begin(driver("a", "/new.sock"));
    assert!(!store.complete(&first, driver("a", "/old.sock")));
    store.abandon("a", first);
    assert_eq!(store.get("a").map(|d| d.endpoint), Some("/new.sock".into()));
    assert!(store.complete(&second, driver("a", "/new.sock")));
}

#[test]
fn abandoning_puts_back_what_the_pending_registration_replaced() {
    let store = CsiDriverStore::default();
    let first = store.begin(driver("a", "/old.sock"));
    assert!(store.complete(&first, driver("a", "/old.sock")));
    let second = store.begin(driver("a", "/new.sock"));
    store.abandon("a", second);
    assert_eq!(store.get("a").map(|d| d.endpoint), Some("/old.sock".into()));
    let alone = store.begin(driver("b", "/b.sock"));
    store.abandon("b", alone);
    assert!(store.get("b").is_none());
}

#[test]
fn removal_needs_the_endpoint_the_driver_is_registered_at_and_nothing_else_ticks() {
    let store = CsiDriverStore::default();
    let pending = store.begin(driver("a", "/new.sock"));
    assert!(store.complete(&pending, driver("a", "/new.sock")));
    let changes = store.changes();
    let ticks = *changes.borrow();
    assert!(!store.remove_if_endpoint("a", "/old.sock"));
    assert_eq!(
        *changes.borrow(),
        ticks,
        "nothing changed, nothing published"
    );
    assert!(store.remove_if_endpoint("a", "/new.sock"));
    assert!(store.list().is_empty());
    assert_eq!(*changes.borrow(), ticks + 1);
}
