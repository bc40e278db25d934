//! Choosing devices for a request: NUMA-aligned where possible.
//!
//! Without a topology manager to supply an affinity hint, alignment means:
//! take all devices from one NUMA node when one node can satisfy the request
//! (the node with the fewest free devices that still suffices, to keep
//! larger nodes whole for larger requests); otherwise fill from the nodes
//! with the most free devices first; devices without topology come last.

use std::collections::BTreeMap;

/// A free device and the NUMA nodes it is attached to (empty: no topology).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) id: String,
    pub(crate) numa: Vec<i64>,
}

/// The NUMA node a device counts under; -1 for none (upstream's `nodeWithoutTopology`).
pub(crate) fn numa_key(numa: &[i64]) -> i64 {
    numa.first().copied().unwrap_or(-1)
}

/// Orders `free` so that the first `count` entries are the aligned choice.
pub(crate) fn aligned_order(free: &[Candidate], count: usize) -> Vec<String> {
    let mut by_node: BTreeMap<i64, Vec<&Candidate>> = BTreeMap::new();
    for c in free {
        by_node.entry(numa_key(&c.numa)).or_default().push(c);
    }
    let single = by_node
        .iter()
        .filter(|(node, devices)| **node >= 0 && devices.len() >= count)
        .min_by_key(|(node, devices)| (devices.len(), **node))
        .map(|(node, _)| *node);
    let mut nodes: Vec<(i64, &Vec<&Candidate>)> = by_node.iter().map(|(n, d)| (*n, d)).collect();
    nodes.sort_by_key(|(node, devices)| {
        let first = Some(*node) == single;
        (!first, *node < 0, std::cmp::Reverse(devices.len()), *node)
    });
    nodes
        .into_iter()
        .flat_map(|(_, devices)| devices.iter().map(|c| c.id.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, numa: &[i64]) -> Candidate {
        Candidate {
            id: id.into(),
            numa: numa.to_vec(),
        }
    }

    #[test]
    fn fits_on_one_node_when_it_can() {
        let free = [
            c("a0", &[0]),
            c("b1", &[1]),
            c("c1", &[1]),
            c("d0", &[0]),
            c("e0", &[0]),
        ];
        assert_eq!(
            &aligned_order(&free, 2)[..2],
            ["b1", "c1"],
            "smallest node that suffices"
        );
        let three = aligned_order(&free, 3);
        assert!(three[..3].iter().all(|id| id.ends_with('0')), "{three:?}");
    }

    #[test]
    fn spans_nodes_largest_first_and_devices_without_topology_last() {
        let free = [c("x", &[]), c("a0", &[0]), c("b1", &[1]), c("c1", &[1])];
        assert_eq!(aligned_order(&free, 4), ["b1", "c1", "a0", "x"]);
    }
}
