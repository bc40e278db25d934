//! A pool of devices as the driver publishes it: its slices, the nodes it
//! serves, and the API's limits (v1.37's ResourceSlice validation), which a
//! pool is split at and checked against before anything is sent.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{CounterSet, Device, DeviceAttribute};

/// The most devices a ResourceSlice may hold (`ResourceSliceMaxDevices`).
pub const MAX_DEVICES_PER_SLICE: usize = 128;
/// The most devices a ResourceSlice may hold when one of them has taints,
/// consumes counters or has a list-valued attribute
/// (`ResourceSliceMaxDevicesWithAdvancedFeatures`).
pub const MAX_DEVICES_PER_SLICE_WITH_ADVANCED_FEATURES: usize = 64;
/// The most counter sets a ResourceSlice may hold
/// (`ResourceSliceMaxCounterSets`). A slice holds devices or counter sets,
/// never both.
pub const MAX_COUNTER_SETS_PER_SLICE: usize = 8;

/// One ResourceSlice of a pool: devices, or shared counter sets (the API
/// refuses a slice with both).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slice {
    /// Its devices.
    pub devices: Vec<Device>,
    /// Its counter sets, which devices anywhere in the pool may consume.
    pub shared_counters: Vec<CounterSet>,
}

impl Slice {
    /// A slice of `devices`.
    pub fn devices(devices: Vec<Device>) -> Self {
        Self {
            devices,
            shared_counters: Vec::new(),
        }
    }

    /// A slice of counter sets.
    pub fn counters(shared_counters: Vec<CounterSet>) -> Self {
        Self {
            devices: Vec::new(),
            shared_counters,
        }
    }
}

/// Which nodes a pool's devices are available on.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum NodeSelection {
    /// This node only (`spec.nodeName`): the usual node-local pool, which
    /// the node's own identity may publish.
    #[default]
    ThisNode,
    /// The nodes this selector picks (`spec.nodeSelector`, one term).
    NodeSelector(NodeSelector),
    /// Every node (`spec.allNodes`).
    AllNodes,
    /// Each device says (`spec.perDeviceNodeSelection`): every device sets
    /// exactly one of `nodeName`, `nodeSelector` and `allNodes`.
    PerDevice,
}

/// The devices of one pool, in one or more slices.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// Its slices, in order: a slice's index is part of its name, and the
    /// scheduler tries pools' slices in name order.
    pub slices: Vec<Slice>,
    /// Which nodes it serves. A pool for other nodes than this one has no
    /// `spec.nodeName`, which only an identity with RBAC for ResourceSlices
    /// may write (the node's own is refused), and is watched with a
    /// cluster-wide `spec.driver` selector.
    pub node_selection: NodeSelection,
    /// A generation the driver asks for; the publisher uses it when it is
    /// above the pool's current one, and otherwise manages it (0).
    pub generation: i64,
}

impl Pool {
    /// A pool of `devices` on this node, split into as many slices as the
    /// API's limits need, in order.
    pub fn new(devices: Vec<Device>) -> Self {
        Self::from_slices(
            split_devices(devices)
                .into_iter()
                .map(Slice::devices)
                .collect(),
        )
    }

    /// A pool of `devices` consuming `counter_sets`: the counter sets in
    /// slices of their own first (at most eight a slice), then the
    /// devices, split at the API's limits.
    pub fn with_counters(counter_sets: Vec<CounterSet>, devices: Vec<Device>) -> Self {
        let mut slices: Vec<Slice> = counter_sets
            .chunks(MAX_COUNTER_SETS_PER_SLICE)
            .map(|sets| Slice::counters(sets.to_vec()))
            .collect();
        slices.extend(split_devices(devices).into_iter().map(Slice::devices));
        Self::from_slices(slices)
    }

    /// A pool of exactly these slices.
    pub fn from_slices(slices: Vec<Slice>) -> Self {
        Self {
            slices,
            node_selection: NodeSelection::ThisNode,
            generation: 0,
        }
    }

    /// The same pool for other nodes; see [`NodeSelection`].
    pub fn node_selection(mut self, selection: NodeSelection) -> Self {
        self.node_selection = selection;
        self
    }

    /// The same pool with a generation the driver chooses.
    pub fn generation(mut self, generation: i64) -> Self {
        self.generation = generation;
        self
    }

