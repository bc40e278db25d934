//! CDI spec files for prepared claims: one file per claim in the CDI
//! directory (`/var/run/cdi` by default), with one CDI device per prepared
//! device that has container edits. The container runtime reads them when
//! the container starts; they are written before prepare answers, removed
//! when the claim is unprepared, and written again at start for every
//! prepared claim whose file is missing (`/var/run` is emptied at boot).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::claim::PreparedClaim;

/// The CDI version of the files written.
pub const CDI_VERSION: &str = "0.6.0";
/// The default CDI spec directory.
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";

/// What the container needs for a device (CDI `containerEdits`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// Environment variables, `NAME=value`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Device nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<CdiDeviceNode>,
    /// Mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<CdiMount>,
}

/// A device node (CDI `deviceNodes` entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiDeviceNode {
    /// Path in the container.
    pub path: String,
    /// Path on the host, if not the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// Cgroup permissions (`rwm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
}

/// A mount (CDI `mounts` entry).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    /// Path on the host.
    pub host_path: String,
    /// Path in the container.
    pub container_path: String,
    /// Mount options.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec<'a> {
    cdi_version: &'static str,
    kind: &'a str,
    devices: Vec<SpecDevice<'a>>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct SpecDevice<'a> {
    name: String,
    container_edits: &'a ContainerEdits,
}

/// CDI spec files of kind `vendor/class` in a directory.
#[derive(Debug, Clone)]
pub(crate) struct CdiSpecs {
    dir: PathBuf,
    kind: String,
}

impl CdiSpecs {
    pub(crate) fn new(dir: impl Into<PathBuf>, kind: impl Into<String>) -> Self {
        Self {
            dir: dir.into(),
            kind: kind.into(),
        }
    }

    /// The CDI device name of `device` in claim `uid`: unique per claim.
    fn device_name(uid: &str, device: &str) -> String {
        format!("{uid}-{device}")
    }

    /// The spec file of claim `uid`.
    pub(crate) fn path(&self, uid: &str) -> PathBuf {
        let kind = self.kind.replace('/', "-");
        self.dir.join(format!("{kind}_{uid}.json"))
    }

    /// Adds the CDI id of each device with container edits to its ids.
    pub(crate) fn assign_ids(&self, claim: &mut PreparedClaim) {
        for device in &mut claim.devices {
            if device.container_edits.is_some() {
                let id = format!(
                    "{}={}",
                    self.kind,
                    Self::device_name(&claim.claim.uid, &device.device)
                );
                if !device.cdi_device_ids.contains(&id) {
                    device.cdi_device_ids.push(id);
                }
            }
        }
    }

    /// Writes the spec file of `claim` (atomically), if it has any device
    /// with container edits.
    pub(crate) fn write(&self, claim: &PreparedClaim) -> std::io::Result<()> {
        let devices: Vec<SpecDevice<'_>> = claim
            .devices
            .iter()
            .filter_map(|d| {
                d.container_edits.as_ref().map(|edits| SpecDevice {
                    name: Self::device_name(&claim.claim.uid, &d.device),
                    container_edits: edits,
                })
            })
            .collect();
        if devices.is_empty() {
            return Ok(());
        }
        let spec = Spec {
            cdi_version: CDI_VERSION,
            kind: &self.kind,
            devices,
        };
        let bytes = serde_json::to_vec_pretty(&spec).map_err(std::io::Error::other)?;
        std::fs::create_dir_all(&self.dir)?;
        write_atomically(&self.path(&claim.claim.uid), &bytes)
    }

    /// Writes the spec file of `claim` if it is missing.
    pub(crate) fn ensure(&self, claim: &PreparedClaim) -> std::io::Result<bool> {
        if self.path(&claim.claim.uid).exists() {
            return Ok(false);
        }
        self.write(claim)?;
        Ok(true)
    }

    /// Removes the spec file of claim `uid`, if any.
    pub(crate) fn remove(&self, uid: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.path(uid)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra_driver::{ClaimRef, PreparedDevice};

    #[test]
    fn a_claims_spec_names_each_device_by_claim_and_comes_back_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path(), "dra.example.com/gpu");
        let mut claim = PreparedClaim {
            claim: ClaimRef {
                namespace: "ns".into(),
                name: "c".into(),
                uid: "u1".into(),
            },
            devices: vec![PreparedDevice {
                device: "gpu-0".into(),
                container_edits: Some(ContainerEdits {
                    env: vec!["GPU=0".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        specs.assign_ids(&mut claim);
        assert_eq!(
            claim.devices[0].cdi_device_ids,
            ["dra.example.com/gpu=u1-gpu-0"]
        );
        specs.write(&claim).unwrap();
        let path = dir.path().join("dra.example.com-gpu_u1.json");
        let spec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            spec,
            serde_json::json!({
                "cdiVersion": "0.6.0",
                "kind": "dra.example.com/gpu",
                "devices": [{"name": "u1-gpu-0", "containerEdits": {"env": ["GPU=0"]}}],
            })
        );
        assert!(!specs.ensure(&claim).unwrap(), "present: left alone");
        specs.remove("u1").unwrap();
        assert!(specs.ensure(&claim).unwrap(), "missing: written again");
        assert!(path.exists());
    }
}
