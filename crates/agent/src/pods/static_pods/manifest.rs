//! Reading the static pod path as the kubelet's file source does
//! (`pkg/kubelet/config/file.go`, `common.go`): one manifest file, or each
//! file of a directory (not recursing, names starting with `.` skipped, in
//! name order); each one `v1` Pod in YAML or JSON, at most 10 MiB, with a
//! name. Each is given the API's defaults, then the kubelet's: a UID
//! hashed from the pod, the node and the file (unless the manifest names
//! one), the name suffixed with the node's, the `default` namespace when
//! it names none, the node as its `spec.nodeName`, the hash, source and
//! first-seen annotations, a toleration of every `NoExecute` taint, and
//! phase `Pending`. A manifest that does not parse, is no valid pod or
//! references API objects is refused with the kubelet's reason, and the
//! others are read on; of two pods with one name, the later file's is read.
//!
//! The UID is a hash of the manifest's pod as the agent reads it, so it is
//! stable across restarts and changes with the manifest as the kubelet's
//! does; its value differs from the kubelet's (a hash of the kubelet's
//! internal Go structure).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use sha2::{Digest, Sha256};

use super::references::api_object_reference;
use super::validation::validate;
use crate::pods::admit::spec::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION};

/// The most of a manifest read (`maxConfigLength`).
const MAX_MANIFEST_BYTES: u64 = 10 << 20;
/// How a manifest whose pod another file names too is refused.
pub(crate) const DUPLICATE: &str = "another manifest names pod";
/// The source annotation's value for a pod from a file.
pub(crate) const FILE_SOURCE: &str = "file";

/// What the static pod path holds.
#[derive(Debug, Default)]
pub(crate) struct Manifests {
    /// The pods, in file order.
    pub(crate) pods: Vec<StaticPod>,
    /// The manifests refused, each with why.
    pub(crate) refused: Vec<Refused>,
}

/// One static pod and the file it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StaticPod {
    pub(crate) file: PathBuf,
    /// Defaulted as the kubelet does; its UID is `metadata.uid`.
    pub(crate) pod: Pod,
}

/// A manifest the kubelet would not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) file: PathBuf,
    pub(crate) error: String,
}

/// Reads `path` (a manifest or a directory of them) for node `node`. A
/// path that does not exist holds no pods; one that cannot be read is an
/// error (the pods read before stay as they were).
pub(crate) fn read(path: &Path, node: &str) -> std::io::Result<Manifests> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Manifests::default()),
        Err(e) => return Err(e),
    };
    let files = if metadata.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            files.push(entry.path());
        }
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut manifests = Manifests::default();
    // Each pod's namespace and name → its place in `pods`.
    let mut names = HashMap::new();
    for file in files {
        match std::fs::metadata(&file) {
            Ok(m) if m.is_file() => {}
            Ok(m) if m.is_dir() => {
                tracing::debug!(path = %file.display(), "a directory in the static pod path; not recursing into it");
                continue;
            }
            Ok(_) => {
                tracing::debug!(path = %file.display(), "neither a directory nor a file in the static pod path");
                continue;
            }
            // Gone since it was listed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                manifests.refused.push(Refused {
                    file,
                    error: e.to_string(),
                });
                continue;
            }
        }
        match read_one(&file, node) {
            Ok(pod) => {
                let full_name = (
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                );
                // Of two pods of one name the later file's is read, as the
                // kubelet's store keeps the last of a key.
                if let Some(&at) = names.get(&full_name) {
                    let StaticPod { file: earlier, .. } = std::mem::replace(
                        &mut manifests.pods[at],
                        StaticPod {
                            file: file.clone(),
                            pod,
                        },
                    );
                    manifests.refused.push(Refused {
                        file: earlier,
                        error: format!(
                            "{DUPLICATE} {:?}: {} is read instead",
                            full_name.1,
                            file.display()
                        ),
                    });
                } else {
                    names.insert(full_name, manifests.pods.len());
                    manifests.pods.push(StaticPod { file, pod });
                }
            }
            Err(ReadError::Gone) => {}
            Err(ReadError::Refused(error)) => manifests.refused.push(Refused { file, error }),
        }
    }
    Ok(manifests)
}

