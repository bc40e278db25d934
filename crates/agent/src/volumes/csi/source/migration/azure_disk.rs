//! `azureDisk` → `disk.csi.azure.com`: the handle is the managed disk's
//! URI, which also names the volume; its caching mode and file system are
//! volume attributes. Only managed disks migrate: a volume of another
//! `kind` (the API's default is `Shared`) is refused.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    AzureDiskVolumeSource, CSIPersistentVolumeSource, PersistentVolume,
};

use super::inline_pv::csi_pv;

/// The CSI driver.
pub(crate) const DRIVER: &str = "disk.csi.azure.com";
/// The only kind that migrates.
const MANAGED: &str = "Managed";

/// The CSI source of `source`; an empty caching mode is an attribute only
/// of a PersistentVolume's (`empty_caching`).
fn csi(
    source: &AzureDiskVolumeSource,
    empty_caching: bool,
) -> Result<CSIPersistentVolumeSource, String> {
    if let Some(kind) = source.kind.as_deref()
        && !kind.eq_ignore_ascii_case(MANAGED)
    {
        return Err(format!("kind({kind}) is not supported in csi migration"));
    }
    let mut attributes = BTreeMap::from([("kind".to_string(), MANAGED.to_string())]);
    if let Some(caching) = source.caching_mode.as_deref()
        && (empty_caching || !caching.is_empty())
    {
        attributes.insert("cachingmode".to_string(), caching.to_string());
    }
    if let Some(fs_type) = source.fs_type.as_deref() {
        attributes.insert("fstype".to_string(), fs_type.to_string());
    }
    Ok(CSIPersistentVolumeSource {
        driver: DRIVER.to_string(),
        volume_handle: source.disk_uri.clone(),
        read_only: source.read_only.filter(|r| *r),
        fs_type: source.fs_type.clone().filter(|f| !f.is_empty()),
        volume_attributes: Some(attributes),
        ..Default::default()
    })
}

/// A pod's inline volume, as a volume of the driver.
pub(crate) fn inline(source: &AzureDiskVolumeSource) -> Result<PersistentVolume, String> {
    Ok(csi_pv(
        source.disk_uri.clone(),
        csi(source, false)?,
        &["ReadWriteOnce"],
    ))
}

/// A PersistentVolume of the plugin, as one of the driver.
pub(crate) fn persistent(mut pv: PersistentVolume) -> Result<PersistentVolume, String> {
    let spec = pv.spec.get_or_insert_with(Default::default);
    let Some(source) = spec.azure_disk.take() else {
        return Err("pv is nil or Azure Disk source not defined on pv".to_string());
    };
    spec.csi = Some(csi(&source, true)?);
    Ok(pv)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_managed_disks_migrate() {
        let source: AzureDiskVolumeSource = serde_json::from_value(serde_json::json!({
            "diskName": "d", "diskURI": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/disks/d",
            "kind": "Shared",
        }))
        .unwrap();
        assert_eq!(
            inline(&source).unwrap_err(),
            "kind(Shared) is not supported in csi migration"
        );
    }
}
