//! The node's part of attaching, for a volume whose driver needs it
//! attached (`attachRequired`, or no CSIDriver object): the kubelet never
//! attaches; the attach/detach controller does, for the Node annotated so
//! (the node status writer annotates it). The node says which attachable
//! volumes it uses (`status.volumesInUse`: those a pod wants, and those
//! staged on the node, found on disk after a restart), waits until its
//! Node shows the volume both in use and in `status.volumesAttached`
//! (`VerifyControllerAttachedVolume`), and reads the VolumeAttachment for
//! its `attachmentMetadata`, the publish context of the stage and publish
//! calls (`WaitForAttach`). A volume leaves the list once it is unstaged
//! and no pod wants it, and only then may the controller detach it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::kube_api::VolumesInUse;

/// How often the Node is looked at while a volume waits to be attached
/// (the kubelet's reconciler loop).
const ATTACH_POLL: Duration = Duration::from_millis(100);
/// How long one set-up waits for its volume to be attached before it
/// fails (and is tried again on the operation backoff, saying why).
const ATTACH_WAIT: Duration = Duration::from_secs(10);

/// The node's attachable volumes in use, and its Node as last seen.
pub(crate) struct Attachments {
    node_name: String,
    node: Store<Node>,
    said: VolumesInUse,
    state: Mutex<InUse>,
}

#[derive(Default)]
struct InUse {
    /// Per pod (its UID): the unique names of the attachable volumes it
    /// wants.
    wanted: HashMap<String, BTreeSet<String>>,
    /// The attachable volumes staged on the node (mounted as a device).
    mounted: BTreeSet<String>,
    /// Whether what is mounted is known (from disk, after a start).
    synced: bool,
}

impl InUse {
    fn names(&self) -> BTreeSet<String> {
        self.wanted
            .values()
            .flatten()
            .chain(&self.mounted)
            .cloned()
            .collect()
    }
}

impl Attachments {
    /// The attachments of node `node_name`, whose Node `node` shows,
    /// said through `said`.
    pub(crate) fn new(node_name: String, node: Store<Node>, said: VolumesInUse) -> Self {
        Self {
            node_name,
            node,
            said,
            state: Mutex::new(InUse::default()),
        }
    }

    fn change(&self, change: impl FnOnce(&mut InUse)) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut state);
        if state.synced {
            self.said.set(state.names());
        }
    }

    /// What is mounted is known: the attachable volumes found staged on
    /// disk (`found`, unique names). The list is said from now on.
    pub(crate) fn synced(&self, found: BTreeSet<String>) {
        self.change(|state| {
            state.mounted.extend(found);
            state.synced = true;
        });
    }

    /// Pod `pod_uid` wants the attachable volume `name`.
    pub(crate) fn want(&self, pod_uid: &str, name: &str) {
        self.change(|state| {
            state
                .wanted
                .entry(pod_uid.to_string())
                .or_default()
                .insert(name.to_string());
        });
    }

    /// Pod `pod_uid` is gone: it wants nothing any more.
    pub(crate) fn forget_pod(&self, pod_uid: &str) {
        self.change(|state| {
            state.wanted.remove(pod_uid);
        });
    }

    /// The attachable volume `name` is staged on the node, or no longer.
    pub(crate) fn mounted(&self, name: &str, mounted: bool) {
        self.change(|state| {
            if mounted {
                state.mounted.insert(name.to_string());
            } else {
                state.mounted.remove(name);
            }
        });
    }

    /// Waits until the Node shows the attachable volume `name` (of the pod's
    /// volume `spec_name`) in use and attached, up to [`ATTACH_WAIT`]; why
    /// not, as the kubelet says it.
    pub(crate) async fn wait_attached(&self, spec_name: &str, name: &str) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + ATTACH_WAIT;
        loop {
            let why = match self.node.get(&ObjectRef::new(&self.node_name)) {
                None => "node object retrieved from API server is nil".to_string(),
                Some(node) => match attach_state(&node, name) {
                    AttachState::Attached => return Ok(()),
                    AttachState::NotReported => {
                        "Volume has not been added to the list of VolumesInUse in the node's volume status"
                            .to_string()
                    }
                    AttachState::NotAttached => {
                        "Volume not attached according to node status".to_string()
                    }
                },
            };
            if tokio::time::Instant::now() + ATTACH_POLL > deadline {
                return Err(format!(
                    "VerifyControllerAttachedVolume failed for volume {spec_name:?} (UniqueName: {name:?}) : {why}"
                ));
            }
            tokio::time::sleep(ATTACH_POLL).await;
        }
    }

    /// The publish context of volume `handle` of `driver`: its
    /// VolumeAttachment's `attachmentMetadata`, once it is attached.
    pub(crate) async fn publish_context(
        &self,
        client: kube::Client,
        driver: &str,
        handle: &str,
    ) -> Result<BTreeMap<String, String>, String> {
        let id = super::names::attachment_id(handle, driver, &self.node_name);
        let attachments: Api<VolumeAttachment> = Api::all(client);
        let found = attachments.get(&id).await.map_err(|e| {
            format!("volume {handle} has GET error for volume attachment {id}: {e}")
        })?;
        attached_context(&found, handle, &id)
    }
}

