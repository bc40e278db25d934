//! The device list a plugin reports, shared between the author and
//! ListAndWatch.

use std::sync::Arc;

use nodeplugins_api::constants::device_plugin::{HEALTHY, UNHEALTHY};
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use tokio::sync::watch;

/// The device list the plugin reports; every change goes out on ListAndWatch.
#[derive(Clone)]
pub struct Devices {
    tx: Arc<watch::Sender<Vec<dp::Device>>>,
}

impl Devices {
    /// A list starting with `devices`.
    pub fn new(devices: Vec<dp::Device>) -> Self {
        Self {
            tx: Arc::new(watch::channel(devices).0),
        }
    }

    /// Replaces the whole list.
    pub fn set(&self, devices: Vec<dp::Device>) {
        self.tx.send_replace(devices);
    }

    /// Marks device `id` healthy or not; returns whether it exists.
    pub fn set_health(&self, id: &str, healthy: bool) -> bool {
        let mut found = false;
        self.tx.send_if_modified(|list| {
            for device in list.iter_mut().filter(|d| d.id == id) {
                found = true;
                let health = if healthy { HEALTHY } else { UNHEALTHY };
                if device.health != health {
                    device.health = health.into();
                    return true;
                }
            }
            false
        });
        found
    }

    /// The current list.
    pub fn get(&self) -> Vec<dp::Device> {
        self.tx.borrow().clone()
    }

    /// The current list without copying it; held only briefly, as it
    /// holds up every change.
    pub(crate) fn borrow(&self) -> watch::Ref<'_, Vec<dp::Device>> {
        self.tx.borrow()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Vec<dp::Device>> {
        self.tx.subscribe()
    }
}
