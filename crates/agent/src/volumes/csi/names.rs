//! The names the kubelet's CSI plugin derives, each from what names the
//! volume, so that a node moving between the kubelet and this agent (or
//! the attach/detach controller, which derives the same) finds the same:
//! an inline volume's handle, the attachment ID (a VolumeAttachment's
//! name), the unique volume name of the Node's status, and the staging
//! directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The CSI plugin's name (its directory under a pod's `volumes/`, escaped,
/// and under the node's `plugins/`, not).
pub(crate) const PLUGIN: &str = "kubernetes.io/csi";

/// The directory a volume is published at, under its volume directory.
pub(crate) const MOUNT_DIR: &str = "mount";

/// The directory a volume is staged at, under its staging directory.
const GLOBAL_MOUNT: &str = "globalmount";

/// The SHA-256 of `text`, in lower-case hex.
pub(crate) fn sha256_hex(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// The handle of pod `pod_uid`'s inline volume `volume`
/// (`makeVolumeHandle`: the two concatenated, with no separator).
pub(crate) fn inline_handle(pod_uid: &str, volume: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{pod_uid}{volume}")))
}

/// The attachment ID of volume `handle` of `driver` on `node`: the name of
/// its VolumeAttachment (`getAttachmentName`).
pub(crate) fn attachment_id(handle: &str, driver: &str, node: &str) -> String {
    format!("csi-{}", sha256_hex(&format!("{handle}{driver}{node}")))
}

/// Where volume `handle` of `driver` is staged on the node whose state is
/// under `root`: `plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`
/// (`makeDeviceMountPath`; the plugin's name is not escaped there).
pub(crate) fn staging_path(root: &Path, driver: &str, handle: &str) -> PathBuf {
    root.join("plugins")
        .join(PLUGIN)
        .join(driver)
        .join(sha256_hex(handle))
        .join(GLOBAL_MOUNT)
}

/// The unique name of a persistent volume, as `node.status.volumesInUse`
/// and `volumesAttached` list it (`GetVolumeName`).
pub(crate) fn unique_name(driver: &str, handle: &str) -> String {
    format!("{PLUGIN}/{driver}^{handle}")
}

/// The volumes staged on the node whose state is under `root`, as their
/// staging `vol_data.json` names them: (driver, handle).
pub(crate) fn staged_on_disk(root: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let Ok(drivers) = std::fs::read_dir(root.join("plugins").join(PLUGIN)) else {
        return found;
    };
    for driver in drivers.flatten() {
        let Ok(volumes) = std::fs::read_dir(driver.path()) else {
            continue;
        };
        for volume in volumes.flatten() {
            let Ok(data) = super::vol_data::load(&volume.path()) else {
                continue;
            };
            if let (Some(driver), Some(handle)) = (
                data.get(super::vol_data::DRIVER_NAME),
                data.get(super::vol_data::VOLUME_HANDLE),
            ) {
                found.push((driver.clone(), handle.clone()));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_kubelets() {
        // sha256("") and sha256("abc"), the standard's own examples.
        assert_eq!(
            sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            inline_handle("a", "bc"),
            format!("csi-{}", sha256_hex("abc"))
        );
        assert_eq!(
            attachment_id("h", "d", "n"),
            format!("csi-{}", sha256_hex("hdn"))
        );
        assert_eq!(
            staging_path(Path::new("/var/lib/kubelet"), "hostpath.csi.k8s.io", "abc"),
            Path::new(
                "/var/lib/kubelet/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad/globalmount"
            )
        );
        assert_eq!(unique_name("d", "h"), "kubernetes.io/csi/d^h");
    }
}