/// How far the Node shows a volume along.
#[derive(Debug, PartialEq, Eq)]
enum AttachState {
    NotReported,
    NotAttached,
    Attached,
}

fn attach_state(node: &Node, name: &str) -> AttachState {
    let status = node.status.as_ref();
    let reported = status
        .and_then(|s| s.volumes_in_use.as_ref())
        .is_some_and(|names| names.iter().any(|n| n == name));
    if !reported {
        return AttachState::NotReported;
    }
    let attached = status
        .and_then(|s| s.volumes_attached.as_ref())
        .is_some_and(|list| list.iter().any(|a| a.name == name));
    if attached {
        AttachState::Attached
    } else {
        AttachState::NotAttached
    }
}

/// The attachment metadata of `attachment` (named `id`) of volume
/// `handle`, when it is attached (`verifyAttachmentStatus`).
fn attached_context(
    attachment: &VolumeAttachment,
    handle: &str,
    id: &str,
) -> Result<BTreeMap<String, String>, String> {
    if attachment.metadata.deletion_timestamp.is_some() {
        return Err(format!("volume attachment {id} is being deleted"));
    }
    let status = attachment.status.as_ref();
    if status.is_some_and(|s| s.attached) {
        return Ok(status
            .and_then(|s| s.attachment_metadata.clone())
            .unwrap_or_default());
    }
    match status.and_then(|s| s.attach_error.as_ref()) {
        Some(error) => Err(format!(
            "attachment for {handle} failed: {}",
            error.message.as_deref().unwrap_or_default()
        )),
        None => Err(format!("volume {handle} is not attached: {id}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NAME: &str = "kubernetes.io/csi/csi.example.com^vol-1";

    fn node(status: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "node-1"}, "status": status}))
            .unwrap_or_default()
    }

    #[test]
    fn a_volume_is_attached_only_once_reported_in_use_and_listed_attached() {
        assert_eq!(
            attach_state(&node(json!({})), NAME),
            AttachState::NotReported
        );
        let attached_only = node(json!({"volumesAttached": [{"name": NAME, "devicePath": ""}]}));
        assert_eq!(attach_state(&attached_only, NAME), AttachState::NotReported);
        let in_use = node(json!({"volumesInUse": [NAME]}));
        assert_eq!(attach_state(&in_use, NAME), AttachState::NotAttached);
        let both = node(json!({"volumesInUse": [NAME],
            "volumesAttached": [{"name": NAME, "devicePath": ""}]}));
        assert_eq!(attach_state(&both, NAME), AttachState::Attached);
    }

    fn attachment(value: serde_json::Value) -> VolumeAttachment {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_attachment_gives_its_metadata_once_attached_and_says_why_not() {
        let spec = json!({"attacher": "csi.example.com", "nodeName": "node-1",
            "source": {"persistentVolumeName": "pv-1"}});
        let attached = attachment(json!({"metadata": {"name": "csi-x"}, "spec": spec,
            "status": {"attached": true, "attachmentMetadata": {"devicePath": "/dev/x"}}}));
        assert_eq!(
            attached_context(&attached, "vol-1", "csi-x"),
            Ok([("devicePath".to_string(), "/dev/x".to_string())].into())
        );
        let pending = attachment(json!({"metadata": {"name": "csi-x"}, "spec": spec}));
        assert!(
            attached_context(&pending, "vol-1", "csi-x")
                .unwrap_err()
                .contains("is not attached")
        );
        let failed = attachment(json!({"metadata": {"name": "csi-x"}, "spec": spec,
            "status": {"attached": false, "attachError": {"message": "no such disk"}}}));
        assert!(
            attached_context(&failed, "vol-1", "csi-x")
                .unwrap_err()
                .contains("no such disk")
        );
        let deleted = attachment(json!({"metadata": {"name": "csi-x",
            "deletionTimestamp": "2026-12-02T00:00:00Z"}, "spec": spec,
            "status": {"attached": true}}));
        assert!(
            attached_context(&deleted, "vol-1", "csi-x")
                .unwrap_err()
                .contains("being deleted")
        );
    }

    #[test]
    fn the_list_is_said_once_synced_and_holds_what_pods_want_and_what_is_staged() {
        let said = VolumesInUse::new();
        let watching = said.subscribe();
        let (node, _writer) = kube::runtime::reflector::store::<Node>();
        let attachments = Attachments::new("node-1".into(), node, said);
        attachments.want("pod-a", NAME);
        assert_eq!(*watching.borrow(), None, "nothing said before the sync");
        attachments.synced(["kubernetes.io/csi/csi.example.com^old".to_string()].into());
        let names = |w: &tokio::sync::watch::Receiver<Option<BTreeSet<String>>>| {
            w.borrow()
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(&watching),
            ["kubernetes.io/csi/csi.example.com^old", NAME]
        );
        attachments.mounted(NAME, true);
        attachments.forget_pod("pod-a");
        assert!(names(&watching).contains(&NAME.to_string()), "still staged");
        attachments.mounted(NAME, false);
        attachments.mounted("kubernetes.io/csi/csi.example.com^old", false);
        assert!(names(&watching).is_empty());
    }
}