    /// Whether the API would refuse it, as far as can be told without
    /// asking: the limits per slice, names unique in the pool, counters
    /// that exist, node selection per device only when the pool says so.
    pub fn validate(&self) -> Result<(), InvalidPool> {
        if self.slices.is_empty() {
            return Err(InvalidPool::NoSlices);
        }
        let mut devices = BTreeSet::new();
        let mut counter_sets = BTreeSet::new();
        for (index, slice) in self.slices.iter().enumerate() {
            if !slice.devices.is_empty() && !slice.shared_counters.is_empty() {
                return Err(InvalidPool::DevicesAndCounters { slice: index });
            }
            let limit = device_limit(&slice.devices);
            if slice.devices.len() > limit {
                return Err(InvalidPool::TooManyDevices {
                    slice: index,
                    devices: slice.devices.len(),
                    limit,
                });
            }
            if slice.shared_counters.len() > MAX_COUNTER_SETS_PER_SLICE {
                return Err(InvalidPool::TooManyCounterSets {
                    slice: index,
                    sets: slice.shared_counters.len(),
                });
            }
            for set in &slice.shared_counters {
                if !counter_sets.insert(set.name.as_str()) {
                    return Err(InvalidPool::DuplicateCounterSet(set.name.clone()));
                }
            }
            for device in &slice.devices {
                if !devices.insert(device.name.as_str()) {
                    return Err(InvalidPool::DuplicateDevice(device.name.clone()));
                }
                let selections = [
                    device.node_name.is_some(),
                    device.node_selector.is_some(),
                    device.all_nodes == Some(true),
                ]
                .into_iter()
                .filter(|set| *set)
                .count();
                let per_device = self.node_selection == NodeSelection::PerDevice;
                if per_device && selections != 1 || !per_device && selections != 0 {
                    return Err(InvalidPool::DeviceNodeSelection {
                        device: device.name.clone(),
                        per_device,
                    });
                }
            }
        }
        for device in self.slices.iter().flat_map(|s| &s.devices) {
            for consumption in device.consumes_counters.iter().flatten() {
                let Some(set) = self
                    .slices
                    .iter()
                    .flat_map(|s| &s.shared_counters)
                    .find(|s| s.name == consumption.counter_set)
                else {
                    return Err(InvalidPool::UnknownCounterSet {
                        device: device.name.clone(),
                        set: consumption.counter_set.clone(),
                    });
                };
                if let Some(counter) = consumption
                    .counters
                    .keys()
                    .find(|c| !set.counters.contains_key(*c))
                {
                    return Err(InvalidPool::UnknownCounter {
                        device: device.name.clone(),
                        set: set.name.clone(),
                        counter: counter.clone(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Why the API would refuse a pool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidPool {
    /// A pool needs a slice.
    #[error("a pool needs at least one slice")]
    NoSlices,
    /// A slice with both devices and counter sets.
    #[error("slice {slice} has both devices and shared counters; the API allows one of them")]
    DevicesAndCounters {
        /// The slice's index.
        slice: usize,
    },
    /// More devices in a slice than the API takes.
    #[error("slice {slice} has {devices} devices; the API takes at most {limit} in a slice")]
    TooManyDevices {
        /// The slice's index.
        slice: usize,
        /// How many it has.
        devices: usize,
        /// How many the API takes in that slice.
        limit: usize,
    },
    /// More counter sets in a slice than the API takes.
    #[error(
        "slice {slice} has {sets} counter sets; the API takes at most {MAX_COUNTER_SETS_PER_SLICE}"
    )]
    TooManyCounterSets {
        /// The slice's index.
        slice: usize,
        /// How many it has.
        sets: usize,
    },
    /// Two devices of the pool have one name.
    #[error("device {0:?} appears twice in the pool")]
    DuplicateDevice(String),
    /// Two counter sets of the pool have one name.
    #[error("counter set {0:?} appears twice in the pool")]
    DuplicateCounterSet(String),
    /// A device consumes a counter set the pool does not have.
    #[error("device {device:?} consumes counter set {set:?}, which the pool does not have")]
    UnknownCounterSet {
        /// The device.
        device: String,
        /// The counter set it names.
        set: String,
    },
    /// A device consumes a counter its counter set does not have.
    #[error(
        "device {device:?} consumes counter {counter:?}, which counter set {set:?} does not have"
    )]
    UnknownCounter {
        /// The device.
        device: String,
        /// The counter set.
        set: String,
        /// The counter it names.
        counter: String,
    },
    /// A device's node selection does not fit the pool's.
    #[error(
        "device {device:?}: {}",
        if *per_device {
            "with per-device node selection each device sets exactly one of nodeName, nodeSelector and allNodes"
        } else {
            "a device sets nodeName, nodeSelector or allNodes only in a pool with per-device node selection"
        }
    )]
    DeviceNodeSelection {
        /// The device.
        device: String,
        /// Whether the pool has per-device node selection.
        per_device: bool,
    },
}

/// Whether `device` uses a feature that lowers the limit of devices in its
/// slice: taints, counter consumption, or a list-valued attribute.
fn advanced(device: &Device) -> bool {
    device.taints.as_ref().is_some_and(|t| !t.is_empty())
        || device
            .consumes_counters
            .as_ref()
            .is_some_and(|c| !c.is_empty())
        || device
            .attributes
            .iter()
            .flatten()
            .any(|(_, a)| list_valued(a))
}

// The application picks the Kubernetes version; list-valued attributes came
// in 1.36.
k8s_openapi::k8s_if_ge_1_36! {
    /// Whether an attribute holds a list.
    fn list_valued(a: &DeviceAttribute) -> bool {
        a.bools.is_some() || a.ints.is_some() || a.strings.is_some() || a.versions.is_some()
    }
}
k8s_openapi::k8s_if_le_1_35! {
    /// None does before Kubernetes 1.36.
    fn list_valued(_: &DeviceAttribute) -> bool {
        false
    }
}

/// How many devices a slice of `devices` may hold.
fn device_limit(devices: &[Device]) -> usize {
    if devices.iter().any(advanced) {
        MAX_DEVICES_PER_SLICE_WITH_ADVANCED_FEATURES
    } else {
        MAX_DEVICES_PER_SLICE
    }
}

/// `devices` in order, in as few slices as the API's limits allow (one,
/// possibly empty, for none).
pub fn split_devices(devices: Vec<Device>) -> Vec<Vec<Device>> {
    let mut slices: Vec<Vec<Device>> = vec![Vec::new()];
    let mut advanced_in_last = false;
    for device in devices {
        let is_advanced = advanced(&device);
        let last = slices.len() - 1;
        let limit = if advanced_in_last || is_advanced {
            MAX_DEVICES_PER_SLICE_WITH_ADVANCED_FEATURES
        } else {
            MAX_DEVICES_PER_SLICE
        };
        if slices[last].len() + 1 > limit {
            slices.push(Vec::new());
            advanced_in_last = false;
        }
        advanced_in_last |= is_advanced;
        let last = slices.len() - 1;
        slices[last].push(device);
    }
    slices
}

#[cfg(test)]
mod tests;
