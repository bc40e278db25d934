//! `portworxVolume` → `pxd.portworx.com`: the handle is the volume id; a
//! PersistentVolume's auth secret (its `openstorage.io/auth-secret-*`
//! annotations) is every call's secret.

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PortworxVolumeSource, SecretReference,
};

use super::inline_pv::csi_pv;

/// The CSI driver.
pub(crate) const DRIVER: &str = "pxd.portworx.com";
const SECRET_NAME: &str = "openstorage.io/auth-secret-name";
const SECRET_NAMESPACE: &str = "openstorage.io/auth-secret-namespace";

fn csi(source: &PortworxVolumeSource) -> CSIPersistentVolumeSource {
    CSIPersistentVolumeSource {
        driver: DRIVER.to_string(),
        volume_handle: source.volume_id.clone(),
        fs_type: source.fs_type.clone().filter(|f| !f.is_empty()),
        volume_attributes: Some(Default::default()),
        ..Default::default()
    }
}

/// A pod's inline volume, as a volume of the driver (read-only many when
/// it is read-only; the source itself is not marked read-only).
pub(crate) fn inline(source: &PortworxVolumeSource) -> PersistentVolume {
    let mode = if source.read_only.unwrap_or(false) {
        "ReadOnlyMany"
    } else {
        "ReadWriteOnce"
    };
    csi_pv(
        format!("{DRIVER}-{}", source.volume_id),
        csi(source),
        &[mode],
    )
}

/// A PersistentVolume of the plugin, as one of the driver.
pub(crate) fn persistent(mut pv: PersistentVolume) -> Result<PersistentVolume, String> {
    let annotations = pv.metadata.annotations.clone().unwrap_or_default();
    let secret = match (
        annotations.get(SECRET_NAME),
        annotations.get(SECRET_NAMESPACE),
    ) {
        (Some(name), Some(namespace)) => Some(SecretReference {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
        }),
        _ => None,
    };
    let spec = pv.spec.get_or_insert_with(Default::default);
    let Some(source) = spec.portworx_volume.take() else {
        return Err("pv is nil or PortworxVolume not defined on pv".to_string());
    };
    spec.csi = Some(CSIPersistentVolumeSource {
        controller_publish_secret_ref: secret.clone(),
        node_stage_secret_ref: secret.clone(),
        node_publish_secret_ref: secret.clone(),
        controller_expand_secret_ref: secret.clone(),
        node_expand_secret_ref: secret,
        ..csi(&source)
    });
    Ok(pv)
}
