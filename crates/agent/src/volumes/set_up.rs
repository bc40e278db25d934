//! One volume set up or torn down, by its kind: an emptyDir made (a tmpfs
//! for `medium: Memory`), a hostPath checked, the files of a configMap,
//! secret, downwardAPI or projected volume made first (so that a missing
//! object mounts nothing) and written atomically onto their wrapped
//! emptyDir; the pod's fsGroup over what the kubelet manages. A volume
//! set up already is set up again in place: a tmpfs stays mounted and
//! unchanged files are not written again.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;

use crate::volumes::content::atomic_writer::{self, Payload};
use crate::volumes::content::payload::{self, DEFAULT_MODE, Owners, Sources};
use crate::volumes::csi::plugin::{CsiPlugin, CsiSpec};
use crate::volumes::csi::publish::CsiPod;
use crate::volumes::csi::source::{self, ClaimUse, Claimed};
use crate::volumes::error::SetUpError;
use crate::volumes::kinds::{empty_dir, host_path, local, ownership};
use crate::volumes::layout::{self, PodDirs};
use crate::volumes::mounts::{PodVolume, VolumeImage};
use crate::volumes::plan::{PlannedVolume, VolumeKind};

/// What setting up one of a pod's volumes needs.
pub(crate) struct PodContext<'a> {
    pub(crate) dirs: &'a PodDirs,
    pub(crate) pod: &'a Pod,
    pub(crate) sources: Sources<'a>,
    pub(crate) owners: Owners,
    /// The size of its memory-backed volumes' tmpfs, before `sizeLimit`.
    pub(crate) memory: (Option<i64>, Option<i64>),
    /// The CSI plugin.
    pub(crate) csi: &'a CsiPlugin,
    /// The node's labels.
    pub(crate) labels: &'a BTreeMap<String, String>,
}

impl PodContext<'_> {
    fn csi_pod(&self) -> CsiPod<'_> {
        CsiPod {
            pod: self.pod,
            dirs: self.dirs,
            fs_group: self.owners.fs_group,
            tokens: self.sources.tokens,
        }
    }
}

/// The kubelet's refusal of a `gitRepo` volume.
const GIT_REPO_DISABLED: &str = "git-repo volume plugin has been disabled; if necessary, it may be re-enabled by enabling the feature-gate `GitRepoVolumeDriver`";

fn default_mode(mode: Option<i32>) -> u32 {
    u32::try_from(mode.unwrap_or(DEFAULT_MODE)).unwrap_or(0o644) & 0o7777
}

/// Sets up `volume` of the pod.
pub(crate) async fn set_up(
    ctx: &PodContext<'_>,
    volume: &PlannedVolume,
) -> Result<PodVolume, SetUpError> {
    let namespace = ctx.pod.metadata.namespace.clone().unwrap_or_default();
    let name = volume.name.as_str();
    let payload = match &volume.kind {
        VolumeKind::EmptyDir { memory, size_limit } => {
            let dir = ctx.dirs.volume(layout::EMPTY_DIR, name);
            let limit = size_limit
                .as_deref()
                .and_then(nodeplugins_api::quantity::value);
            let size = empty_dir::memory_size(ctx.memory.0, ctx.memory.1, limit);
            empty_dir::set_up(ctx.dirs, &dir, name, *memory, size).map_err(|e| e.to_string())?;
            if let Some(gid) = ctx.owners.fs_group {
                ownership::apply(&dir, gid, false).map_err(|e| e.to_string())?;
            }
            return Ok(PodVolume {
                host_path: dir,
                read_only: false,
                managed: true,
                name_on_disk: name.to_string(),
                image: None,
            });
        }
        VolumeKind::HostPath(source) => {
            host_path::check(&source.path, source.type_.as_deref()).map_err(|e| e.to_string())?;
            return Ok(PodVolume {
                host_path: PathBuf::from(&source.path),
                read_only: false,
                managed: false,
                name_on_disk: name.to_string(),
                image: None,
            });
        }
        VolumeKind::Image(source) => {
            // The kubelet's image plugin: nothing to set up, read-only;
            // the image is pulled and mounted by the runtime at each
            // container's start.
            return Ok(PodVolume {
                host_path: PathBuf::new(),
                read_only: true,
                managed: false,
                name_on_disk: name.to_string(),
                image: Some(VolumeImage {
                    reference: source.reference.clone().unwrap_or_default(),
                    pull_policy: source.pull_policy.clone(),
                }),
            });
        }
        VolumeKind::Csi(source) => {
            return ctx
                .csi
                .set_up(&ctx.csi_pod(), name, CsiSpec::Inline(source))
                .await;
        }
        VolumeKind::Migrated(_, volume) => {
            return ctx
                .csi
                .set_up(&ctx.csi_pod(), name, CsiSpec::Migrated(volume))
                .await;
        }
        VolumeKind::Claim {
            name: claim,
            read_only,
            ephemeral,
        } => {
            let claim = ClaimUse {
                name: claim,
                read_only: *read_only,
                ephemeral: *ephemeral,
            };
            let claimed = source::claimed(ctx.csi.client(), ctx.pod, claim, ctx.labels).await?;
            return set_up_claimed(ctx, name, claimed).await;
        }
        VolumeKind::Unsupported("gitRepo") => {
            // The kubelet's plugin, its feature gate locked off since 1.36.
            return Err(GIT_REPO_DISABLED.to_string().into());
        }
        VolumeKind::Unsupported(kind) => {
            return Err(format!("{kind} volumes are not set up by this node").into());
        }
        VolumeKind::ConfigMap(source) => payload::config_map(
            &ctx.sources,
            &namespace,
            &source.name,
            source.items.as_ref(),
            default_mode(source.default_mode),
            source.optional.unwrap_or(false),
        )
        .await
        .map_err(|e| e.to_string())?,
        VolumeKind::Secret(source) => payload::secret(
            &ctx.sources,
            &namespace,
            source.secret_name.as_deref().unwrap_or_default(),
            source.items.as_ref(),
            default_mode(source.default_mode),
            source.optional.unwrap_or(false),
        )
        .await
        .map_err(|e| e.to_string())?,
        VolumeKind::DownwardApi(source) => payload::downward_api(
            ctx.pod,
            source.items.as_deref().unwrap_or_default(),
            default_mode(source.default_mode),
            ctx.sources.allocatable,
        )
        .map_err(|e| e.to_string())?,
        VolumeKind::Projected(source) => {
            payload::projected(&ctx.sources, ctx.pod, name, source, ctx.owners)
                .await
                .map_err(|e| e.to_string())?
        }
    };
    let dir = ctx.dirs.volume(volume.kind.plugin(), name);
    // A configMap's files stay on the node's disk; the others' never do.
    let memory = !matches!(volume.kind, VolumeKind::ConfigMap(_));
    write_content(ctx, &dir, name, memory, &payload)?;
    Ok(PodVolume {
        host_path: dir,
        read_only: true,
        managed: true,
        name_on_disk: name.to_string(),
        image: None,
    })
}

