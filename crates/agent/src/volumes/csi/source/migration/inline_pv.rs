//! The PersistentVolume a migrated inline volume is translated into: a
//! CSI source and the access modes its in-tree kind implies, nothing else
//! (the kubelet's `TranslateInTreeInlineVolumeToCSI` leaves the rest to
//! the pod).

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A PersistentVolume `name` of source `csi` with `access_modes`, as the
/// translation of an inline volume makes it.
pub(crate) fn csi_pv(
    name: String,
    csi: CSIPersistentVolumeSource,
    access_modes: &[&str],
) -> PersistentVolume {
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            csi: Some(csi),
            access_modes: Some(access_modes.iter().map(|m| m.to_string()).collect()),
            ..Default::default()
        }),
        status: None,
    }
}
