//! Each node call's request, filled as the kubelet's CSI client fills it:
//! the access mode mapped from the volume's first access mode (finer when
//! the driver reports `SINGLE_NODE_MULTI_WRITER`), a mount capability with
//! the volume's fsType and mount options (a block one for fsType `block`),
//! the fsGroup as the mount group when the driver applies it, and the
//! volume context with what the CSIDriver asks for: the pod's own
//! identity, and its service-account tokens; an expansion's request with
//! the new size.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Pod;
use nodeplugins_api::csi::v1 as csi;

use crate::volumes::csi::source::{CsiVolume, Lifecycle};

/// The volume-context key of the pod's name.
pub(crate) const POD_NAME: &str = "csi.storage.k8s.io/pod.name";
/// ... its namespace.
pub(crate) const POD_NAMESPACE: &str = "csi.storage.k8s.io/pod.namespace";
/// ... its UID.
pub(crate) const POD_UID: &str = "csi.storage.k8s.io/pod.uid";
/// ... its service account.
pub(crate) const SERVICE_ACCOUNT: &str = "csi.storage.k8s.io/serviceAccount.name";
/// Whether the volume is inline (`"true"`) or persistent (`"false"`).
pub(crate) const EPHEMERAL: &str = "csi.storage.k8s.io/ephemeral";
/// The pod's service-account tokens, by audience, as JSON.
pub(crate) const TOKENS: &str = "csi.storage.k8s.io/serviceAccount.tokens";

/// The fsType of a raw block volume.
const BLOCK: &str = "block";

/// The CSI access mode of a volume whose first access mode is `modes[0]`
/// (none: `ReadWriteOnce`), mapped finer when the driver reports
/// `SINGLE_NODE_MULTI_WRITER` (`asCSIAccessModeV1` and its
/// `SingleNodeMultiWriterCapable` twin).
pub(crate) fn access_mode(modes: &[String], single_node_multi_writer: bool) -> i32 {
    use csi::volume_capability::access_mode::Mode;
    let mode = match (
        modes.first().map(String::as_str).unwrap_or("ReadWriteOnce"),
        single_node_multi_writer,
    ) {
        ("ReadWriteOnce", false) | ("ReadWriteOncePod", false) => Mode::SingleNodeWriter,
        ("ReadWriteOnce", true) => Mode::SingleNodeMultiWriter,
        ("ReadWriteOncePod", true) => Mode::SingleNodeSingleWriter,
        ("ReadOnlyMany", _) => Mode::MultiNodeReaderOnly,
        ("ReadWriteMany", _) => Mode::MultiNodeMultiWriter,
        _ => Mode::Unknown,
    };
    mode as i32
}

/// The capability a call names the volume with.
fn capability(
    volume: &CsiVolume,
    mount_flags: Vec<String>,
    mount_group: Option<u32>,
    single_node_multi_writer: bool,
) -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
    let access_type = if volume.fs_type == BLOCK {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume {
            fs_type: volume.fs_type.clone(),
            mount_flags,
            volume_mount_group: mount_group.map(|g| g.to_string()).unwrap_or_default(),
        })
    };
    csi::VolumeCapability {
        access_type: Some(access_type),
        access_mode: Some(AccessMode {
            mode: access_mode(&volume.access_modes, single_node_multi_writer),
        }),
    }
}

/// `NodeStageVolume` of `volume` at `staging_path`: the volume's attributes
/// alone as its context.
pub(crate) fn stage(
    volume: &CsiVolume,
    staging_path: &str,
    secrets: BTreeMap<String, String>,
    mount_group: Option<u32>,
    single_node_multi_writer: bool,
) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: volume.handle.clone(),
        publish_context: volume.publish_context.clone().into_iter().collect(),
        staging_target_path: staging_path.to_string(),
        volume_capability: Some(capability(
            volume,
            volume.mount_options.clone(),
            mount_group,
            single_node_multi_writer,
        )),
        secrets: secrets.into_iter().collect(),
        volume_context: volume.attributes.clone().into_iter().collect(),
    }
}

/// What a publish is given besides the volume.
pub(crate) struct PublishExtras {
    /// The staging path (only when the driver stages).
    pub(crate) staging_path: Option<String>,
    /// Where to publish it.
    pub(crate) target_path: String,
    pub(crate) secrets: BTreeMap<String, String>,
    /// The volume's attributes with the pod's information and tokens.
    pub(crate) context: BTreeMap<String, String>,
    pub(crate) mount_group: Option<u32>,
    pub(crate) single_node_multi_writer: bool,
}

