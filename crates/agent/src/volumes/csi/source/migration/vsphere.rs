//! `vsphereVolume` → `csi.vsphere.vmware.com`: the handle is the disk's
//! path, the storage policy an attribute, the zone and region the
//! driver's own keys.

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, VsphereVirtualDiskVolumeSource,
};

use super::inline_pv::csi_pv;
use super::topology;

/// The CSI driver.
pub(crate) const DRIVER: &str = "csi.vsphere.vmware.com";
/// The driver's zone key.
const ZONE_KEY: &str = "topology.csi.vmware.com/zone";
/// The driver's region key.
const REGION_KEY: &str = "topology.csi.vmware.com/region";

fn csi(source: &VsphereVirtualDiskVolumeSource) -> CSIPersistentVolumeSource {
    let mut attributes = std::collections::BTreeMap::new();
    if let Some(policy) = source
        .storage_policy_name
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        attributes.insert("storagepolicyname".to_string(), policy.to_string());
    }
    CSIPersistentVolumeSource {
        driver: DRIVER.to_string(),
        volume_handle: source.volume_path.clone(),
        fs_type: source.fs_type.clone().filter(|f| !f.is_empty()),
        volume_attributes: Some(attributes),
        ..Default::default()
    }
}

/// A pod's inline volume, as a volume of the driver. (The kubelet's
/// translation reads the policy of an inline volume from a field it has
/// just emptied, and fails; the volume's own is taken here.)
pub(crate) fn inline(source: &VsphereVirtualDiskVolumeSource) -> PersistentVolume {
    csi_pv(
        format!("{DRIVER}-{}", source.volume_path),
        csi(source),
        &["ReadWriteOnce"],
    )
}

/// A PersistentVolume of the plugin, as one of the driver.
pub(crate) fn persistent(mut pv: PersistentVolume) -> Result<PersistentVolume, String> {
    let spec = pv.spec.get_or_insert_with(Default::default);
    let Some(source) = spec.vsphere_volume.take() else {
        return Err("pv is nil or VsphereVolume not defined on pv".to_string());
    };
    spec.csi = Some(csi(&source));
    topology::to_csi_zone_and_region(&mut pv, ZONE_KEY, REGION_KEY);
    Ok(pv)
}
