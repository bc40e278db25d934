//! The volume manager: a pod's volumes set up before its sandbox is made
//! and torn down after its containers stopped, as the kubelet's volume
//! manager does, on disk in the kubelet's own layout (so a node moves
//! between the kubelet and this agent, and a restart finds what is set up
//! from disk, with no record of its own).
//!
//! | room | file | what it holds |
//! |---|---|---|
//! | | `handle.rs` | the door: set up a pod's volumes, tear them down, what is on disk |
//! | | `plan.rs` | the volumes a pod's containers mount, and their kinds |
//! | | `set_up.rs` | one volume set up or torn down, by its kind |
//! | | `mounts.rs` | a container's volume mounts (`makeMounts`) |
//! | | `layout.rs` | the kubelet's directories of a pod's volumes |
//! | | `book.rs` | what is set up, by pod, for `nodeplugins pods` |
//! | | `error.rs` | the kubelet's words for what failed |
//! | `content/` | `payload.rs` | a configMap's, secret's, downwardAPI's or projected volume's files |
//! | | `atomic_writer.rs` | the files swapped in at once (`..data`) |
//! | | `objects.rs` | one watch per ConfigMap or Secret a pod names |
//! | | `token.rs` | the pods' service-account tokens, renewed at 80% of their life |
//! | | `trust_bundles.rs` | the ClusterTrustBundles of `clusterTrustBundle` projections |
//! | | `pod_certificates.rs` | `podCertificate` projections: a key (`common::certificate_key`) and a PodCertificateRequest each |
//! | | `certificates_v1.rs` | the `certificates.k8s.io/v1` objects, in types of their own |
//! | | `go_quote.rs` | `%q` as Go writes it (PEM: `common::pem`) |
//! | `csi/` | `plugin.rs` | CSI volumes: the door, one lock per volume |
//! | | `context.rs`, `mount_dir.rs` | what the steps share (what is staged and published); the directories made and removed |
//! | | `source.rs` | an inline volume, or a claim's PersistentVolume, checked |
//! | | `stage.rs`, `publish.rs` | staged on the node and published into the pod, and back |
//! | | `calls.rs`, `requests.rs` | the driver's node calls, filled as the kubelet fills them |
//! | | `driver_objects.rs` | the CSIDriver objects and what each asks of the node |
//! | | `names.rs`, `vol_data.rs` | the kubelet's names and marks |
//! | `csi/source/` | `migration.rs`, `node_affinity.rs` | the in-tree cloud kinds translated; a PersistentVolume's node affinity |
//! | `kinds/` | `empty_dir.rs` | an emptyDir, on disk or a tmpfs |
//! | | `host_path.rs` | a hostPath and its type's checks |
//! | | `local.rs` | a local PersistentVolume's directory, bound into the pod |
//! | | `tmpfs.rs` | the tmpfs of memory-backed volumes, and the mount table |
//! | | `ownership.rs` | the pod's fsGroup over a volume |
//!
//! Supported: `emptyDir` (disk and `medium: Memory`), `hostPath` (every
//! type), `configMap`, `secret`, `downwardAPI` and `projected` (the
//! service-account token, configMap, secret, downwardAPI,
//! clusterTrustBundle and podCertificate sources: the `kube-api-access-*`
//! volume every pod has), `image` (mounted by the runtime), CSI inline volumes, the in-tree
//! cloud kinds translated into volumes of their CSI drivers, and claims
//! (`persistentVolumeClaim`, generic `ephemeral`) bound to a CSI,
//! `hostPath` or `local` PersistentVolume. Other kinds (`nfs`, `iscsi`,
//! `fc`; `gitRepo`, refused as the kubelet refuses it) fail to mount with a
//! `FailedMount` Event naming them, and the pod waits.

mod book;
mod content;
mod csi;
mod error;
mod handle;
mod kinds;
mod layout;
mod mounts;
mod plan;
mod set_up;
mod shared_root;
mod sub_path;

pub(crate) use content::payload::{
    pod_field as downward_pod_field, resource_field as downward_resource_field,
};
pub use content::pod_certificates::PodCertificateStates;
pub use csi::operations::CsiOperations;
pub use csi::stats::{VOLUME_STATS_AGG_PERIOD, VolumeStats};
pub use error::{FAILED_MOUNT, VolumeError, VolumeFailure};
pub use handle::VolumeHandle;
pub use mounts::{MountError, PodVolume, PodVolumes, VolumeImage};
pub(crate) use mounts::{MountSources, container_mounts, recursive_read_only};
