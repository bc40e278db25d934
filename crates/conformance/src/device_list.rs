//! The device plugin's device list: ids, health, topology, and a
//! ListAndWatch stream that stays open.

use std::collections::BTreeSet;

use futures::FutureExt;
use nodeplugins_api::constants::device_plugin;
use nodeplugins_api::deviceplugin::v1beta1 as dp;

use super::rule::Verdict;

/// The device manager keys devices by id (`allDevices[resource][id]`), so
/// a repeated id is one device counted once, or twice when its entries'
/// health differs: the node's capacity is not what the plugin listed.
pub(crate) fn ids_rule(devices: &[dp::Device]) -> Verdict {
    let mut seen = BTreeSet::new();
    let repeated: BTreeSet<&str> = devices
        .iter()
        .filter(|d| !seen.insert(d.id.as_str()))
        .map(|d| d.id.as_str())
        .collect();
    let empty = devices.iter().filter(|d| d.id.is_empty()).count();
    if !repeated.is_empty() {
        Verdict::Fail(format!(
            "ids listed more than once: {repeated:?} ({} entries, {} devices on the node)",
            devices.len(),
            seen.len()
        ))
    } else if empty > 0 {
        Verdict::Fail(format!("{empty} devices without an id"))
    } else {
        Verdict::Pass(format!("{} distinct ids", devices.len()))
    }
}

/// Anything but `Healthy` is unhealthy to the device manager: a device
/// listed with another word is never allocatable.
pub(crate) fn health_rule(devices: &[dp::Device]) -> Verdict {
    let bad: Vec<String> = devices
        .iter()
        .filter(|d| d.health != device_plugin::HEALTHY && d.health != device_plugin::UNHEALTHY)
        .map(|d| format!("{}={:?}", d.id, d.health))
        .collect();
    if bad.is_empty() {
        Verdict::Pass("every health is Healthy or Unhealthy".to_string())
    } else {
        Verdict::Fail(format!(
            "other health values, which the kubelet counts unhealthy: {}",
            bad.join(", ")
        ))
    }
}

/// NUMA ids the node does not have (a negative one among them) drop out
/// of the topology manager's hints; under its default policy (`none`) the
/// pod is admitted anyway, so this is a WARN.
pub(crate) fn topology_rule(devices: &[dp::Device]) -> Verdict {
    let mut with = 0;
    for device in devices {
        let Some(topology) = &device.topology else {
            continue;
        };
        with += 1;
        let ids: Vec<i64> = topology.nodes.iter().map(|n| n.id).collect();
        let unique: BTreeSet<i64> = ids.iter().copied().collect();
        if ids.iter().any(|id| *id < 0) || unique.len() != ids.len() {
            return Verdict::Warn(format!(
                "device {:?} has NUMA nodes {ids:?}: ids must be non-negative and unique, or the topology manager drops them from its hints",
                device.id
            ));
        }
    }
    if with == 0 {
        Verdict::Pass("no device reports a topology".into())
    } else {
        Verdict::Pass(format!("{with} devices with well-formed NUMA nodes"))
    }
}

/// Whether the ListAndWatch stream is still open once every other rule
/// has run: updates already sent are read, an end already sent is seen.
/// The device manager marks every device of the resource unhealthy the
/// moment its last plugin's stream ends.
pub(crate) fn stays_open_rule(stream: &mut tonic::Streaming<dp::ListAndWatchResponse>) -> Verdict {
    let mut updates = 0;
    loop {
        match stream.message().now_or_never() {
            None => {
                return Verdict::Pass(format!(
                    "open after every other rule ({updates} updates since the first list)"
                ));
            }
            Some(Ok(Some(_))) => updates += 1,
            Some(Ok(None)) => {
                return Verdict::Fail(
                    "the stream ended: the kubelet marks every device unhealthy at once".into(),
                );
            }
            Some(Err(status)) => {
                return Verdict::Fail(format!(
                    "the stream failed ({:?}: {}): the kubelet marks every device unhealthy at once",
                    status.code(),
                    status.message()
                ));
            }
        }
    }
}
