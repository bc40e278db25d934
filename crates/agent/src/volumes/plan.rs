//! What a pod's volumes are to be, read from its spec alone: each volume
//! some container mounts (through `volumeMounts` or `volumeDevices` of an
//! init, regular or ephemeral container; the others are never set up, as
//! the kubelet's desired-state populator skips them), its kind, and its
//! plugin's place on disk.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    CSIVolumeSource, ConfigMapVolumeSource, DownwardAPIVolumeSource, HostPathVolumeSource,
    ImageVolumeSource, Pod, ProjectedVolumeSource, SecretVolumeSource, Volume,
};

use crate::volumes::csi::names as csi_names;
use crate::volumes::csi::source::migration::InTree;
use crate::volumes::layout;

/// One volume to set up.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedVolume {
    /// Its name in the pod.
    pub(crate) name: String,
    /// What it is.
    pub(crate) kind: VolumeKind,
}

/// What a volume is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum VolumeKind {
    /// A directory of the pod's own, on the node's disk or (`memory`) a
    /// tmpfs.
    EmptyDir {
        /// `medium: Memory`.
        memory: bool,
        /// `sizeLimit`, as written.
        size_limit: Option<String>,
    },
    /// A path of the host.
    HostPath(HostPathVolumeSource),
    /// A ConfigMap's keys as files.
    ConfigMap(ConfigMapVolumeSource),
    /// A Secret's keys as files.
    Secret(SecretVolumeSource),
    /// The pod's own fields as files.
    DownwardApi(DownwardAPIVolumeSource),
    /// Several sources in one directory (the service-account token, a
    /// ConfigMap's, a Secret's and the downward API's files).
    Projected(ProjectedVolumeSource),
    /// A CSI driver's inline volume.
    Csi(CSIVolumeSource),
    /// An inline volume of an in-tree plugin whose volumes a CSI driver
    /// now serves (`awsElasticBlockStore`, …), translated when set up.
    Migrated(InTree, Box<Volume>),
    /// A claim of the pod's namespace: its PersistentVolume's (a CSI
    /// driver's). A generic ephemeral volume is one too, of the claim made
    /// for the pod.
    Claim {
        /// The claim's name.
        name: String,
        /// The pod mounts it read-only.
        read_only: bool,
        /// A generic ephemeral volume: the claim must be the pod's own.
        ephemeral: bool,
    },
    /// An OCI image's files, mounted by the runtime (nothing on the
    /// node's disk: the kubelet's image plugin sets up nothing).
    Image(ImageVolumeSource),
    /// A kind the agent does not set up (named as the API names it).
    Unsupported(&'static str),
}

impl VolumeKind {
    /// Its plugin's name (its directory under `volumes/`, escaped).
    pub(crate) fn plugin(&self) -> &'static str {
        match self {
            Self::EmptyDir { .. } => layout::EMPTY_DIR,
            Self::HostPath(_) => layout::HOST_PATH,
            Self::ConfigMap(_) => layout::CONFIG_MAP,
            Self::Secret(_) => layout::SECRET,
            Self::DownwardApi(_) => layout::DOWNWARD_API,
            Self::Projected(_) => layout::PROJECTED,
            Self::Csi(_) | Self::Migrated(..) | Self::Claim { .. } => csi_names::PLUGIN,
            Self::Image(_) => layout::IMAGE,
            Self::Unsupported(kind) => kind,
        }
    }

    /// Its kind as the pod's spec names it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::EmptyDir { .. } => "emptyDir",
            Self::HostPath(_) => "hostPath",
            Self::ConfigMap(_) => "configMap",
            Self::Secret(_) => "secret",
            Self::DownwardApi(_) => "downwardAPI",
            Self::Projected(_) => "projected",
            Self::Csi(_) => "csi",
            Self::Migrated(plugin, _) => plugin.kind(),
            Self::Claim {
                ephemeral: false, ..
            } => "persistentVolumeClaim",
            Self::Claim {
                ephemeral: true, ..
            } => "ephemeral",
            Self::Image(_) => "image",
            Self::Unsupported(kind) => kind,
        }
    }
}

/// The volumes of `pod` to set up, in the spec's order: those some
/// container mounts.
pub(crate) fn plan(pod: &Pod) -> Vec<PlannedVolume> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let used = used_volumes(pod);
    spec.volumes
        .iter()
        .flatten()
        .filter(|v| used.contains(v.name.as_str()))
        .map(|v| PlannedVolume {
            name: v.name.clone(),
            kind: kind_of(pod, v),
        })
        .collect()
}

/// The names of the volumes some container of `pod` mounts.
fn used_volumes(pod: &Pod) -> BTreeSet<&str> {
    let mut used = BTreeSet::new();
    let Some(spec) = pod.spec.as_ref() else {
        return used;
    };
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for container in containers {
        for mount in container.volume_mounts.iter().flatten() {
            used.insert(mount.name.as_str());
        }
        for device in container.volume_devices.iter().flatten() {
            used.insert(device.name.as_str());
        }
    }
    for container in spec.ephemeral_containers.iter().flatten() {
        for mount in container.volume_mounts.iter().flatten() {
            used.insert(mount.name.as_str());
        }
        for device in container.volume_devices.iter().flatten() {
            used.insert(device.name.as_str());
        }
    }
    used
}

