//! `cinder` → `cinder.csi.openstack.org`: the handle is the Cinder volume
//! id, the zone the driver's topology key.

use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolume};

use super::inline_pv::csi_pv;
use super::topology;

/// The CSI driver.
pub(crate) const DRIVER: &str = "cinder.csi.openstack.org";
/// The driver's zone key.
const ZONE_KEY: &str = "topology.cinder.csi.openstack.org/zone";

fn csi(id: &str, read_only: Option<bool>, fs_type: Option<&String>) -> CSIPersistentVolumeSource {
    CSIPersistentVolumeSource {
        driver: DRIVER.to_string(),
        volume_handle: id.to_string(),
        read_only: read_only.filter(|r| *r),
        fs_type: fs_type.filter(|f| !f.is_empty()).cloned(),
        volume_attributes: Some(Default::default()),
        ..Default::default()
    }
}

/// A pod's inline volume, as a volume of the driver.
pub(crate) fn inline(source: &k8s_openapi::api::core::v1::CinderVolumeSource) -> PersistentVolume {
    csi_pv(
        format!("{DRIVER}-{}", source.volume_id),
        csi(&source.volume_id, source.read_only, source.fs_type.as_ref()),
        &["ReadWriteOnce"],
    )
}

/// A PersistentVolume of the plugin, as one of the driver.
pub(crate) fn persistent(mut pv: PersistentVolume) -> Result<PersistentVolume, String> {
    let spec = pv.spec.get_or_insert_with(Default::default);
    let Some(source) = spec.cinder.take() else {
        return Err("pv is nil or Cinder not defined on pv".to_string());
    };
    spec.csi = Some(csi(
        &source.volume_id,
        source.read_only,
        source.fs_type.as_ref(),
    ));
    topology::to_csi(&mut pv, ZONE_KEY);
    Ok(pv)
}
