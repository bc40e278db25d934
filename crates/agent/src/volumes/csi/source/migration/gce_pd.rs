//! `gcePersistentDisk` → `pd.csi.storage.gke.io`: the handle is the
//! disk's path (`projects/UNSPECIFIED/zones/<zone>/disks/<name>`, a
//! regional path for a volume labelled with several zones), the partition
//! an attribute, read-write-many access seen as read-write-once.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, GCEPersistentDiskVolumeSource, PersistentVolume,
};

use super::inline_pv::csi_pv;
use super::topology;

/// The CSI driver.
pub(crate) const DRIVER: &str = "pd.csi.storage.gke.io";
/// The driver's zone key.
const ZONE_KEY: &str = "topology.gke.io/zone";
/// What stands for a project or zone the volume does not name.
const UNSPECIFIED: &str = "UNSPECIFIED";

fn csi(source: &GCEPersistentDiskVolumeSource, handle: String) -> CSIPersistentVolumeSource {
    let partition = match source.partition.unwrap_or(0) {
        0 => String::new(),
        n => n.to_string(),
    };
    CSIPersistentVolumeSource {
        driver: DRIVER.to_string(),
        volume_handle: handle,
        read_only: source.read_only.filter(|r| *r),
        fs_type: source.fs_type.clone().filter(|f| !f.is_empty()),
        volume_attributes: Some([("partition".to_string(), partition)].into()),
        ..Default::default()
    }
}

fn zonal(zone: &str, disk: &str) -> String {
    format!("projects/{UNSPECIFIED}/zones/{zone}/disks/{disk}")
}

/// A pod's inline volume, as a volume of the driver.
pub(crate) fn inline(source: &GCEPersistentDiskVolumeSource) -> PersistentVolume {
    let mode = if source.read_only.unwrap_or(false) {
        "ReadOnlyMany"
    } else {
        "ReadWriteOnce"
    };
    let mut pv = csi_pv(
        format!("{DRIVER}-{}", source.pd_name),
        csi(source, zonal(UNSPECIFIED, &source.pd_name)),
        &[mode],
    );
    if let Some(spec) = pv.spec.as_mut() {
        spec.volume_mode = Some("Filesystem".to_string());
    }
    pv
}

/// A PersistentVolume of the plugin, as one of the driver.
pub(crate) fn persistent(mut pv: PersistentVolume) -> Result<PersistentVolume, String> {
    let zones_label = topology::label(&pv, topology::BETA_ZONE)
        .filter(|z| !z.is_empty())
        .or_else(|| topology::label(&pv, topology::ZONE))
        .unwrap_or_default()
        .to_string();
    let spec = pv.spec.get_or_insert_with(Default::default);
    let Some(source) = spec.gce_persistent_disk.take() else {
        return Err("pv is nil or GCE Persistent Disk source not defined on pv".to_string());
    };
    let zones: Vec<&str> = zones_label.split(topology::MULTI_ZONE_DELIMITER).collect();
    let handle = match zones.as_slice() {
        [zone] if !zone.is_empty() => zonal(zone, &source.pd_name),
        [_, _, ..] => {
            let region =
                region_of(&zones).map_err(|e| format!("failed to get region from zones: {e}"))?;
            format!(
                "projects/{UNSPECIFIED}/regions/{region}/disks/{}",
                source.pd_name
            )
        }
        _ => zonal(UNSPECIFIED, &source.pd_name),
    };
    spec.csi = Some(csi(&source, handle));
    spec.access_modes = spec
        .access_modes
        .take()
        .map(|modes| compatible_modes(&modes));
    topology::to_csi(&mut pv, ZONE_KEY);
    Ok(pv)
}

/// The one region of `zones` (`<locale>-<region>-<zone>`).
fn region_of(zones: &[&str]) -> Result<String, String> {
    let mut regions = BTreeSet::new();
    for zone in zones {
        let parts: Vec<&str> = zone.split('-').collect();
        if parts.len() != 3 {
            return Err(format!(
                "zone in unexpected format, expected: {{locale}}-{{region}}-{{zone}}, got: {zone}"
            ));
        }
        regions.insert(parts[..2].join("-"));
    }
    match regions.len() {
        1 => Ok(regions.into_iter().next().unwrap_or_default()),
        _ => Err(format!(
            "multiple or no regions gotten from zones, got: {regions:?}"
        )),
    }
}

/// The access modes as the driver takes them: read-write-many is
/// read-write-once, read-only-many with read-write-once is the latter.
fn compatible_modes(modes: &[String]) -> Vec<String> {
    let has = |mode: &str| {
        modes
            .iter()
            .any(|m| m == mode || (mode == "ReadWriteOnce" && m == "ReadWriteMany"))
    };
    let mode = if !has("ReadWriteOnce") && has("ReadOnlyMany") {
        "ReadOnlyMany"
    } else {
        "ReadWriteOnce"
    };
    vec![mode.to_string()]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_volume_of_several_zones_is_regional() {
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv", "labels": {topology::ZONE: "us-central1-a__us-central1-b"}},
            "spec": {"gcePersistentDisk": {"pdName": "disk"}, "accessModes": ["ReadWriteMany"]},
        }))
        .unwrap();
        let pv = persistent(pv).unwrap();
        let spec = pv.spec.unwrap();
        assert_eq!(
            spec.csi.unwrap().volume_handle,
            "projects/UNSPECIFIED/regions/us-central1/disks/disk"
        );
        assert_eq!(spec.access_modes.unwrap(), ["ReadWriteOnce"]);
    }

    #[test]
    fn read_only_many_alone_stays() {
        assert_eq!(compatible_modes(&["ReadOnlyMany".into()]), ["ReadOnlyMany"]);
        assert_eq!(
            compatible_modes(&["ReadOnlyMany".into(), "ReadWriteOnce".into()]),
            ["ReadWriteOnce"]
        );
        assert_eq!(compatible_modes(&[]), ["ReadWriteOnce"]);
    }
}