/// What volume `volume` of pod `pod` is.
fn kind_of(pod: &Pod, volume: &Volume) -> VolumeKind {
    if let Some(dir) = &volume.empty_dir {
        return VolumeKind::EmptyDir {
            memory: dir.medium.as_deref() == Some("Memory"),
            size_limit: dir.size_limit.as_ref().map(|q| q.0.clone()),
        };
    }
    if let Some(host) = &volume.host_path {
        return VolumeKind::HostPath(host.clone());
    }
    if let Some(source) = &volume.config_map {
        return VolumeKind::ConfigMap(source.clone());
    }
    if let Some(source) = &volume.secret {
        return VolumeKind::Secret(source.clone());
    }
    if let Some(source) = &volume.downward_api {
        return VolumeKind::DownwardApi(source.clone());
    }
    if let Some(source) = &volume.projected {
        return VolumeKind::Projected(source.clone());
    }
    if let Some(source) = &volume.csi {
        return VolumeKind::Csi(source.clone());
    }
    if let Some(source) = &volume.image {
        return VolumeKind::Image(source.clone());
    }
    if let Some(plugin) = InTree::of_volume(volume) {
        return VolumeKind::Migrated(plugin, Box::new(volume.clone()));
    }
    if let Some(claim) = &volume.persistent_volume_claim {
        return VolumeKind::Claim {
            name: claim.claim_name.clone(),
            read_only: claim.read_only.unwrap_or(false),
            ephemeral: false,
        };
    }
    if volume.ephemeral.is_some() {
        // The claim the ephemeral volume controller makes for the pod.
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        return VolumeKind::Claim {
            name: format!("{pod_name}-{}", volume.name),
            read_only: false,
            ephemeral: true,
        };
    }
    VolumeKind::Unsupported(unsupported_kind(volume))
}

/// The name of a kind the agent does not set up.
fn unsupported_kind(volume: &Volume) -> &'static str {
    let kinds: [(&'static str, bool); 4] = [
        ("nfs", volume.nfs.is_some()),
        ("iscsi", volume.iscsi.is_some()),
        ("fc", volume.fc.is_some()),
        ("gitRepo", volume.git_repo.is_some()),
    ];
    kinds
        .into_iter()
        .find(|(_, set)| *set)
        .map_or("unknown", |(name, _)| name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn only_volumes_a_container_mounts_are_planned_in_the_specs_order() {
        let pod = pod(serde_json::json!({
            "initContainers": [{"name": "init", "volumeMounts": [{"name": "cfg", "mountPath": "/c"}]}],
            "containers": [{"name": "main", "volumeMounts": [
                {"name": "scratch", "mountPath": "/s"},
                {"name": "token", "mountPath": "/t"},
            ]}],
            "volumes": [
                {"name": "token", "projected": {"sources": []}},
                {"name": "unused", "secret": {"secretName": "s"}},
                {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                {"name": "cfg", "configMap": {"name": "c"}},
                {"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}},
            ],
        }));
        let planned = plan(&pod);
        let names: Vec<&str> = planned.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["token", "scratch", "cfg"]);
        assert_eq!(
            planned[1].kind,
            VolumeKind::EmptyDir {
                memory: true,
                size_limit: Some("1Mi".into())
            }
        );
        assert_eq!(planned[2].kind.plugin(), "kubernetes.io/configmap");
    }

    #[test]
    fn an_image_volume_is_planned_and_a_kind_not_set_up_here_is_named() {
        let pod = pod(serde_json::json!({
            "containers": [{"name": "main", "volumeMounts": [
                {"name": "data", "mountPath": "/d"}, {"name": "share", "mountPath": "/s"}]}],
            "volumes": [{"name": "data", "image": {"reference": "busybox"}},
                        {"name": "share", "nfs": {"server": "s", "path": "/x"}}],
        }));
        let planned = plan(&pod);
        assert_eq!(
            planned[0].kind,
            VolumeKind::Image(ImageVolumeSource {
                reference: Some("busybox".into()),
                pull_policy: None,
            })
        );
        assert_eq!(planned[1].kind, VolumeKind::Unsupported("nfs"));
    }

    #[test]
    fn claims_and_generic_ephemeral_volumes_are_the_pods_claims() {
        let pod = pod(serde_json::json!({
            "containers": [{"name": "main", "volumeMounts": [
                {"name": "data", "mountPath": "/d"},
                {"name": "scratch", "mountPath": "/s"},
            ]}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "c", "readOnly": true}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            ],
        }));
        let planned = plan(&pod);
        assert_eq!(
            planned[0].kind,
            VolumeKind::Claim {
                name: "c".into(),
                read_only: true,
                ephemeral: false
            }
        );
        assert_eq!(
            planned[1].kind,
            VolumeKind::Claim {
                name: "p-scratch".into(),
                read_only: false,
                ephemeral: true
            }
        );
        assert_eq!(planned[1].kind.plugin(), "kubernetes.io/csi");
    }
}
