//! CDI for a device plugin: one spec file of the plugin's kind
//! (`<dir>/<vendor>-<class>.json`) naming each listed device that has
//! container edits, written before the plugin serves and again whenever
//! the device list changes; each Allocate answer then names the CDI
//! devices of the ids it was given (`<vendor>/<class>=<id>`), which the
//! kubelet hands to the container runtime.
//!
//! The spec stays when the plugin stops: containers started with its
//! devices keep running, and the kubelet starts them again after a reboot
//! from its checkpoint without calling Allocate, while the plugin, started
//! again, writes the spec again first.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nodeplugins_api::deviceplugin::v1beta1 as dp;
use tokio_util::sync::CancellationToken;

use super::devices::Devices;
use super::service::DevicePluginService;
use crate::cdi::{ContainerEdits, is_device_name, write_spec};

/// The plugin's CDI spec file and kind.
#[derive(Debug, Clone)]
pub(super) struct DeviceCdi {
    kind: String,
    path: PathBuf,
}

impl DeviceCdi {
    /// Specs of kind `kind` (`vendor/class`) in `dir`.
    pub(super) fn new(dir: &Path, kind: &str) -> Self {
        Self {
            kind: kind.to_string(),
            path: dir.join(format!("{}.json", kind.replace('/', "-"))),
        }
    }

    /// The spec file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the spec of `devices`: each whose id is a CDI device name and
    /// for which `service` has container edits.
    pub(super) fn write(
        &self,
        service: &dyn DevicePluginService,
        devices: &[dp::Device],
    ) -> std::io::Result<()> {
        let edits: Vec<(String, ContainerEdits)> = devices
            .iter()
            .filter_map(|device| {
                if !is_device_name(&device.id) {
                    tracing::warn!(device = %device.id, spec = %self.path.display(), "not a CDI device name: left out of the CDI spec");
                    return None;
                }
                service
                    .container_edits(&device.id)
                    .map(|edits| (device.id.clone(), edits))
            })
            .collect();
        let named: Vec<(String, &ContainerEdits)> =
            edits.iter().map(|(id, e)| (id.clone(), e)).collect();
        write_spec(&self.path, &self.kind, &named)
    }

    /// Adds to a container's answer the CDI device of each of `ids` that
    /// the spec names, unless the plugin named it already.
    pub(super) fn name_devices(
        &self,
        service: &dyn DevicePluginService,
        ids: &[String],
        response: &mut dp::ContainerAllocateResponse,
    ) {
        for id in ids {
            if !is_device_name(id) || service.container_edits(id).is_none() {
                continue;
            }
            let name = format!("{}={id}", self.kind);
            if response.cdi_devices.iter().all(|d| d.name != name) {
                response.cdi_devices.push(dp::CdiDevice { name });
            }
        }
    }
}

/// Writes the spec again after every change of `devices`, until
/// `shutdown`; a failed write is logged and tried again at the next change.
pub(super) async fn keep_written(
    cdi: DeviceCdi,
    service: Arc<dyn DevicePluginService>,
    devices: Devices,
    shutdown: CancellationToken,
) {
    let mut changes = devices.subscribe();
    changes.borrow_and_update();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        let list = changes.borrow_and_update().clone();
        if let Err(e) = cdi.write(service.as_ref(), &list) {
            tracing::warn!(error = %e, spec = %cdi.path.display(), "cannot write the CDI spec; trying again at the next device change");
        }
    }
}
