//! A container's volume mounts, as the kubelet's `makeMounts` makes them:
//! one per `volumeMount`, in the container's order, from the volume set up
//! for the pod; read-only when the mount says so or the volume always is;
//! the mount's propagation (none: private); read-only all the way down
//! when the mount asks (`recursiveReadOnly`) and the runtime can; the
//! SELinux relabel on every volume whose files the kubelet manages; a
//! `subPath` (or a `subPathExpr` expanded from the container's
//! environment) relative and never climbing out, made when missing and
//! bound under the pod's `volume-subpaths` (`sub_path.rs`).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, VolumeMount};

use crate::runtime::{MountImage, MountPropagation, MountSpec};
use crate::volumes::sub_path::SubPath;

/// A volume of the pod as its containers mount it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodVolume {
    /// Where it is on the host.
    pub host_path: PathBuf,
    /// Whether every mount of it is read-only.
    pub read_only: bool,
    /// Whether the kubelet manages its files (their SELinux labels).
    pub managed: bool,
    /// Its name in the pod's directories: the pod's name of it, or its
    /// PersistentVolume's (the kubelet's inner volume name).
    pub name_on_disk: String,
    /// The image of an `image` volume, which the runtime mounts (then no
    /// `host_path`).
    pub image: Option<VolumeImage>,
}

/// The image an `image` volume is of, as the pod names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeImage {
    /// The image's reference.
    pub reference: String,
    /// Its pull policy (`Always`, `IfNotPresent`, `Never`; none: the
    /// image's default).
    pub pull_policy: Option<String>,
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
    #[error("failed to resolve recursive read-only mode: {0}")]
    RecursiveReadOnly(String),
    /// An `image` volume whose image was not pulled for the container.
    #[error("image volume {0:?} has no image pulled")]
    ImageNotPulled(String),
    /// A subPath could not be made or bound (the kubelet tells the pod no
    /// more: the details, which may tell of the host, are logged).
    #[error("failed to prepare subPath for volumeMount {mount:?} of container {container:?}")]
    SubPath {
        /// The mount's name.
        mount: String,
        /// The container's name.
        container: String,
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

/// What a container's mounts are made from.
pub(crate) struct MountSources<'a> {
    /// The pod's volumes as set up.
    pub(crate) volumes: &'a PodVolumes,
    /// The pod's directory (`pods/<uid>`), where subPaths are bound.
    pub(crate) pod_dir: &'a Path,
    /// Whether the runtime makes mounts read-only all the way down.
    pub(crate) recursive_supported: bool,
    /// The images of the pod's `image` volumes as pulled, by volume.
    pub(crate) images: &'a BTreeMap<String, String>,
}

/// Container `container`'s volume mounts from `sources`, its environment
/// `env` expanding `subPathExpr`.
pub(crate) fn container_mounts(
    container: &Container,
    sources: &MountSources<'_>,
    env: &[(String, String)],
) -> Result<Vec<MountSpec>, MountError> {
    let volumes = sources.volumes;
    let mut mounts = Vec::new();
    for (index, mount) in container.volume_mounts.iter().flatten().enumerate() {
        let Some(volume) = volumes.get(&mount.name) else {
            return Err(MountError::NoVolume {
                volume: mount.name.clone(),
                container: container.name.clone(),
            });
        };
        let mut sub_path = match (&mount.sub_path, &mount.sub_path_expr) {
            (Some(path), _) if !path.is_empty() => path.clone(),
            (_, Some(expr)) if !expr.is_empty() => {
                let known: BTreeMap<&str, &str> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                crate::pods::expand(expr, |name| known.get(name).map(|v| v.to_string()))
            }
            _ => String::new(),
        };
        if !sub_path.is_empty() {
            checked_sub_path(&sub_path)?;
        }
        let image = match &volume.image {
            Some(source) => Some(MountImage {
                image: sources
                    .images
                    .get(&mount.name)
                    .cloned()
                    .ok_or_else(|| MountError::ImageNotPulled(mount.name.clone()))?,
                user_specified_image: source.reference.clone(),
                // The runtime mounts the image's path itself.
                sub_path: std::mem::take(&mut sub_path),
            }),
            None => None,
        };
        let host_path = if sub_path.is_empty() {
            volume.host_path.clone()
        } else {
            let bound = SubPath {
                volume: &volume.host_path,
                volume_name: &volume.name_on_disk,
                path: Path::new(&sub_path),
                pod_dir: sources.pod_dir,
                container: &container.name,
                index,
            }
            .prepare();
            bound.map_err(|e| {
                tracing::warn!(container = %container.name, mount = %mount.name, error = %e, "cannot prepare the subPath of a volume mount");
                MountError::SubPath {
                    mount: mount.name.clone(),
                    container: container.name.clone(),
                }
            })?
        };
        let read_only = mount.read_only.unwrap_or(false) || volume.read_only;
        let recursive = recursive_read_only(mount, sources.recursive_supported)?;
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
            image,
        });
    }
    Ok(mounts)
}