/// Sets up the pod's volume `name` of a claim bound to `claimed`.
async fn set_up_claimed(
    ctx: &PodContext<'_>,
    name: &str,
    claimed: Claimed,
) -> Result<PodVolume, SetUpError> {
    match claimed {
        Claimed::Csi(volume) => {
            ctx.csi
                .set_up(&ctx.csi_pod(), name, CsiSpec::Claimed(volume))
                .await
        }
        Claimed::HostPath {
            volume,
            source,
            read_only,
        } => {
            host_path::check(&source.path, source.type_.as_deref())
                .map_err(|e| SetUpError::from(e.to_string()).for_spec(&volume))?;
            Ok(PodVolume {
                host_path: PathBuf::from(&source.path),
                read_only,
                managed: false,
                name_on_disk: volume,
                image: None,
            })
        }
        Claimed::Local {
            volume,
            path,
            read_only,
            mount_options,
        } => {
            let dirs = ctx.dirs.clone();
            let fs_group = ctx.owners.fs_group;
            let name_on_disk = volume.clone();
            let spec = volume.clone();
            let dir = tokio::task::spawn_blocking(move || {
                local::set_up(
                    &dirs,
                    &local::LocalMount {
                        volume: &volume,
                        path: &path,
                        read_only,
                        mount_options: &mount_options,
                        fs_group,
                    },
                )
            })
            .await
            .map_err(|e| format!("setting up failed unexpectedly: {e}"))
            .and_then(|set| set)
            .map_err(|e| SetUpError::from(e).for_spec(&spec))?;
            Ok(PodVolume {
                host_path: dir,
                read_only,
                managed: !read_only,
                name_on_disk,
                image: None,
            })
        }
    }
}

/// Writes `payload` onto the wrapped emptyDir at `dir`.
fn write_content(
    ctx: &PodContext<'_>,
    dir: &std::path::Path,
    name: &str,
    memory: bool,
    payload: &Payload,
) -> Result<(), String> {
    let size = memory
        .then(|| empty_dir::memory_size(ctx.memory.0, ctx.memory.1, None))
        .flatten();
    empty_dir::set_up(ctx.dirs, dir, &format!("wrapped_{name}"), memory, size)
        .map_err(|e| e.to_string())?;
    let gid = ctx.owners.fs_group;
    atomic_writer::write(dir, payload, |ts| match gid {
        Some(gid) => ownership::apply(ts, gid, true),
        None => Ok(()),
    })
    .map_err(|e| e.to_string())?;
    if let Some(gid) = gid {
        // The whole volume, its root and links too, as the kubelet's walk.
        ownership::apply(dir, gid, true).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Tears down volume `name` of plugin `plugin` found on disk.
pub(crate) fn tear_down(dirs: &PodDirs, plugin: &str, name: &str) -> Result<(), String> {
    let dir = dirs.volume(plugin, name);
    match plugin {
        layout::EMPTY_DIR => {
            empty_dir::tear_down(&dir).map_err(|e| e.to_string())?;
            remove_ready(dirs, name)
        }
        local::PLUGIN => local::tear_down(&dir),
        layout::CONFIG_MAP | layout::SECRET | layout::DOWNWARD_API | layout::PROJECTED => {
            empty_dir::tear_down(&dir).map_err(|e| e.to_string())?;
            remove_ready(dirs, &format!("wrapped_{name}"))
        }
        _ => Err(format!(
            "volumes of plugin {plugin} are not torn down by this node"
        )),
    }
}

fn remove_ready(dirs: &PodDirs, ready_name: &str) -> Result<(), String> {
    let ready = dirs.empty_dir_ready(ready_name);
    match ready.parent().map(std::fs::remove_dir_all) {
        Some(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
        _ => Ok(()),
    }
}
