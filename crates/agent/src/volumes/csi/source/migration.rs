//! The in-tree cloud volumes, served by their CSI drivers as the kubelet
//! of v1.37 serves them: their in-tree plugins are gone and migration is
//! always on, so a pod's inline `awsElasticBlockStore` (or a claim bound
//! to a PersistentVolume of one) is translated into a PersistentVolume of
//! the driver that replaced it (`ebs.csi.aws.com`), with the handle,
//! attributes, access modes, secrets and node affinity the kubelet's
//! translation gives, and then staged and published as any CSI volume.
//! The kubelet's calls for a migrated volume say so in
//! `csi_operations_seconds{migrated="true"}`, and every CSINode of the
//! node names the plugins (`storage.alpha.kubernetes.io/migrated-plugins`)
//! so that the attach/detach controller translates the same.
//!
//! | file | the in-tree kind | its driver |
//! |---|---|---|
//! | `aws_ebs.rs` | `awsElasticBlockStore` | `ebs.csi.aws.com` |
//! | `gce_pd.rs` | `gcePersistentDisk` | `pd.csi.storage.gke.io` |
//! | `azure_disk.rs` | `azureDisk` | `disk.csi.azure.com` |
//! | `azure_file.rs` | `azureFile` | `file.csi.azure.com` |
//! | `cinder.rs` | `cinder` | `cinder.csi.openstack.org` |
//! | `vsphere.rs` | `vsphereVolume` | `csi.vsphere.vmware.com` |
//! | `portworx.rs` | `portworxVolume` | `pxd.portworx.com` |
//! | `inline_pv.rs` | the PersistentVolume an inline volume becomes | |
//! | `topology.rs` | the zone and region of a PersistentVolume's node affinity, moved to the driver's keys | |

pub(crate) mod aws_ebs;
pub(crate) mod azure_disk;
pub(crate) mod azure_file;
pub(crate) mod cinder;
pub(crate) mod gce_pd;
pub(crate) mod inline_pv;
pub(crate) mod portworx;
pub(crate) mod topology;
pub(crate) mod vsphere;

use k8s_openapi::api::core::v1::{PersistentVolume, Volume};

/// An in-tree plugin whose volumes a CSI driver serves (the kubelet's
/// CSINode annotation names them all; see `kube_api::csi::csi_node`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InTree {
    AwsEbs,
    GcePd,
    AzureDisk,
    AzureFile,
    Cinder,
    VSphere,
    Portworx,
}

impl InTree {
    /// Its volumes' kind, as a pod's spec names it.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Self::AwsEbs => "awsElasticBlockStore",
            Self::GcePd => "gcePersistentDisk",
            Self::AzureDisk => "azureDisk",
            Self::AzureFile => "azureFile",
            Self::Cinder => "cinder",
            Self::VSphere => "vsphereVolume",
            Self::Portworx => "portworxVolume",
        }
    }

    /// The plugin of a pod's volume, if it is one of these.
    pub(crate) fn of_volume(volume: &Volume) -> Option<Self> {
        [
            (Self::AwsEbs, volume.aws_elastic_block_store.is_some()),
            (Self::GcePd, volume.gce_persistent_disk.is_some()),
            (Self::AzureDisk, volume.azure_disk.is_some()),
            (Self::AzureFile, volume.azure_file.is_some()),
            (Self::Cinder, volume.cinder.is_some()),
            (Self::VSphere, volume.vsphere_volume.is_some()),
            (Self::Portworx, volume.portworx_volume.is_some()),
        ]
        .into_iter()
        .find_map(|(plugin, set)| set.then_some(plugin))
    }

    /// The plugin of a PersistentVolume, if it is one of these.
    pub(crate) fn of_persistent(pv: &PersistentVolume) -> Option<Self> {
        let spec = pv.spec.as_ref()?;
        [
            (Self::AwsEbs, spec.aws_elastic_block_store.is_some()),
            (Self::GcePd, spec.gce_persistent_disk.is_some()),
            (Self::AzureDisk, spec.azure_disk.is_some()),
            (Self::AzureFile, spec.azure_file.is_some()),
            (Self::Cinder, spec.cinder.is_some()),
            (Self::VSphere, spec.vsphere_volume.is_some()),
            (Self::Portworx, spec.portworx_volume.is_some()),
        ]
        .into_iter()
        .find_map(|(plugin, set)| set.then_some(plugin))
    }
}

/// Why a volume cannot be translated; its words are the kubelet's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to translate in-tree pv to CSI: {0}")]
pub(crate) struct TranslationError(String);

/// Pod volume `volume` of a pod in `namespace`, as a PersistentVolume of
/// its CSI driver (`TranslateInTreeInlineVolumeToCSI`); `None` when it is
/// of no migrated plugin.
pub(crate) fn inline(
    volume: &Volume,
    namespace: &str,
) -> Option<Result<PersistentVolume, TranslationError>> {
    let translated = match InTree::of_volume(volume)? {
        InTree::AwsEbs => volume
            .aws_elastic_block_store
            .as_ref()
            .map(aws_ebs::inline)?,
        InTree::GcePd => Ok(volume.gce_persistent_disk.as_ref().map(gce_pd::inline)?),
        InTree::AzureDisk => volume.azure_disk.as_ref().map(azure_disk::inline)?,
        InTree::AzureFile => Ok(volume
            .azure_file
            .as_ref()
            .map(|s| azure_file::inline(s, &volume.name, namespace))?),
        InTree::Cinder => Ok(volume.cinder.as_ref().map(cinder::inline)?),
        InTree::VSphere => Ok(volume.vsphere_volume.as_ref().map(vsphere::inline)?),
        InTree::Portworx => Ok(volume.portworx_volume.as_ref().map(portworx::inline)?),
    };
    Some(
        translated
            .map(|mut pv| {
                if let Some(spec) = pv.spec.as_mut() {
                    spec.volume_mode
                        .get_or_insert_with(|| "Filesystem".to_string());
                }
                pv
            })
            .map_err(TranslationError),
    )
}

/// PersistentVolume `pv` as one of its CSI driver
/// (`TranslateInTreePVToCSI`); `None` when it is of no migrated plugin.
pub(crate) fn persistent(
    pv: &PersistentVolume,
) -> Option<Result<PersistentVolume, TranslationError>> {
    let plugin = InTree::of_persistent(pv)?;
    let pv = pv.clone();
    let translated = match plugin {
        InTree::AwsEbs => aws_ebs::persistent(pv),
        InTree::GcePd => gce_pd::persistent(pv),
        InTree::AzureDisk => azure_disk::persistent(pv),
        InTree::AzureFile => azure_file::persistent(pv),
        InTree::Cinder => cinder::persistent(pv),
        InTree::VSphere => vsphere::persistent(pv),
        InTree::Portworx => portworx::persistent(pv),
    };
    Some(translated.map_err(TranslationError))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_inline_ebs_volume_is_a_volume_of_the_ebs_driver() {
        let volume: Volume = serde_json::from_value(serde_json::json!({
            "name": "data",
            "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1", "fsType": "ext4"},
        }))
        .unwrap();
        let pv = inline(&volume, "ns").unwrap().unwrap();
        assert_eq!(
            serde_json::to_value(&pv).unwrap(),
            serde_json::json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": "ebs.csi.aws.com-vol-1"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1", "fsType": "ext4",
                            "volumeAttributes": {"partition": "0"}},
                    "volumeMode": "Filesystem",
                },
            })
        );
        let other: Volume =
            serde_json::from_value(serde_json::json!({"name": "x", "emptyDir": {}})).unwrap();
        assert!(inline(&other, "ns").is_none());
    }
}
