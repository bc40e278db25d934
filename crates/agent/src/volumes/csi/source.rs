//! What one of a pod's CSI volumes is, as the kubelet's desired-state
//! populator makes its spec: an inline volume straight from the pod (its
//! handle derived from the pod and the volume), or a claim read from the
//! API on every pass (as the kubelet reads it on every pod sync) with the
//! PersistentVolume it is bound to, both checked as the kubelet checks
//! them (bound, the volume bound back to the claim, the claim not being
//! deleted unprotected, the volume's node affinity met by the node).
//!
//! | file | what it holds |
//! |---|---|
//! | `source/migration.rs` | the in-tree cloud volumes translated into volumes of the CSI drivers that replaced them |
//! | `source/node_affinity.rs` | a PersistentVolume's node affinity against the node's labels |

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIVolumeSource, HostPathVolumeSource, PersistentVolume, PersistentVolumeClaim, Pod, Volume,
};
use kube::Api;

use crate::volumes::csi::names;
use crate::volumes::error::SetUpError;

pub(crate) mod migration;
pub(crate) mod node_affinity;

/// The finalizer that protects a claim in use from deletion.
const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// How a CSI volume lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// A PersistentVolume's: staged on the node, outlives its pods.
    Persistent,
    /// An inline volume's: published into its pod only, gone with it.
    Ephemeral,
}

impl Lifecycle {
    /// As `volumeLifecycleModes` and `vol_data.json` name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Persistent => "Persistent",
            Self::Ephemeral => "Ephemeral",
        }
    }
}

/// A secret a driver's call is given, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SecretRef {
    pub(crate) namespace: String,
    pub(crate) name: String,
}

/// One of a pod's CSI volumes, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CsiVolume {
    /// Its name on disk (`specVolID`): the PersistentVolume's, or the pod's
    /// name of an inline volume.
    pub(crate) spec_name: String,
    /// The driver's name.
    pub(crate) driver: String,
    /// The volume's handle in the driver.
    pub(crate) handle: String,
    pub(crate) lifecycle: Lifecycle,
    /// Published read-only (the pod's claim says so, or the inline volume).
    pub(crate) read_only: bool,
    pub(crate) fs_type: String,
    /// `volumeAttributes`.
    pub(crate) attributes: BTreeMap<String, String>,
    /// The PersistentVolume's `mountOptions` (none inline).
    pub(crate) mount_options: Vec<String>,
    /// The PersistentVolume's access modes (none inline: ReadWriteOnce).
    pub(crate) access_modes: Vec<String>,
    /// `nodeStageSecretRef`.
    pub(crate) stage_secret: Option<SecretRef>,
    /// `nodePublishSecretRef`.
    pub(crate) publish_secret: Option<SecretRef>,
    /// The claim it is the volume of (namespace, name), if any.
    pub(crate) claim: Option<(String, String)>,
    /// Its VolumeAttachment's `attachmentMetadata`, when it is attached
    /// (the stage and publish calls' `publish_context`).
    pub(crate) publish_context: BTreeMap<String, String>,
    /// The PersistentVolume's `capacity` of storage, in bytes: the size it
    /// is to have on the node (none inline).
    pub(crate) capacity: Option<i64>,
    /// The claim's `status.capacity` of storage, in bytes: the size it has.
    pub(crate) claim_capacity: Option<i64>,
    /// `nodeExpandSecretRef`.
    pub(crate) expand_secret: Option<SecretRef>,
    /// An in-tree volume translated into one of its CSI driver.
    pub(crate) migrated: bool,
}

impl CsiVolume {
    /// Its directory's name under the pod's CSI volumes: its spec name,
    /// escaped (a migrated Azure disk is named by its URI).
    pub(crate) fn dir_name(&self) -> String {
        crate::volumes::layout::escape(&self.spec_name)
    }
}

/// Why a pod's claim gives no volume yet.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum SourceError {
    #[error("failed to fetch PVC from API server: {0}")]
    FetchClaim(String),
    #[error("PVC is being deleted")]
    ClaimDeleted,
    #[error("PVC is not bound")]
    NotBound,
    #[error("PVC has empty pvc.Spec.VolumeName")]
    NoVolumeName,
    #[error("failed to fetch PV {name} from API server: {error}")]
    FetchVolume { name: String, error: String },
    #[error(
        "found PV object {0} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
    )]
    NoClaimRef(String),
    #[error(
        "found PV object {name} but its pv.Spec.ClaimRef.UID {bound} does not point to claim.UID {claim}"
    )]
    OtherClaim {
        name: String,
        bound: String,
        claim: String,
    },
    #[error(
        "PersistentVolume {0} is of a kind this node does not set up (CSI, hostPath, local and the migrated in-tree cloud kinds are)"
    )]
    NotCsi(String),
    #[error("{0}")]
    Translation(#[from] migration::TranslationError),
    #[error("PVC {claim} was not created for pod {pod} (pod is not owner)")]
    NotPodsOwn { claim: String, pod: String },
    /// The kubelet's `NodeAffinity` check of PersistentVolume `volume`.
    #[error("{error}")]
    Affinity {
        volume: String,
        error: node_affinity::AffinityError,
    },
    /// The kubelet's `MountOptionSupport` check: a hostPath
    /// PersistentVolume (`.0`) takes no mount options.
    #[error("mount options are not supported for this volume type")]
    MountOptions(String),
}

