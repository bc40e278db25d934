// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn entry(id: &str, zone: &str) -> CsiNodeEntry {
    CsiNodeEntry {
        node_id: id.into(),
        topology: [("topology.example.com/zone".to_string(), zone.to_string())].into(),
        max_volumes: 0,
    }
}

fn node(uid: &str, annotation: Option<&str>, zone: Option<&str>) -> Node {
    let mut node = Node {
        metadata: ObjectMeta {
            name: Some("node-1".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    if let Some(annotation) = annotation {
        node.metadata.annotations =
            Some([(NODE_ID_ANNOTATION.to_string(), annotation.to_string())].into());
    }
    if let Some(zone) = zone {
        node.metadata.labels =
            Some([("topology.example.com/zone".to_string(), zone.to_string())].into());
    }
    node
}

fn csinode(owner: &str, drivers: &CsiDrivers, annotated: bool) -> CSINode {
    let owner_node = node(owner, None, None);
    let mut csinode = new_csinode(
        &owner_node,
        drivers
            .iter()
            .map(|(name, entry)| csinode_driver(name, entry))
            .collect(),
    );
    if !annotated {
        csinode.metadata.annotations = None;
    }
    csinode
}

#[test]
fn the_node_and_csinode_show_the_drivers_only_when_everything_the_agent_writes_is_there() {
    let desired: CsiDrivers = [("csi.example.com".to_string(), entry("n-1", "a"))].into();
    let none = BTreeSet::new();
    let written = node("uid-1", Some(r#"{"csi.example.com":"n-1"}"#), Some("a"));
    assert!(shows(
        &written,
        Some(&csinode("uid-1", &desired, true)),
        &desired,
        &none
    ));
    // A Node made again: nothing of it is there.
    let again = node("uid-2", None, None);
    assert!(!shows(
        &again,
        Some(&csinode("uid-1", &desired, true)),
        &desired,
        &none
    ));
    // The CSINode of an earlier Node of that name.
    let recreated = node("uid-2", Some(r#"{"csi.example.com":"n-1"}"#), Some("a"));
    assert!(!shows(
        &recreated,
        Some(&csinode("uid-1", &desired, true)),
        &desired,
        &none
    ));
    // No CSINode, or one without the migration annotation.
    assert!(!shows(&written, None, &desired, &none));
    assert!(!shows(
        &written,
        Some(&csinode("uid-1", &desired, false)),
        &desired,
        &none
    ));
    // A driver gone that is still there.
    let removed: BTreeSet<String> = ["csi.example.com".to_string()].into();
    assert!(!shows(
        &written,
        Some(&csinode("uid-1", &desired, true)),
        &CsiDrivers::new(),
        &removed
    ));
}

#[test]
fn a_driver_whose_topology_collides_is_not_expected_on_the_node() {
    let desired: CsiDrivers = [("csi.example.com".to_string(), entry("n-1", "a"))].into();
    let other_zone = node("uid-1", None, Some("b"));
    assert!(shows(
        &other_zone,
        Some(&csinode("uid-1", &CsiDrivers::new(), true)),
        &desired,
        &BTreeSet::new()
    ));
}

#[test]
fn an_annotation_that_is_not_a_map_is_an_error_naming_the_node() {
    let broken = node("uid-1", Some("not json"), None);
    let error = node_ids(&broken).unwrap_err().to_string();
    assert!(
        error.starts_with(
            r#"failed to parse node node-1's "csi.volume.kubernetes.io/nodeid" annotation value ("not json")"#
        ),
        "{error}"
    );
    assert!(!shows(&broken, None, &CsiDrivers::new(), &BTreeSet::new()));
}

#[test]
fn a_volume_limit_past_the_field_is_the_most_it_holds() {
    let mut big = entry("n-1", "a");
    big.max_volumes = i64::MAX;
    let driver = csinode_driver("csi.example.com", &big);
    assert_eq!(driver.allocatable.unwrap().count, Some(i32::MAX));
}
