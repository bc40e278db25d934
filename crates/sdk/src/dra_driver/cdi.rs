//! CDI spec files for prepared claims: one file per claim in the CDI
//! directory (`/var/run/cdi` by default), with one CDI device per prepared
//! device that has container edits. The container runtime reads them when
//! the container starts; they are written before prepare answers, removed
//! when the claim is unprepared, and written again at start for every
//! prepared claim whose file is missing (`/var/run` is emptied at boot).
//!
//! Each file is written atomically (`crate::cdi`).
//!
//! Written here rather than through the CNCF's `container-device-interface`
//! crate (1.1.1), measured against this workspace's lock file: it would add
//! 77 crates to a plugin's build, among them `reqwest` with `aws-lc-sys` (a
//! C library built from source), `jsonschema`, `clap` (a library taking a
//! command line parser) and `serde_yaml` (no longer maintained); its
//! qualified-name check prints to standard output; and a plugin needs of
//! it only the few fields of a spec it writes. What the runtime requires of
//! a spec (a fully qualified kind, device names, the version) is checked
//! where specs are read back: the conformance rule `dra.prepare.cdi-ids`
//! resolves every id a driver answers with against the spec files.

use std::path::PathBuf;

use super::claim::PreparedClaim;
use crate::cdi::write_spec;

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

    /// The CDI device names of `claim`'s devices: `<uid>-<device>`, unique
    /// per claim; when two devices of the claim share a name (device names
    /// are unique only within a pool), `<uid>-<index>-<device>` for all.
    fn device_names(claim: &PreparedClaim) -> Vec<String> {
        let uid = &claim.claim.uid;
        let names: Vec<&str> = claim.devices.iter().map(|d| d.device.as_str()).collect();
        let unique = names
            .iter()
            .enumerate()
            .all(|(i, name)| !names[..i].contains(name));
        names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                if unique {
                    format!("{uid}-{name}")
                } else {
                    format!("{uid}-{i}-{name}")
                }
            })
            .collect()
    }

    /// The spec file of claim `uid`.
    pub(crate) fn path(&self, uid: &str) -> PathBuf {
        let kind = self.kind.replace('/', "-");
        self.dir.join(format!("{kind}_{uid}.json"))
    }

    /// Adds the CDI id of each device with container edits to its ids.
    pub(crate) fn assign_ids(&self, claim: &mut PreparedClaim) {
        let names = Self::device_names(claim);
        for (device, name) in claim.devices.iter_mut().zip(names) {
            if device.container_edits.is_some() {
                let id = format!("{}={name}", self.kind);
                if !device.cdi_device_ids.contains(&id) {
                    device.cdi_device_ids.push(id);
                }
            }
        }
    }

    /// Writes the spec file of `claim` (atomically), if it has any device
    /// with container edits.
    pub(crate) fn write(&self, claim: &PreparedClaim) -> std::io::Result<()> {
        let devices: Vec<(String, &_)> = claim
            .devices
            .iter()
            .zip(Self::device_names(claim))
            .filter_map(|(d, name)| d.container_edits.as_ref().map(|edits| (name, edits)))
            .collect();
        if devices.is_empty() {
            return Ok(());
        }
        write_spec(&self.path(claim.claim.uid.as_str()), &self.kind, &devices)
    }

    /// Writes the spec file of `claim` if it is missing.
    pub(crate) fn ensure(&self, claim: &PreparedClaim) -> std::io::Result<bool> {
        if self.path(claim.claim.uid.as_str()).exists() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdi::ContainerEdits;
    use crate::dra_driver::{ClaimRef, PreparedDevice, PreparedState};

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
            state: PreparedState::Prepared,
            boot_id: None,
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

    fn gpu(pool: &str, device: &str) -> PreparedDevice {
        PreparedDevice {
            pool: pool.into(),
            device: device.into(),
            container_edits: Some(ContainerEdits::default()),
            ..Default::default()
        }
    }

    #[test]
    fn devices_of_the_same_name_from_two_pools_get_distinct_cdi_devices() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path(), "dra.example.com/gpu");
        let mut claim = PreparedClaim {
            claim: ClaimRef {
                namespace: "ns".into(),
                name: "c".into(),
                uid: "u1".into(),
            },
            devices: vec![gpu("pool-a", "gpu-0"), gpu("pool-b", "gpu-0")],
            state: PreparedState::Prepared,
            boot_id: None,
        };
        specs.assign_ids(&mut claim);
        let ids: Vec<&str> = claim
            .devices
            .iter()
            .map(|d| d.cdi_device_ids[0].as_str())
            .collect();
        assert_eq!(
            ids,
            [
                "dra.example.com/gpu=u1-0-gpu-0",
                "dra.example.com/gpu=u1-1-gpu-0"
            ]
        );
    }

    #[test]
    fn each_write_has_a_temporary_file_of_its_own_and_leaves_none_behind() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path(), "dra.example.com/gpu");
        let claim = PreparedClaim {
            claim: ClaimRef {
                namespace: "ns".into(),
                name: "c".into(),
                uid: "u1".into(),
            },
            devices: vec![gpu("pool", "gpu-0")],
            state: PreparedState::Prepared,
            boot_id: None,
        };
        // A fixed temporary name, as another writer (or a crash) leaves it.
        std::fs::create_dir(dir.path().join("dra.example.com-gpu_u1.json.tmp")).unwrap();
        let writers: Vec<_> = (0..8)
            .map(|_| {
                let (specs, claim) = (specs.clone(), claim.clone());
                std::thread::spawn(move || specs.write(&claim))
            })
            .collect();
        for writer in writers {
            writer.join().unwrap().unwrap();
        }
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "dra.example.com-gpu_u1.json",
                "dra.example.com-gpu_u1.json.tmp"
            ]
        );
        let mode = std::fs::metadata(dir.path().join("dra.example.com-gpu_u1.json"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o644
        );
    }
}
