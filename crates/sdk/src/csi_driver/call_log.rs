//! The SDK CSI driver's log of the node calls it served: one JSON line
//! per call, its method and its request (secrets by key only, their
//! values never written), appended to a file, so that a test can compare
//! the calls two nodes made of their drivers.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use nodeplugins_api::csi::v1 as csi;
use serde_json::{Value, json};

/// Where the calls are written.
#[derive(Debug)]
pub(crate) struct CallLog {
    file: Mutex<std::fs::File>,
}

fn sorted(map: &HashMap<String, String>) -> Value {
    let ordered: std::collections::BTreeMap<&String, &String> = map.iter().collect();
    json!(ordered)
}

fn secret_keys(map: &HashMap<String, String>) -> Value {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    json!(keys)
}

fn capability(capability: Option<&csi::VolumeCapability>) -> Value {
    use csi::volume_capability::AccessType;
    let Some(capability) = capability else {
        return Value::Null;
    };
    let mode = capability
        .access_mode
        .as_ref()
        .and_then(|m| csi::volume_capability::access_mode::Mode::try_from(m.mode).ok())
        .map(|m| m.as_str_name());
    let access = match &capability.access_type {
        Some(AccessType::Mount(mount)) => json!({"mount": {
            "fs_type": mount.fs_type,
            "mount_flags": mount.mount_flags,
            "volume_mount_group": mount.volume_mount_group,
        }}),
        Some(AccessType::Block(_)) => json!({"block": {}}),
        None => Value::Null,
    };
    json!({"access_mode": mode, "access_type": access})
}

/// A request as its log line shows it.
pub(crate) trait Logged {
    /// The request's fields.
    fn fields(&self) -> Value;
}

impl Logged for csi::NodeStageVolumeRequest {
    fn fields(&self) -> Value {
        json!({
            "volume_id": self.volume_id,
            "publish_context": sorted(&self.publish_context),
            "staging_target_path": self.staging_target_path,
            "volume_capability": capability(self.volume_capability.as_ref()),
            "secrets": secret_keys(&self.secrets),
            "volume_context": sorted(&self.volume_context),
        })
    }
}

impl Logged for csi::NodePublishVolumeRequest {
    fn fields(&self) -> Value {
        json!({
            "volume_id": self.volume_id,
            "publish_context": sorted(&self.publish_context),
            "staging_target_path": self.staging_target_path,
            "target_path": self.target_path,
            "volume_capability": capability(self.volume_capability.as_ref()),
            "readonly": self.readonly,
            "secrets": secret_keys(&self.secrets),
            "volume_context": sorted(&self.volume_context),
        })
    }
}

impl Logged for csi::NodeUnpublishVolumeRequest {
    fn fields(&self) -> Value {
        json!({"volume_id": self.volume_id, "target_path": self.target_path})
    }
}

impl Logged for csi::NodeUnstageVolumeRequest {
    fn fields(&self) -> Value {
        json!({"volume_id": self.volume_id, "staging_target_path": self.staging_target_path})
    }
}

impl Logged for csi::NodeGetVolumeStatsRequest {
    fn fields(&self) -> Value {
        json!({
            "volume_id": self.volume_id,
            "volume_path": self.volume_path,
            "staging_target_path": self.staging_target_path,
        })
    }
}

impl Logged for csi::NodeExpandVolumeRequest {
    fn fields(&self) -> Value {
        json!({
            "volume_id": self.volume_id,
            "volume_path": self.volume_path,
            "staging_target_path": self.staging_target_path,
            "required_bytes": self.capacity_range.as_ref().map(|c| c.required_bytes),
            "volume_capability": capability(self.volume_capability.as_ref()),
            "secrets": secret_keys(&self.secrets),
        })
    }
}

impl Logged for csi::NodeGetCapabilitiesRequest {
    fn fields(&self) -> Value {
        json!({})
    }
}

impl Logged for csi::NodeGetInfoRequest {
    fn fields(&self) -> Value {
        json!({})
    }
}

impl CallLog {
    /// A log appended to `path`.
    pub(crate) fn open(path: &PathBuf) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }

    /// Writes a call of `method` with `request`, and how it ended.
    pub(crate) fn write(&self, method: &str, request: &dyn Logged, error: Option<&tonic::Status>) {
        let line = json!({
            "method": method,
            "request": request.fields(),
            "error": error.map(|s| format!("{:?}: {}", s.code(), s.message())),
        });
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = writeln!(file, "{line}");
    }
}
