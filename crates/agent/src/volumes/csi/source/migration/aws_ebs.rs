//! `awsElasticBlockStore` → `ebs.csi.aws.com`: the handle is the EBS
//! volume id (an `aws://zone/vol-…` id cut to its `vol-…`), the partition
//! a volume attribute, the zone the driver's topology key.

use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, CSIPersistentVolumeSource, PersistentVolume,
};

use super::inline_pv::csi_pv;
use super::topology;

/// The CSI driver.
pub(crate) const DRIVER: &str = "ebs.csi.aws.com";
/// The driver's zone key.
const ZONE_KEY: &str = "topology.ebs.csi.aws.com/zone";

/// The CSI source of `source`.
fn csi(source: &AWSElasticBlockStoreVolumeSource) -> Result<CSIPersistentVolumeSource, String> {
    let handle = volume_id(&source.volume_id)
        .map_err(|e| format!("failed to translate Kubernetes ID to EBS Volume ID {e}"))?;
    Ok(CSIPersistentVolumeSource {
        driver: DRIVER.to_string(),
        volume_handle: handle,
        read_only: source.read_only.filter(|r| *r),
        fs_type: source.fs_type.clone().filter(|f| !f.is_empty()),
        volume_attributes: Some(
            [(
                "partition".to_string(),
                source.partition.unwrap_or(0).to_string(),
            )]
            .into(),
        ),
        ..Default::default()
    })
}

/// A pod's inline volume, as a volume of the driver.
pub(crate) fn inline(
    source: &AWSElasticBlockStoreVolumeSource,
) -> Result<PersistentVolume, String> {
    let csi = csi(source)?;
    Ok(csi_pv(
        format!("{DRIVER}-{}", csi.volume_handle),
        csi,
        &["ReadWriteOnce"],
    ))
}

/// A PersistentVolume of the plugin, as one of the driver.
pub(crate) fn persistent(mut pv: PersistentVolume) -> Result<PersistentVolume, String> {
    let spec = pv.spec.get_or_insert_with(Default::default);
    let Some(source) = spec.aws_elastic_block_store.take() else {
        return Err("pv is nil or AWS EBS not defined on pv".to_string());
    };
    spec.csi = Some(csi(&source)?);
    topology::to_csi(&mut pv, ZONE_KEY);
    Ok(pv)
}

/// The EBS volume id of a Kubernetes one (`aws://us-east-1a/vol-1` or
/// `vol-1`).
fn volume_id(id: &str) -> Result<String, String> {
    let Some(rest) = id.strip_prefix("aws://") else {
        return Ok(id.to_string());
    };
    // The URL's path: what follows its host.
    let path = rest.find('/').map_or("", |at| &rest[at..]);
    let aws = path.trim_matches('/');
    if aws.starts_with("vol-") && !aws.contains('/') {
        Ok(aws.to_string())
    } else {
        Err(format!("Invalid format for AWS volume ({id})"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_kubernetes_volume_id_is_cut_to_the_ebs_one() {
        assert_eq!(volume_id("vol-1").unwrap(), "vol-1");
        assert_eq!(volume_id("aws://us-east-1a/vol-1").unwrap(), "vol-1");
        assert_eq!(volume_id("aws:///vol-1").unwrap(), "vol-1");
        assert_eq!(
            volume_id("aws://us-east-1a/disk/vol-1").unwrap_err(),
            "Invalid format for AWS volume (aws://us-east-1a/disk/vol-1)"
        );
    }
}