/// A claim's failure, in the kubelet's words: its volume's checks as the
/// steps before SetUp that they are upstream.
impl From<SourceError> for SetUpError {
    fn from(e: SourceError) -> Self {
        match &e {
            SourceError::Affinity { volume, .. } => {
                SetUpError::of_step("MountVolume.NodeAffinity check", volume, &e)
            }
            SourceError::MountOptions(volume) => {
                SetUpError::of_step("MountVolume.MountOptionSupport check", volume, &e)
            }
            _ => SetUpError::SetUp(e.to_string()),
        }
    }
}

/// The kubelet's annotation of a PersistentVolume's mount options (read
/// before `spec.mountOptions`; comma-separated).
const MOUNT_OPTIONS_ANNOTATION: &str = "volume.beta.kubernetes.io/mount-options";

/// `pv`'s mount options as the kubelet's `MountOptionFromSpec` reads them
/// for its in-tree plugins: the annotation's when it has one, else the
/// spec's; each once, sorted, none empty.
fn mount_options_of(pv: &PersistentVolume) -> Vec<String> {
    let annotated = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MOUNT_OPTIONS_ANNOTATION));
    let options: std::collections::BTreeSet<String> = match annotated {
        Some(list) => list.split(',').map(str::to_string).collect(),
        None => pv
            .spec
            .as_ref()
            .and_then(|s| s.mount_options.clone())
            .unwrap_or_default()
            .into_iter()
            .collect(),
    };
    options.into_iter().filter(|o| !o.is_empty()).collect()
}

/// Pod `pod`'s inline CSI volume `name`.
pub(crate) fn inline(pod: &Pod, name: &str, source: &CSIVolumeSource) -> CsiVolume {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    CsiVolume {
        spec_name: name.to_string(),
        driver: source.driver.clone(),
        handle: names::inline_handle(uid, name),
        lifecycle: Lifecycle::Ephemeral,
        read_only: source.read_only.unwrap_or(false),
        fs_type: source.fs_type.clone().unwrap_or_default(),
        attributes: source.volume_attributes.clone().unwrap_or_default(),
        mount_options: Vec::new(),
        access_modes: Vec::new(),
        stage_secret: None,
        publish_secret: source.node_publish_secret_ref.as_ref().map(|r| SecretRef {
            namespace,
            name: r.name.clone(),
        }),
        claim: None,
        publish_context: BTreeMap::new(),
        capacity: None,
        claim_capacity: None,
        expand_secret: None,
        migrated: false,
    }
}

/// A pod's inline in-tree volume `volume` (of a migrated plugin), as the
/// persistent volume of its CSI driver the kubelet translates it into:
/// named as the translation names it, never read-only for the publish
/// call (the kubelet's spec of it is not), its access modes the
/// translation's.
pub(crate) fn migrated_inline(pod: &Pod, volume: &Volume) -> Result<CsiVolume, SourceError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let pv = match migration::inline(volume, namespace) {
        Some(translated) => translated?,
        None => return Err(SourceError::NotCsi(volume.name.clone())),
    };
    let mut volume = of_csi_volume(&pv, false)?;
    volume.migrated = true;
    volume.capacity = None;
    Ok(volume)
}

/// The storage quantity of `resources`, in bytes.
pub(crate) fn storage(
    resources: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Option<i64> {
    resources?
        .get("storage")
        .and_then(|q| nodeplugins_api::quantity::value(&q.0))
}

/// How a pod refers to a claim.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimUse<'a> {
    /// The claim's name, in the pod's namespace.
    pub(crate) name: &'a str,
    /// The pod mounts it read-only.
    pub(crate) read_only: bool,
    /// Through a generic ephemeral volume: the claim must be the pod's.
    pub(crate) ephemeral: bool,
}

/// What a pod's claim is bound to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Claimed {
    /// A CSI driver's volume (an in-tree cloud volume translated into
    /// one).
    Csi(Box<CsiVolume>),
    /// A path of the host (`hostPath`).
    HostPath {
        /// The PersistentVolume's name.
        volume: String,
        source: HostPathVolumeSource,
        /// The pod's claim is read-only.
        read_only: bool,
    },
    /// A directory of the node (`local`).
    Local {
        /// The PersistentVolume's name.
        volume: String,
        /// `local.path`.
        path: String,
        /// The pod's claim is read-only.
        read_only: bool,
        /// The PersistentVolume's mount options (its annotation's, or its
        /// spec's), sorted.
        mount_options: Vec<String>,
    },
}

