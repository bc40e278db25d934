//! The CDI spec files a container runtime reads, and the fully qualified
//! device names they resolve: a CDI device id a driver answers with that
//! no spec names makes the runtime refuse the container. A spec is JSON or
//! YAML (`kind: vendor/class`, `devices[].name`); a file that cannot be
//! read as one is left out, as a runtime's CDI cache leaves it out.

use std::collections::BTreeSet;
use std::path::PathBuf;

/// One spec file's part that names devices.
#[derive(serde::Deserialize)]
struct Spec {
    kind: String,
    #[serde(default)]
    devices: Vec<SpecDevice>,
}

#[derive(serde::Deserialize)]
struct SpecDevice {
    name: String,
}

/// The device names the spec files of some directories resolve.
#[derive(Debug, Default)]
pub(crate) struct CdiSpecs {
    names: BTreeSet<String>,
}

impl CdiSpecs {
    /// Reads every `*.json`, `*.yaml` and `*.yml` file in `dirs` (a missing
    /// directory has none).
    pub(crate) fn load(dirs: &[PathBuf]) -> Self {
        let mut names = BTreeSet::new();
        let files = dirs
            .iter()
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.extension()
                    .is_some_and(|e| e == "json" || e == "yaml" || e == "yml")
            });
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let Ok(spec) = serde_yaml_ng::from_str::<Spec>(&text) else {
                continue;
            };
            for device in spec.devices {
                names.insert(format!("{}={}", spec.kind, device.name));
            }
        }
        Self { names }
    }

    /// Whether a spec names `id` (`vendor/class=name`).
    pub(crate) fn resolves(&self, id: &str) -> bool {
        self.names.contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_specs_resolve_their_devices_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.json"),
            r#"{"cdiVersion":"0.6.0","kind":"gpu.example.com/gpu","devices":[{"name":"gpu-0","containerEdits":{}}]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("b.yaml"),
            "cdiVersion: 0.6.0\nkind: nic.example.com/nic\ndevices:\n  - name: nic-1\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("c.json"), "not a spec").unwrap();
        std::fs::write(
            dir.path().join("d.txt"),
            r#"{"kind":"x.example.com/x","devices":[{"name":"x"}]}"#,
        )
        .unwrap();
        let specs = CdiSpecs::load(&[dir.path().to_owned(), dir.path().join("missing")]);
        assert!(specs.resolves("gpu.example.com/gpu=gpu-0"));
        assert!(specs.resolves("nic.example.com/nic=nic-1"));
        assert!(!specs.resolves("gpu.example.com/gpu=gpu-1"));
        assert!(
            !specs.resolves("x.example.com/x=x"),
            "not a spec file's extension"
        );
    }
}