/// `NodePublishVolume` of `volume`: mount options only of a persistent
/// volume.
pub(crate) fn publish(volume: &CsiVolume, extras: PublishExtras) -> csi::NodePublishVolumeRequest {
    let flags = match volume.lifecycle {
        Lifecycle::Persistent => volume.mount_options.clone(),
        Lifecycle::Ephemeral => Vec::new(),
    };
    csi::NodePublishVolumeRequest {
        volume_id: volume.handle.clone(),
        publish_context: volume.publish_context.clone().into_iter().collect(),
        staging_target_path: extras.staging_path.unwrap_or_default(),
        target_path: extras.target_path,
        volume_capability: Some(capability(
            volume,
            flags,
            extras.mount_group,
            extras.single_node_multi_writer,
        )),
        readonly: volume.read_only,
        secrets: extras.secrets.into_iter().collect(),
        volume_context: extras.context.into_iter().collect(),
    }
}

/// `NodeExpandVolume` of `volume` published at `volume_path` (and staged
/// at `staging_path`) to `bytes`: its mount options, no mount group.
pub(crate) fn expand(
    volume: &CsiVolume,
    volume_path: &str,
    staging_path: &str,
    bytes: i64,
    secrets: BTreeMap<String, String>,
    single_node_multi_writer: bool,
) -> csi::NodeExpandVolumeRequest {
    csi::NodeExpandVolumeRequest {
        volume_id: volume.handle.clone(),
        volume_path: volume_path.to_string(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        staging_target_path: staging_path.to_string(),
        volume_capability: Some(capability(
            volume,
            volume.mount_options.clone(),
            None,
            single_node_multi_writer,
        )),
        secrets: secrets.into_iter().collect(),
    }
}

/// The pod's identity as the volume context carries it (`podInfoOnMount`).
pub(crate) fn pod_info(pod: &Pod, lifecycle: Lifecycle) -> BTreeMap<String, String> {
    let text = |v: Option<&String>| v.cloned().unwrap_or_default();
    [
        (POD_NAME, text(pod.metadata.name.as_ref())),
        (POD_NAMESPACE, text(pod.metadata.namespace.as_ref())),
        (POD_UID, text(pod.metadata.uid.as_ref())),
        (
            SERVICE_ACCOUNT,
            text(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.service_account_name.as_ref()),
            ),
        ),
        (EPHEMERAL, (lifecycle == Lifecycle::Ephemeral).to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The tokens, by audience, as the kubelet writes them: a JSON object of
/// `{"token": ..., "expirationTimestamp": ...}` (a `TokenRequestStatus`).
pub(crate) fn tokens_json(tokens: &BTreeMap<String, (String, SystemTime)>) -> String {
    let mut out = String::from("{");
    for (i, (audience, (token, expires))) in tokens.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let expires = k8s_openapi::jiff::Timestamp::try_from(*expires)
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default();
        out.push_str(&format!(
            "{}:{{\"token\":{},\"expirationTimestamp\":{}}}",
            json_string(audience),
            json_string(token),
            json_string(&expires)
        ));
    }
    out.push('}');
    out
}

fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use csi::volume_capability::access_mode::Mode;

    #[test]
    fn access_modes_map_as_the_kubelets_and_finer_with_multi_writer() {
        let m = |mode: &str, snmw| access_mode(&[mode.to_string()], snmw);
        assert_eq!(m("ReadWriteOnce", false), Mode::SingleNodeWriter as i32);
        assert_eq!(m("ReadWriteOncePod", false), Mode::SingleNodeWriter as i32);
        assert_eq!(m("ReadWriteOnce", true), Mode::SingleNodeMultiWriter as i32);
        assert_eq!(
            m("ReadWriteOncePod", true),
            Mode::SingleNodeSingleWriter as i32
        );
        assert_eq!(m("ReadOnlyMany", true), Mode::MultiNodeReaderOnly as i32);
        assert_eq!(m("ReadWriteMany", false), Mode::MultiNodeMultiWriter as i32);
        assert_eq!(access_mode(&[], false), Mode::SingleNodeWriter as i32);
    }

    #[test]
    fn tokens_are_written_as_token_request_statuses() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let tokens: BTreeMap<String, (String, SystemTime)> =
            [("vault".to_string(), ("t\"1".to_string(), at))].into();
        assert_eq!(
            tokens_json(&tokens),
            r#"{"vault":{"token":"t\"1","expirationTimestamp":"2027-01-15T08:00:00Z"}}"#
        );
    }
}