/// What `pod`'s claim `claim` (read through `client`) is bound to, on a
/// node with `labels`.
pub(crate) async fn claimed(
    client: kube::Client,
    pod: &Pod,
    claim: ClaimUse<'_>,
    labels: &BTreeMap<String, String>,
) -> Result<Claimed, SourceError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let pvc = claims
        .get(claim.name)
        .await
        .map_err(|e| SourceError::FetchClaim(e.to_string()))?;
    if claim.ephemeral {
        pods_own(&pvc, pod)?;
    }
    let read_only = claim.read_only;
    let volume_name = checked_claim(&pvc)?;
    let volumes: Api<PersistentVolume> = Api::all(client);
    let pv = volumes
        .get(&volume_name)
        .await
        .map_err(|e| SourceError::FetchVolume {
            name: volume_name.clone(),
            error: e.to_string(),
        })?;
    // An in-tree volume of a migrated plugin is its driver's, its node
    // affinity too.
    let (pv, migrated) = match migration::persistent(&pv) {
        Some(translated) => (translated?, true),
        None => (pv, false),
    };
    let claim_uid = pvc.metadata.uid.as_deref().unwrap_or_default();
    bound_to(&pv, claim_uid)?;
    let spec = pv.spec.clone().unwrap_or_default();
    // The kubelet's order: node affinity, then mount options.
    node_affinity::check(&pv, labels).map_err(|error| SourceError::Affinity {
        volume: volume_name.clone(),
        error,
    })?;
    let claimed = if let Some(source) = spec.host_path {
        if !mount_options_of(&pv).is_empty() {
            return Err(SourceError::MountOptions(volume_name));
        }
        Claimed::HostPath {
            volume: volume_name,
            source,
            read_only,
        }
    } else if let Some(local) = spec.local {
        Claimed::Local {
            volume: volume_name,
            path: local.path,
            read_only,
            mount_options: mount_options_of(&pv),
        }
    } else {
        let mut volume = of_csi_volume(&pv, read_only)?;
        volume.migrated = migrated;
        volume.claim = Some((namespace.to_string(), claim.name.to_string()));
        volume.claim_capacity = storage(pvc.status.as_ref().and_then(|s| s.capacity.as_ref()));
        Claimed::Csi(Box::new(volume))
    };
    Ok(claimed)
}

/// Whether `pvc` is controlled by `pod` (`VolumeIsForPod`).
fn pods_own(pvc: &PersistentVolumeClaim, pod: &Pod) -> Result<(), SourceError> {
    let uid = pod.metadata.uid.as_deref();
    let controlled = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid);
    if controlled {
        return Ok(());
    }
    let name = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default()
        )
    };
    Err(SourceError::NotPodsOwn {
        claim: name(&pvc.metadata),
        pod: name(&pod.metadata),
    })
}

/// The name of the volume `pvc` is bound to, if it may be used.
fn checked_claim(pvc: &PersistentVolumeClaim) -> Result<String, SourceError> {
    let protected = pvc
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == PVC_PROTECTION);
    if pvc.metadata.deletion_timestamp.is_some() && !protected {
        return Err(SourceError::ClaimDeleted);
    }
    if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err(SourceError::NotBound);
    }
    match pvc.spec.as_ref().and_then(|s| s.volume_name.clone()) {
        Some(name) if !name.is_empty() => Ok(name),
        _ => Err(SourceError::NoVolumeName),
    }
}

/// Whether `pv` is bound to the claim of UID `claim_uid`.
fn bound_to(pv: &PersistentVolume, claim_uid: &str) -> Result<(), SourceError> {
    let name = pv.metadata.name.clone().unwrap_or_default();
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let Some(claim_ref) = claim_ref else {
        return Err(SourceError::NoClaimRef(name));
    };
    let bound = claim_ref.uid.clone().unwrap_or_default();
    if bound != claim_uid {
        return Err(SourceError::OtherClaim {
            name,
            bound,
            claim: claim_uid.to_string(),
        });
    }
    Ok(())
}