enum ReadError {
    /// Removed while it was read: not a manifest any more.
    Gone,
    Refused(String),
}

/// One manifest, parsed and defaulted for `node`.
fn read_one(file: &Path, node: &str) -> Result<Pod, ReadError> {
    let mut data = Vec::new();
    match std::fs::File::open(file) {
        Ok(f) => f
            .take(MAX_MANIFEST_BYTES)
            .read_to_end(&mut data)
            .map_err(|e| ReadError::Refused(e.to_string()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Gone),
        Err(e) => return Err(ReadError::Refused(e.to_string())),
    };
    let couldnt_parse = |e: String| {
        format!(
            "{}: couldn't parse as pod({e}), please check config file",
            file.display()
        )
    };
    let value: serde_json::Value = serde_yaml_ng::from_slice(&data)
        .map_err(|e| ReadError::Refused(couldnt_parse(e.to_string())))?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let version = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if kind.is_empty() {
        return Err(ReadError::Refused(couldnt_parse(
            "Object 'Kind' is missing".into(),
        )));
    }
    if version != "v1" || kind != "Pod" {
        return Err(ReadError::Refused(format!(
            "invalid pod: a {version} {kind}, not a v1 Pod"
        )));
    }
    let mut pod: Pod = serde_json::from_value(value)
        .map_err(|e| ReadError::Refused(couldnt_parse(e.to_string())))?;
    if pod.metadata.name.as_deref().unwrap_or("").is_empty() {
        return Err(ReadError::Refused(
            "invalid pod: name is needed for the pod".into(),
        ));
    }
    super::api_defaults::apply(&mut pod);
    kubelet_defaults(&mut pod, file, node);
    validate(&pod).map_err(|errors| ReadError::Refused(format!("invalid pod: {errors}")))?;
    if let Some(resource) = api_object_reference(&pod) {
        return Err(ReadError::Refused(format!(
            "static pods may not reference {resource}"
        )));
    }
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CONFIG_SOURCE_ANNOTATION.into(), FILE_SOURCE.into());
    Ok(pod)
}

/// The kubelet's `applyDefaults` for a pod read from `file`.
fn kubelet_defaults(pod: &mut Pod, file: &Path, node: &str) {
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        pod.metadata.uid = Some(uid_of(pod, file, node));
    }
    let name = pod.metadata.name.take().unwrap_or_default();
    pod.metadata.name = Some(format!("{name}-{}", node.to_lowercase()));
    if pod.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        pod.metadata.namespace = Some("default".into());
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node.into());
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CONFIG_HASH_ANNOTATION.into(), uid);
    // Static pods are not evicted for the node's problems.
    let toleration = Toleration {
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        ..Toleration::default()
    };
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    if !tolerations.iter().any(|t| same_toleration(t, &toleration)) {
        tolerations.push(toleration);
    }
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..pod.status.take().unwrap_or_default()
    });
}

/// Whether `a` and `b` tolerate the same taints (`Toleration.MatchToleration`).
fn same_toleration(a: &Toleration, b: &Toleration) -> bool {
    let text = |s: &Option<String>| s.clone().unwrap_or_default();
    text(&a.key) == text(&b.key)
        && text(&a.effect) == text(&b.effect)
        && text(&a.operator) == text(&b.operator)
        && text(&a.value) == text(&b.value)
}

/// The UID of `pod` read from `file` on `node`: 32 hex digits hashed from
/// the pod as read (with the API's defaults), the node and the file.
fn uid_of(pod: &Pod, file: &Path, node: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(serde_json::to_vec(pod).unwrap_or_default());
    hasher.update(format!("host:{node}"));
    hasher.update(format!("file:{}", file.display()));
    let digest = hasher.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}
