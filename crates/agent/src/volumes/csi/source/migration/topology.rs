//! A migrated PersistentVolume's node affinity, moved from the in-tree
//! zone and region keys to its CSI driver's, as the kubelet's translation
//! moves it: the zone requirements renamed to the driver's key (or, when
//! the affinity names no zone, the volume's zone label turned into one),
//! the beta region key renamed to the GA one. The node affinity is then
//! checked against the node's labels as the kubelet checks it, on the
//! translated volume.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, VolumeNodeAffinity,
};

/// The GA zone label.
pub(crate) const ZONE: &str = "topology.kubernetes.io/zone";
/// The GA region label.
pub(crate) const REGION: &str = "topology.kubernetes.io/region";
/// The beta zone label.
pub(crate) const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// The beta region label.
pub(crate) const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
/// What separates the zones of a label naming several.
pub(crate) const MULTI_ZONE_DELIMITER: &str = "__";

/// The affinity's terms, if it has any.
fn terms(pv: &PersistentVolume) -> Option<&Vec<NodeSelectorTerm>> {
    pv.spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()
        .map(|r| &r.node_selector_terms)
        .filter(|t| !t.is_empty())
}

/// Whether some requirement of the affinity is on `key`.
fn has_key(pv: &PersistentVolume, key: &str) -> bool {
    terms(pv).is_some_and(|terms| {
        terms
            .iter()
            .flat_map(|t| t.match_expressions.iter().flatten())
            .any(|r| r.key == key)
    })
}

/// The zone and region keys the volume uses: those its affinity names,
/// else those its labels have, else the GA ones.
pub(crate) fn labels_used(pv: &PersistentVolume) -> (&'static str, &'static str) {
    let labelled = |key: &str| {
        pv.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(key))
    };
    if has_key(pv, ZONE) {
        (ZONE, REGION)
    } else if has_key(pv, BETA_ZONE) {
        (BETA_ZONE, BETA_REGION)
    } else if labelled(ZONE) {
        (ZONE, REGION)
    } else if labelled(BETA_ZONE) {
        (BETA_ZONE, BETA_REGION)
    } else {
        (ZONE, REGION)
    }
}

/// Every value the affinity's requirements on `key` allow, sorted, once.
pub(crate) fn values(pv: &PersistentVolume, key: &str) -> Vec<String> {
    let Some(terms) = terms(pv) else {
        return Vec::new();
    };
    terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .filter(|r| r.key == key)
        .flat_map(|r| r.values.iter().flatten().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The requirements on `old` renamed to `new`.
pub(crate) fn rename(pv: &mut PersistentVolume, old: &str, new: &str) {
    let Some(required) = pv
        .spec
        .as_mut()
        .and_then(|s| s.node_affinity.as_mut())
        .and_then(|a| a.required.as_mut())
    else {
        return;
    };
    for term in &mut required.node_selector_terms {
        for requirement in term.match_expressions.iter_mut().flatten() {
            if requirement.key == old {
                requirement.key = new.to_string();
            }
        }
    }
}

/// A requirement that `key` be one of `zones` (trimmed, the empty ones
/// left out) added to every term, a term made when there is none. Nothing
/// is added when no zone is left.
pub(crate) fn add(pv: &mut PersistentVolume, key: &str, zones: &[&str]) {
    let zones: BTreeSet<String> = zones
        .iter()
        .map(|z| z.trim())
        .filter(|z| !z.is_empty())
        .map(str::to_string)
        .collect();
    if zones.is_empty() {
        return;
    }
    let spec = pv.spec.get_or_insert_with(Default::default);
    let required = spec
        .node_affinity
        .get_or_insert_with(VolumeNodeAffinity::default)
        .required
        .get_or_insert_with(NodeSelector::default);
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_expressions
            .get_or_insert_with(Vec::new)
            .push(NodeSelectorRequirement {
                key: key.to_string(),
                operator: "In".to_string(),
                values: Some(zones.iter().cloned().collect()),
            });
    }
}

/// The volume's label `key`, if it has it.
pub(crate) fn label<'a>(pv: &'a PersistentVolume, key: &str) -> Option<&'a str> {
    pv.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The zone topology moved to `zone_key`, and a beta region to the GA one
/// (`translateTopologyFromInTreeToCSI`).
pub(crate) fn to_csi(pv: &mut PersistentVolume, zone_key: &str) {
    let (zone, region) = labels_used(pv);
    if !values(pv, zone).is_empty() {
        rename(pv, zone, zone_key);
    } else if let Some(zones) = label(pv, zone).map(str::to_string) {
        let zones: Vec<&str> = zones.split(MULTI_ZONE_DELIMITER).collect();
        add(pv, zone_key, &zones);
    }
    if region == BETA_REGION && !values(pv, region).is_empty() {
        rename(pv, region, REGION);
    }
}

/// vSphere's: the zone and the region each moved to a key of the driver,
/// or the volume's label of each (whole) made a requirement on it.
pub(crate) fn to_csi_zone_and_region(pv: &mut PersistentVolume, zone_key: &str, region_key: &str) {
    let (zone, region) = labels_used(pv);
    for (from, to) in [(zone, zone_key), (region, region_key)] {
        if !values(pv, from).is_empty() {
            rename(pv, from, to);
        } else if let Some(value) = label(pv, from).map(str::to_string) {
            add(pv, to, &[value.as_str()]);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pv(value: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(value).unwrap()
    }

    fn affinity(pv: &PersistentVolume) -> serde_json::Value {
        serde_json::to_value(pv.spec.as_ref().unwrap().node_affinity.as_ref()).unwrap()
    }

    #[test]
    fn the_zone_in_the_affinity_is_renamed_and_a_beta_region_made_ga() {
        let mut volume = pv(serde_json::json!({
            "metadata": {"name": "pv"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": BETA_ZONE, "operator": "In", "values": ["us-east-1a"]},
                {"key": BETA_REGION, "operator": "In", "values": ["us-east-1"]},
            ]}]}}},
        }));
        to_csi(&mut volume, "topology.ebs.csi.aws.com/zone");
        assert_eq!(
            affinity(&volume),
            serde_json::json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1a"]},
                {"key": REGION, "operator": "In", "values": ["us-east-1"]},
            ]}]}})
        );
    }

    #[test]
    fn a_zone_label_becomes_a_requirement_on_every_term() {
        let mut volume = pv(serde_json::json!({
            "metadata": {"name": "pv", "labels": {ZONE: "b__a__ "}},
            "spec": {},
        }));
        to_csi(&mut volume, "topology.gke.io/zone");
        assert_eq!(
            affinity(&volume),
            serde_json::json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.gke.io/zone", "operator": "In", "values": ["a", "b"]},
            ]}]}})
        );
    }

    #[test]
    fn vsphere_moves_both_keys_and_takes_each_label_whole() {
        let mut volume = pv(serde_json::json!({
            "metadata": {"name": "pv", "labels": {ZONE: "z1", REGION: "r1"}},
            "spec": {},
        }));
        to_csi_zone_and_region(
            &mut volume,
            "topology.csi.vmware.com/zone",
            "topology.csi.vmware.com/region",
        );
        assert_eq!(
            affinity(&volume),
            serde_json::json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.csi.vmware.com/zone", "operator": "In", "values": ["z1"]},
                {"key": "topology.csi.vmware.com/region", "operator": "In", "values": ["r1"]},
            ]}]}})
        );
    }
}
