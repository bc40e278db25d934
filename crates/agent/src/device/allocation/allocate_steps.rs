//! What the steps of an allocation hand each other and what the state
//! keeps of one in progress: the plan, the choices to reserve, and the
//! reservation (see [`crate::device::allocation::allocate`], where the steps are).

use std::collections::BTreeMap;

use crate::device::allocation::container_allocation::ContainerAllocation;
use crate::device::registration::plugin_client::PluginClient;

/// What step 1 decided for one resource.
pub(crate) enum Planned {
    /// The container already holds these devices.
    Held(ContainerAllocation),
    /// Devices must be chosen and allocated.
    Needed {
        resource: String,
        count: usize,
        /// Devices of earlier init containers given again, first.
        reused: Vec<String>,
        /// Every free healthy device, aligned choice first.
        order: Vec<String>,
        /// The primary instance.
        plugin: PluginClient,
    },
}

/// Identifies an allocation in progress.
pub(crate) type ReservationId = u64;

/// Devices reserved for one resource, with the NUMA nodes each is attached
/// to (devices without topology are left out).
pub(crate) struct Chosen {
    pub(crate) devices: Vec<String>,
    pub(crate) numa: BTreeMap<String, Vec<i64>>,
}

/// A reservation and the devices it holds, per chosen resource in order.
pub(crate) type ReservedChoices = (ReservationId, Vec<Chosen>);

/// Devices chosen for one resource, to reserve.
pub(crate) struct Choice {
    pub(crate) resource: String,
    pub(crate) devices: Vec<String>,
    /// Those of `devices` given again from an earlier init container:
    /// held already, so not reserved.
    pub(crate) reused: Vec<String>,
}

/// Devices of one resource held by an allocation in progress.
pub(crate) struct Reserved {
    pub(crate) resource: String,
    pub(crate) devices: Vec<String>,
}
