//! A container's volume mounts, as the kubelet's `makeMounts` makes them:
//! one per `volumeMount`, in the container's order, from the volume set up
//! for the pod; read-only when the mount says so or the volume always is;
//! the mount's propagation (none: private); read-only all the way down
//! when the mount asks (`recursiveReadOnly`) and the runtime can; the
//! SELinux relabel on every volume whose files the kubelet manages; a `subPath` (or a `subPathExpr`
//! expanded from the container's environment) relative and never climbing
//! out, made when missing.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, VolumeMount};

use crate::runtime::{MountPropagation, MountSpec};

/// A volume of the pod as its containers mount it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodVolume {
    /// Where it is on the host.
    pub host_path: PathBuf,
    /// Whether every mount of it is read-only.
    pub read_only: bool,
    /// Whether the kubelet manages its files (their SELinux labels).
    pub managed: bool,
}

/// The pod's volumes set up, by name.
pub type PodVolumes = BTreeMap<String, PodVolume>;

/// Why a container's mounts could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MountError {
    /// The container mounts a volume that is not set up.
    #[error("cannot find volume {volume:?} to mount into container {container:?}")]
    NoVolume {
        /// The volume's name.
        volume: String,
        /// The container's name.
        container: String,
    },
    /// A subPath is absolute or climbs out of its volume.
    #[error("invalid subPath {0:?}: must be a relative path that does not contain \"..\"")]
    InvalidSubPath(String),
    /// A mount asks to be read-only all the way down and cannot be.
    #[error("{0}")]
    RecursiveReadOnly(String),
    /// A subPath could not be made.
    #[error("cannot make subPath {path}: {error}")]
    SubPath {
        /// The subPath on the host.
        path: String,
        /// Why.
        error: String,
    },
}

/// Whether `mount` is to be read-only all the way down, on a runtime that
/// can (`supported`) or not (the kubelet's `resolveRecursiveReadOnly`).
pub(crate) fn recursive_read_only(
    mount: &VolumeMount,
    supported: bool,
) -> Result<bool, MountError> {
    let refused = |why: String| {
        Err(MountError::RecursiveReadOnly(format!(
            "volume {:?} requested recursive read-only mode, but {why}",
            mount.name
        )))
    };
    let mode = match mount.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    if mount.read_only != Some(true) {
        return refused("it is not read-only".into());
    }
    if let Some(propagation) = mount.mount_propagation.as_deref()
        && propagation != "None"
    {
        return refused(format!(
            "it is not compatible with propagation {propagation:?}"
        ));
    }
    match mode {
        "IfPossible" => Ok(supported),
        "Enabled" if supported => Ok(true),
        "Enabled" => refused("it is not supported by the runtime".into()),
        other => Err(MountError::RecursiveReadOnly(format!(
            "unknown recursive read-only mode {other:?}"
        ))),
    }
}

/// Container `container`'s volume mounts from `volumes`, its environment
/// `env` expanding `subPathExpr`, on a runtime that can make mounts
/// read-only all the way down or not (`recursive_supported`).
pub(crate) fn container_mounts(
    container: &Container,
    volumes: &PodVolumes,
    env: &[(String, String)],
    recursive_supported: bool,
) -> Result<Vec<MountSpec>, MountError> {
    let mut mounts = Vec::new();
    for mount in container.volume_mounts.iter().flatten() {
        let Some(volume) = volumes.get(&mount.name) else {
            return Err(MountError::NoVolume {
                volume: mount.name.clone(),
                container: container.name.clone(),
            });
        };
        let sub_path = match (&mount.sub_path, &mount.sub_path_expr) {
            (Some(path), _) if !path.is_empty() => path.clone(),
            (_, Some(expr)) if !expr.is_empty() => {
                let known: BTreeMap<&str, &str> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                crate::pods::expand(expr, |name| known.get(name).map(|v| v.to_string()))
            }
            _ => String::new(),
        };
        let host_path = if sub_path.is_empty() {
            volume.host_path.clone()
        } else {
            sub_path_of(&volume.host_path, &sub_path)?
        };
        let read_only = mount.read_only.unwrap_or(false) || volume.read_only;
        let recursive = recursive_read_only(mount, recursive_supported)?;
        let propagation = match mount.mount_propagation.as_deref() {
            Some("HostToContainer") => MountPropagation::HostToContainer,
            Some("Bidirectional") => MountPropagation::Bidirectional,
            _ => MountPropagation::Private,
        };
        mounts.push(MountSpec {
            container_path: mount.mount_path.clone(),
            host_path: host_path.display().to_string(),
            read_only,
            propagation,
            selinux_relabel: volume.managed,
            recursive_read_only: recursive,
        });
    }
    Ok(mounts)
}