/// Whether `sub_path` stays within its volume as written: relative, and
/// never climbing out.
fn checked_sub_path(sub_path: &str) -> Result<(), MountError> {
    let relative = Path::new(sub_path);
    let climbs = relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if relative.is_absolute() || climbs {
        return Err(MountError::InvalidSubPath(sub_path.to_string()));
    }
    Ok(())
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
                    name_on_disk: "token".into(),
                    image: None,
                },
            ),
            (
                "host".to_string(),
                PodVolume {
                    host_path: root.path().join("host"),
                    read_only: false,
                    managed: false,
                    name_on_disk: "host".into(),
                    image: None,
                },
            ),
        ]);
        std::fs::create_dir_all(root.path().join("host")).unwrap();
        let pod_dir = root.path().join("pod");
        let sources = MountSources {
            volumes: &volumes,
            pod_dir: &pod_dir,
            recursive_supported: false,
            images: &BTreeMap::new(),
        };
        let mounts = container_mounts(
            &container(serde_json::json!([
                {"name": "host", "mountPath": "/h", "mountPropagation": "HostToContainer", "subPathExpr": "$(POD)/logs"},
                {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": false},
            ])),
            &sources,
            &[("POD".to_string(), "p1".to_string())],
        )
        .unwrap();
        assert_eq!(mounts[0].container_path, "/h");
        let bound = pod_dir.join("volume-subpaths/host/main/0");
        assert_eq!(mounts[0].host_path, bound.display().to_string());
        assert!(
            root.path().join("host/p1/logs").is_dir(),
            "a missing subPath is made"
        );
        std::fs::write(root.path().join("host/p1/logs/seen"), "x").unwrap();
        assert!(
            bound.join("seen").exists(),
            "the subPath is bound where the container mounts it"
        );
        crate::volumes::sub_path::clean(&pod_dir).unwrap();
        assert!(!pod_dir.join("volume-subpaths").exists());
        assert!(
            root.path().join("host/p1/logs/seen").exists(),
            "cleaning leaves the volume"
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
                name_on_disk: "v".into(),
                image: None,
            },
        )]);
        let sources = MountSources {
            volumes: &volumes,
            pod_dir: Path::new("/nonexistent-pod"),
            recursive_supported: false,
            images: &BTreeMap::new(),
        };
        let err = container_mounts(
            &container(serde_json::json!([{"name": "v", "mountPath": "/v", "subPath": "../etc"}])),
            &sources,
            &[],
        )
        .unwrap_err();
        assert!(matches!(err, MountError::InvalidSubPath(_)), "{err}");
        let err = container_mounts(
            &container(serde_json::json!([{"name": "w", "mountPath": "/w"}])),
            &sources,
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot find volume \"w\" to mount into container \"main\""
        );
    }

    #[test]
    fn an_image_volume_is_the_runtimes_to_mount_read_only_its_sub_path_too() {
        let volumes = PodVolumes::from([(
            "img".to_string(),
            PodVolume {
                host_path: PathBuf::new(),
                read_only: true,
                managed: false,
                name_on_disk: "img".into(),
                image: Some(VolumeImage {
                    reference: "busybox:1".into(),
                    pull_policy: None,
                }),
            },
        )]);
        let pulled = BTreeMap::from([("img".to_string(), "sha256:abc".to_string())]);
        let sources = MountSources {
            volumes: &volumes,
            pod_dir: Path::new("/nonexistent-pod"),
            recursive_supported: false,
            images: &pulled,
        };
        let mounts = container_mounts(
            &container(serde_json::json!([
                {"name": "img", "mountPath": "/i"},
                {"name": "img", "mountPath": "/b", "subPath": "bin"}])),
            &sources,
            &[],
        )
        .unwrap();
        let image = |sub_path: &str| MountImage {
            image: "sha256:abc".into(),
            user_specified_image: "busybox:1".into(),
            sub_path: sub_path.into(),
        };
        assert_eq!(
            mounts
                .iter()
                .map(|m| (m.host_path.as_str(), m.read_only, m.image.clone()))
                .collect::<Vec<_>>(),
            [("", true, Some(image(""))), ("", true, Some(image("bin")))]
        );
        let not_pulled = MountSources {
            images: &BTreeMap::new(),
            ..sources
        };
        let err = container_mounts(
            &container(serde_json::json!([{"name": "img", "mountPath": "/i"}])),
            &not_pulled,
            &[],
        )
        .unwrap_err();
        assert!(matches!(err, MountError::ImageNotPulled(_)), "{err}");
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
            "failed to resolve recursive read-only mode: volume \"v\" requested recursive read-only mode, but it is not supported by the runtime"
        );
        let writable = mount(
            serde_json::json!({"name": "v", "mountPath": "/v", "recursiveReadOnly": "Enabled"}),
        );
        assert_eq!(
            recursive_read_only(&writable, true)
                .unwrap_err()
                .to_string(),
            "failed to resolve recursive read-only mode: volume \"v\" requested recursive read-only mode, but it is not read-only"
        );
        let propagated = mount(
            serde_json::json!({"name": "v", "mountPath": "/v", "readOnly": true,
            "recursiveReadOnly": "IfPossible", "mountPropagation": "HostToContainer"}),
        );
        assert!(recursive_read_only(&propagated, true).is_err());
    }
}