/// The CSI volume `pv` is, published read-only when `read_only`.
fn of_csi_volume(pv: &PersistentVolume, read_only: bool) -> Result<CsiVolume, SourceError> {
    let name = pv.metadata.name.clone().unwrap_or_default();
    let spec = pv.spec.clone().unwrap_or_default();
    let Some(source) = spec.csi else {
        return Err(SourceError::NotCsi(name));
    };
    let secret = |r: &Option<k8s_openapi::api::core::v1::SecretReference>| {
        r.as_ref().map(|r| SecretRef {
            namespace: r.namespace.clone().unwrap_or_default(),
            name: r.name.clone().unwrap_or_default(),
        })
    };
    Ok(CsiVolume {
        spec_name: name,
        driver: source.driver.clone(),
        handle: source.volume_handle.clone(),
        lifecycle: Lifecycle::Persistent,
        // The pod's claim says; the volume's own readOnly is not read.
        read_only,
        fs_type: source.fs_type.clone().unwrap_or_default(),
        attributes: source.volume_attributes.clone().unwrap_or_default(),
        mount_options: spec.mount_options.clone().unwrap_or_default(),
        access_modes: spec.access_modes.clone().unwrap_or_default(),
        stage_secret: secret(&source.node_stage_secret_ref),
        publish_secret: secret(&source.node_publish_secret_ref),
        claim: None,
        publish_context: BTreeMap::new(),
        capacity: storage(spec.capacity.as_ref()),
        claim_capacity: None,
        expand_secret: secret(&source.node_expand_secret_ref),
        migrated: false,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn mount_options_are_the_annotations_before_the_specs_each_once_and_sorted() {
        let pv = |annotations: serde_json::Value| -> PersistentVolume {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "pv", "annotations": annotations},
                "spec": {"mountOptions": ["sync", "noatime", "sync"]},
            }))
            .unwrap()
        };
        assert_eq!(
            mount_options_of(&pv(serde_json::json!({}))),
            ["noatime", "sync"]
        );
        assert_eq!(
            mount_options_of(&pv(
                serde_json::json!({MOUNT_OPTIONS_ANNOTATION: "ro,,debug,ro"})
            )),
            ["debug", "ro"]
        );
        assert!(
            mount_options_of(&pv(serde_json::json!({MOUNT_OPTIONS_ANNOTATION: ""}))).is_empty()
        );
    }

    #[test]
    fn an_inline_volumes_handle_is_derived_from_its_pod_and_name() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        }))
        .unwrap();
        let source: CSIVolumeSource = serde_json::from_value(serde_json::json!({
            "driver": "d", "readOnly": true, "volumeAttributes": {"size": "1Mi"},
            "nodePublishSecretRef": {"name": "s"},
        }))
        .unwrap();
        let volume = inline(&pod, "data", &source);
        assert_eq!(volume.handle, names::inline_handle("u1", "data"));
        assert_eq!(volume.lifecycle, Lifecycle::Ephemeral);
        assert!(volume.read_only);
        assert_eq!(
            volume.publish_secret,
            Some(SecretRef {
                namespace: "ns".into(),
                name: "s".into()
            })
        );
    }

    #[test]
    fn a_claim_must_be_bound_and_its_volume_bound_back() {
        let claim = |phase: &str, deleting: bool, finalizer: bool| -> PersistentVolumeClaim {
            let mut meta = serde_json::json!({"name": "c", "namespace": "ns", "uid": "c1"});
            if deleting {
                meta["deletionTimestamp"] = "2026-12-01T00:00:00Z".into();
            }
            if finalizer {
                meta["finalizers"] = serde_json::json!([PVC_PROTECTION]);
            }
            serde_json::from_value(serde_json::json!({
                "metadata": meta,
                "spec": {"volumeName": "pv"},
                "status": {"phase": phase},
            }))
            .unwrap()
        };
        assert_eq!(checked_claim(&claim("Bound", false, false)).unwrap(), "pv");
        assert_eq!(checked_claim(&claim("Bound", true, true)).unwrap(), "pv");
        assert!(matches!(
            checked_claim(&claim("Bound", true, false)),
            Err(SourceError::ClaimDeleted)
        ));
        assert!(matches!(
            checked_claim(&claim("Pending", false, false)),
            Err(SourceError::NotBound)
        ));

        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "mountOptions": ["noatime"],
                "claimRef": {"uid": "c1"},
                "csi": {"driver": "d", "volumeHandle": "h", "fsType": "ext4", "readOnly": true,
                        "nodeStageSecretRef": {"namespace": "sec", "name": "stage"}},
            },
        }))
        .unwrap();
        bound_to(&pv, "c1").unwrap();
        let volume = of_csi_volume(&pv, false).unwrap();
        assert_eq!(
            (volume.spec_name.as_str(), volume.handle.as_str()),
            ("pv", "h")
        );
        assert!(!volume.read_only, "the pod's claim decides, not the volume");
        assert_eq!(volume.mount_options, ["noatime"]);
        assert_eq!(volume.stage_secret.unwrap().namespace, "sec");
        let message = bound_to(&pv, "other").unwrap_err().to_string();
        assert_eq!(
            message,
            "found PV object pv but its pv.Spec.ClaimRef.UID c1 does not point to claim.UID other"
        );
    }
}
