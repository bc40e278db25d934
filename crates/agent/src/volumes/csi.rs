//! CSI volumes, as the kubelet's CSI plugin sets them up: an inline
//! (ephemeral) volume published straight into the pod, a persistent one
//! (a pod's claim, bound to a PersistentVolume of a CSI driver) staged
//! once on the node and then published into each pod that mounts it; torn
//! down in reverse (unpublished from each pod, unstaged after its last
//! pod). Each step is the kubelet's calls in the kubelet's order, its
//! `NodeGetCapabilities` calls included, each through the call layer
//! (deadline, span), on a connection of its own; what the kubelet writes
//! on disk (`vol_data.json`, the staging directory) is written the same,
//! so that a restart (or a move from the kubelet) finds from disk what is
//! staged and published, and publishes nothing again that still is. A
//! persistent volume whose driver needs it attached is waited for until
//! the attach/detach controller has attached it, as the kubelet waits,
//! and one whose claim was grown is grown on the node as the kubelet's
//! node expander grows it.
//!
//! | file | what it holds |
//! |---|---|
//! | `source.rs` | what a pod's CSI volume is: inline, or its claim's PersistentVolume, checked (`source/`: the in-tree kinds' translation, node affinity) |
//! | `driver_objects.rs` | the cluster's CSIDriver objects, and what each asks of the node |
//! | `attach.rs` | the node's part of attaching: the volumes in use, the wait for the Node to show them attached, the VolumeAttachment's metadata |
//! | `calls.rs` | the driver's node calls and their capabilities |
//! | `operations.rs` | every node call's duration, the kubelet's `csi_operations_seconds` |
//! | `requests.rs` | each call's request, filled as the kubelet fills it |
//! | `names.rs` | the names the kubelet derives: handles, attachment IDs, the staging path |
//! | `vol_data.rs` | `vol_data.json`, what is set up written beside it |
//! | `plugin.rs` | the door: a volume checked, staged and published, one lock per volume |
//! | `context.rs` | what the steps share: the drivers, the client, what is staged and published |
//! | `mount_dir.rs` | the directories made for a volume, and removed once nothing is mounted |
//! | `stage.rs` | a persistent volume staged on the node, and unstaged |
//! | `publish.rs` | a volume published into a pod, and unpublished |
//! | `stats.rs` | the claimed volumes' usage (`NodeGetVolumeStats`), the kubelet's `kubelet_volume_stats_*` |
//! | `expand.rs` | a claimed volume grown on the node when its claim grew (`NodeExpandVolume`), the claim's status |

pub(crate) mod attach;
pub(crate) mod calls;
pub(crate) mod context;
pub(crate) mod driver_objects;
pub(crate) mod expand;
pub(crate) mod mount_dir;
pub(crate) mod names;
pub(crate) mod operations;
pub(crate) mod plugin;
pub(crate) mod publish;
pub(crate) mod requests;
pub(crate) mod source;
pub(crate) mod stage;
pub(crate) mod stats;
pub(crate) mod vol_data;