/// `sub_path` of the volume at `root`, made (with the root's mode) when
/// missing.
fn sub_path_of(root: &Path, sub_path: &str) -> Result<PathBuf, MountError> {
    let relative = Path::new(sub_path);
    let climbs = relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if relative.is_absolute() || climbs {
        return Err(MountError::InvalidSubPath(sub_path.to_string()));
    }
    let path = root.join(relative);
    if std::fs::symlink_metadata(&path).is_err() {
        let made = std::fs::create_dir_all(&path).and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(root)?.permissions().mode();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o7777))
        });
        made.map_err(|e| MountError::SubPath {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn container(mounts: serde_json::Value) -> Container {
        serde_json::from_value(serde_json::json!({"name": "main", "volumeMounts": mounts})).unwrap()
    }

    #[test]
    fn mounts_follow_the_container_with_read_only_propagation_and_sub_paths() {
        let root = tempfile::tempdir().unwrap();
        let volumes = PodVolumes::from([
            (
                "token".to_string(),
                PodVolume {
                    host_path: root.path().join("token"),
                    read_only: true,
                    managed: true,
                },
            ),
            (
                "host".to_string(),
                PodVolume {
                    host_path: root.path().join("host"),
                    read_only: false,
                    managed: false,
                },
            ),
        ]);
        std::fs::create_dir_all(root.path().join("host")).unwrap();
        let mounts = container_mounts(
            &container(serde_json::json!([
                {"name": "host", "mountPath": "/h", "mountPropagation": "HostToContainer", "subPathExpr": "$(POD)/logs"},
                {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": false},
            ])),
            &volumes,
            &[("POD".to_string(), "p1".to_string())],
            false,
        )
        .unwrap();
        assert_eq!(mounts[0].container_path, "/h");
        assert_eq!(
            mounts[0].host_path,
            root.path().join("host/p1/logs").display().to_string()
        );
        assert!(
            root.path().join("host/p1/logs").is_dir(),
            "a missing subPath is made"
        );
        assert_eq!(mounts[0].propagation, MountPropagation::HostToContainer);
        assert!(!mounts[0].read_only && !mounts[0].selinux_relabel);
        assert!(mounts[1].read_only, "the volume is always read-only");
        assert!(mounts[1].selinux_relabel);
        assert_eq!(mounts[1].propagation, MountPropagation::Private);
    }

    #[test]
    fn a_sub_path_climbing_out_and_a_volume_not_set_up_are_refused() {
        let volumes = PodVolumes::from([(
            "v".to_string(),
            PodVolume {
                host_path: PathBuf::from("/nonexistent"),
                read_only: false,
                managed: true,
            },
        )]);
        let err = container_mounts(
            &container(serde_json::json!([{"name": "v", "mountPath": "/v", "subPath": "../etc"}])),
            &volumes,
            &[],
            false,
        )
        .unwrap_err();
        assert!(matches!(err, MountError::InvalidSubPath(_)), "{err}");
        let err = container_mounts(
            &container(serde_json::json!([{"name": "w", "mountPath": "/w"}])),
            &volumes,
            &[],
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot find volume \"w\" to mount into container \"main\""
        );
    }

    #[test]
    fn recursive_read_only_is_resolved_as_the_kubelet_resolves_it() {
        let mount =
            |json: serde_json::Value| -> VolumeMount { serde_json::from_value(json).unwrap() };
        let ro = |mode: &str| {
            mount(
                serde_json::json!({"name": "v", "mountPath": "/v", "readOnly": true, "recursiveReadOnly": mode}),
            )
        };
        assert!(!recursive_read_only(&ro("Disabled"), true).unwrap());
        assert!(recursive_read_only(&ro("IfPossible"), true).unwrap());
        assert!(!recursive_read_only(&ro("IfPossible"), false).unwrap());
        assert!(recursive_read_only(&ro("Enabled"), true).unwrap());
        assert_eq!(
            recursive_read_only(&ro("Enabled"), false)
                .unwrap_err()
                .to_string(),
            "volume \"v\" requested recursive read-only mode, but it is not supported by the runtime"
        );
        let writable = mount(
            serde_json::json!({"name": "v", "mountPath": "/v", "recursiveReadOnly": "Enabled"}),
        );
        assert_eq!(
            recursive_read_only(&writable, true)
                .unwrap_err()
                .to_string(),
            "volume \"v\" requested recursive read-only mode, but it is not read-only"
        );
        let propagated = mount(
            serde_json::json!({"name": "v", "mountPath": "/v", "readOnly": true,
            "recursiveReadOnly": "IfPossible", "mountPropagation": "HostToContainer"}),
        );
        assert!(recursive_read_only(&propagated, true).is_err());
    }
}
