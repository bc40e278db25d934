//! The volumes the node's pods use, as the volume manager says them and
//! the Node's `status.volumesInUse` shows them (the kubelet's
//! `GetVolumesInUse`): the unique names of the attachable volumes a pod
//! wants or the node has mounted, sorted. The attach/detach controller
//! detaches a volume only once it has left this list. Nothing is said
//! (`None`) until the volume manager knows what is mounted, from disk
//! after a restart: until then the list the Node shows is left alone, as
//! the kubelet leaves it until its reconciler has synced.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::watch;

/// Where the volume manager says the volumes in use, and the node status
/// writer reads them. Cheap to clone.
#[derive(Clone)]
pub(crate) struct VolumesInUse {
    sender: Arc<watch::Sender<Option<BTreeSet<String>>>>,
}

impl VolumesInUse {
    /// Nothing said yet.
    pub(crate) fn new() -> Self {
        Self {
            sender: Arc::new(watch::channel(None).0),
        }
    }

    /// Says the volumes in use are `names` (a change only if they differ).
    pub(crate) fn set(&self, names: BTreeSet<String>) {
        self.sender.send_if_modified(|said| {
            if said.as_ref() == Some(&names) {
                return false;
            }
            *said = Some(names);
            true
        });
    }

    /// What is said now and each change after.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<BTreeSet<String>>> {
        self.sender.subscribe()
    }
}
