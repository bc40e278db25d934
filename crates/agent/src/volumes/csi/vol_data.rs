//! `vol_data.json`, what the kubelet's CSI plugin writes beside a volume
//! it publishes (the driver, the handle, the node, the attachment ID, the
//! lifecycle mode, the name in the pod's spec) and beside one it stages
//! (the driver and the handle), before it calls the driver: it is how a
//! volume is torn down without its pod's spec, and how a restart knows
//! what a directory holds. One flat JSON object, keys sorted, a newline
//! after, as Go's encoder writes a map; written whole or not at all.

use std::collections::BTreeMap;
use std::path::Path;

/// The file's name.
pub(crate) const FILE: &str = "vol_data.json";

/// The name of the volume in the pod's spec (a PersistentVolume's name, or
/// an inline volume's).
pub(crate) const SPEC_VOLUME_ID: &str = "specVolID";
/// The volume's handle in its driver.
pub(crate) const VOLUME_HANDLE: &str = "volumeHandle";
/// The driver's name.
pub(crate) const DRIVER_NAME: &str = "driverName";
/// The node's name.
pub(crate) const NODE_NAME: &str = "nodeName";
/// The VolumeAttachment's name, written whether or not one is needed.
pub(crate) const ATTACHMENT_ID: &str = "attachmentID";
/// `Persistent` or `Ephemeral`.
pub(crate) const LIFECYCLE_MODE: &str = "volumeLifecycleMode";

/// A `vol_data.json`'s keys and values.
pub(crate) type VolData = BTreeMap<String, String>;

/// Writes `data` as `dir/vol_data.json`, whole (a file beside it renamed
/// over it).
pub(crate) fn save(dir: &Path, data: &VolData) -> std::io::Result<()> {
    let mut text = serde_json::to_vec(data).map_err(std::io::Error::other)?;
    text.push(b'\n');
    let file = dir.join(FILE);
    let partial = dir.join(format!(".{FILE}.partial"));
    std::fs::write(&partial, &text)?;
    std::fs::rename(&partial, &file)
}

/// Reads `dir/vol_data.json`; a missing file is `NotFound`.
pub(crate) fn load(dir: &Path) -> std::io::Result<VolData> {
    let text = std::fs::read(dir.join(FILE))?;
    serde_json::from_slice(&text).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", dir.join(FILE).display()),
        )
    })
}

/// Removes `dir/vol_data.json`, if there.
pub(crate) fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn written_as_gos_encoder_writes_a_map_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let data: VolData = [
            (VOLUME_HANDLE, "h"),
            (DRIVER_NAME, "d"),
            (SPEC_VOLUME_ID, "pv"),
            (ATTACHMENT_ID, "csi-x"),
            (NODE_NAME, "n"),
            (LIFECYCLE_MODE, "Persistent"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        save(dir.path(), &data).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
            "{\"attachmentID\":\"csi-x\",\"driverName\":\"d\",\"nodeName\":\"n\",\"specVolID\":\"pv\",\"volumeHandle\":\"h\",\"volumeLifecycleMode\":\"Persistent\"}\n"
        );
        assert_eq!(load(dir.path()).unwrap(), data);
        remove(dir.path()).unwrap();
        assert_eq!(
            load(dir.path()).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        remove(dir.path()).unwrap();
    }
}
