//! What the node's plugins serve, as far as a waiting pod cares: each
//! device plugin resource's healthy devices and the DRA drivers calls can
//! go to. When either grows (a plugin registers, a device turns healthy, a
//! driver comes back), pods that wait or failed are tried again at once
//! rather than at their next retry.

use std::collections::{BTreeMap, BTreeSet};

use crate::device::DeviceSnapshot;
use crate::dra::Routes;

/// Healthy devices per resource and the drivers in use.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Served {
    devices: BTreeMap<String, usize>,
    drivers: BTreeSet<String>,
}

impl Served {
    /// What `devices` and `routes` serve.
    pub(crate) fn of(devices: &DeviceSnapshot, routes: &Routes) -> Self {
        let mut healthy: BTreeMap<String, usize> = BTreeMap::new();
        for device in devices.allocatable() {
            *healthy.entry(device.resource.clone()).or_default() += 1;
        }
        Self {
            devices: healthy,
            drivers: routes.keys().cloned().collect(),
        }
    }

    /// Takes `now` as what is served; says whether it serves something
    /// `self` did not (a resource with more healthy devices, a new driver).
    pub(crate) fn grew_to(&mut self, now: Self) -> bool {
        let more_devices = now
            .devices
            .iter()
            .any(|(resource, count)| self.devices.get(resource).is_none_or(|was| count > was));
        let new_driver = now.drivers.iter().any(|d| !self.drivers.contains(d));
        *self = now;
        more_devices || new_driver
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(devices: &[(&str, usize)], drivers: &[&str]) -> Served {
        Served {
            devices: devices.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
            drivers: drivers.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn a_new_resource_more_healthy_devices_or_a_new_driver_is_growth() {
        let mut now = Served::default();
        assert!(
            now.grew_to(served(&[("example.com/gpu", 1)], &[])),
            "a plugin registered"
        );
        assert!(
            now.grew_to(served(&[("example.com/gpu", 2)], &[])),
            "a device turned healthy"
        );
        assert!(
            !now.grew_to(served(&[("example.com/gpu", 1)], &[])),
            "one turned unhealthy"
        );
        assert!(
            !now.grew_to(served(&[("example.com/gpu", 1)], &[])),
            "no change"
        );
        assert!(
            now.grew_to(served(&[("example.com/gpu", 1)], &["dra.example.com"])),
            "a driver came"
        );
        assert!(!now.grew_to(served(&[], &[])), "everything went");
    }
}
