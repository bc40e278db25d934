//! A CSI volume published into a pod and unpublished, as the kubelet's
//! `SetUpAt` and `TearDownAt` do. Publishing: the driver's capabilities
//! asked as the kubelet asks them (staging, mount group, multi-writer),
//! the volume's directory made (0750; the driver makes `mount`), the
//! secret, the pod's identity and its tokens gathered as the CSIDriver
//! asks, `vol_data.json` written, `NodePublishVolume` called, and the
//! fsGroup applied when the driver does not apply it. A publish that
//! failed for good leaves nothing (unless the volume was published
//! before: the pod keeps what it has); one the driver may still be at
//! work on keeps its marks, so that it is unpublished all the same.
//! Unpublishing: `NodeUnpublishVolume` from what `vol_data.json` says,
//! then the directory removed once nothing is mounted there.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::volumes::content::token::{TokenKey, TokenManager};
use crate::volumes::csi::calls::DriverCalls;
use crate::volumes::csi::context::CsiContext;
use crate::volumes::csi::driver_objects::DriverPolicy;
use crate::volumes::csi::mount_dir::{make_dirs, remove_mount_dir};
use crate::volumes::csi::names;
use crate::volumes::csi::requests::{self, PublishExtras};
use crate::volumes::csi::source::{CsiVolume, Lifecycle};
use crate::volumes::csi::stats::StatsTarget;
use crate::volumes::csi::vol_data::{self, VolData};
use crate::volumes::kinds::{ownership, tmpfs};
use crate::volumes::layout::PodDirs;
use crate::volumes::mounts::PodVolume;

/// The pod a CSI volume is set up for.
pub(crate) struct CsiPod<'a> {
    pub(crate) pod: &'a Pod,
    pub(crate) dirs: &'a PodDirs,
    pub(crate) fs_group: Option<u32>,
    pub(crate) tokens: &'a TokenManager,
}

/// What a volume torn down was, from its `vol_data.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unpublished {
    pub(crate) driver: String,
    pub(crate) handle: String,
    pub(crate) lifecycle: Lifecycle,
}

/// Publishes `volume` into `pod` (staged already when persistent).
pub(crate) async fn set_up(
    plugin: &CsiContext,
    calls: &DriverCalls,
    pod: &CsiPod<'_>,
    volume: &CsiVolume,
    policy: &DriverPolicy,
) -> Result<PodVolume, String> {
    let dir = pod.dirs.volume(names::PLUGIN, &volume.dir_name());
    let target = dir.join(names::MOUNT_DIR);
    let set = PodVolume {
        host_path: target.clone(),
        read_only: volume.read_only,
        managed: !volume.read_only,
        name_on_disk: volume.spec_name.clone(),
        image: None,
    };
    let remount = plugin.is_published(&target);
    if remount && !policy.requires_republish {
        return Ok(set);
    }
    let staging_path = match volume.lifecycle {
        Lifecycle::Persistent => calls
            .capabilities()
            .await
            .map_err(|e| {
                format!(
                    "kubernetes.io/csi: mounter.SetUpAt failed to check for STAGE_UNSTAGE_VOLUME capability: {e}"
                )
            })?
            .stage_unstage
            .then(|| names::staging_path(&plugin.root, &volume.driver, &volume.handle))
            .map(|p| p.to_string_lossy().into_owned()),
        Lifecycle::Ephemeral => None,
    };
    make_dirs(&dir).map_err(|e| {
        format!(
            "kubernetes.io/csi: mounter.SetUpAt failed to create dir {:?}:  {e}",
            dir.display().to_string()
        )
    })?;
    let mut secrets = match &volume.publish_secret {
        Some(secret) => plugin.secret("NodePublishSecretRef", secret).await?,
        None => BTreeMap::new(),
    };
    let mut context = volume.attributes.clone();
    if policy.pod_info_on_mount {
        context.extend(requests::pod_info(pod.pod, volume.lifecycle));
    }
    if !policy.token_requests.is_empty() {
        let tokens = tokens(pod, policy).await?;
        if policy.tokens_in_secrets {
            secrets.insert(requests::TOKENS.into(), tokens);
        } else {
            context.insert(requests::TOKENS.into(), tokens);
        }
    }
    let mount_group_capable = calls
        .capabilities()
        .await
        .map_err(|e| {
            format!(
                "kubernetes.io/csi: mounter.SetUpAt failed to determine if the node service has VOLUME_MOUNT_GROUP capability: {e}"
            )
        })?
        .volume_mount_group;
    let data: VolData = [
        (vol_data::SPEC_VOLUME_ID, volume.spec_name.clone()),
        (vol_data::VOLUME_HANDLE, volume.handle.clone()),
        (vol_data::DRIVER_NAME, volume.driver.clone()),
        (vol_data::NODE_NAME, plugin.node_name.clone()),
        (
            vol_data::LIFECYCLE_MODE,
            volume.lifecycle.name().to_string(),
        ),
        (
            vol_data::ATTACHMENT_ID,
            names::attachment_id(&volume.handle, &volume.driver, &plugin.node_name),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let Err(e) = vol_data::save(&dir, &data) {
        let _ = remove_mount_dir(&target);
        return Err(format!(
            "kubernetes.io/csi: mounter.SetUpAt failed to save volume info data: {e}"
        ));
    }
    let single_node_multi_writer = calls
        .capabilities()
        .await
        .map_err(|e| e.to_string())?
        .single_node_multi_writer;
    let request = requests::publish(
        volume,
        PublishExtras {
            staging_path,
            target_path: target.to_string_lossy().into_owned(),
            secrets,
            context,
            mount_group: pod.fs_group.filter(|_| mount_group_capable),
            single_node_multi_writer,
        },
    );
    if let Err(e) = calls.publish(request).await {
        if e.finished && !remount {
            let _ = remove_mount_dir(&target);
        }
        return Err(e.to_string());
    }
    plugin.set_published(&target, true);
    if let Some((namespace, claim)) = &volume.claim {
        plugin.stats.track(
            &target,
            StatsTarget {
                namespace: namespace.clone(),
                claim: claim.clone(),
                driver: volume.driver.clone(),
                handle: volume.handle.clone(),
            },
        );
    }
    if !remount {
        tracing::info!(volume = %volume.spec_name, driver = %volume.driver, target = %target.display(), "volume published");
    }
    if let Some(gid) = pod.fs_group
        && !mount_group_capable
        && applies_fs_group(volume, policy)
    {
        ownership::apply(&target, gid, false)
            .map_err(|e| format!("applyFSGroup failed for vol {}: {e}", volume.handle))?;
    }
    Ok(set)
}

/// Whether the node applies the fsGroup to `volume` (`supportsFSGroup`;
/// a pod without one was let out before).
fn applies_fs_group(volume: &CsiVolume, policy: &DriverPolicy) -> bool {
    if volume.read_only {
        return false;
    }
    match policy.fs_group_policy.as_str() {
        "None" => false,
        "File" => true,
        _ => {
            !volume.fs_type.is_empty()
                && match volume.lifecycle {
                    Lifecycle::Ephemeral => true,
                    Lifecycle::Persistent => volume
                        .access_modes
                        .iter()
                        .any(|m| m == "ReadWriteOnce" || m == "ReadWriteOncePod"),
                }
        }
    }
}

/// The pod's tokens the driver asks for, as the volume context carries them.
async fn tokens(pod: &CsiPod<'_>, policy: &DriverPolicy) -> Result<String, String> {
    let meta = &pod.pod.metadata;
    let mut issued = BTreeMap::new();
    for request in &policy.token_requests {
        let key = TokenKey {
            namespace: meta.namespace.clone().unwrap_or_default(),
            service_account: pod
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
            audience: request.audience.clone(),
            expiration_seconds: request.expiration_seconds,
            pod_name: meta.name.clone().unwrap_or_default(),
            pod_uid: meta.uid.clone().unwrap_or_default(),
        };
        let token = pod.tokens.issued(&key).await.map_err(|e| {
            format!("kubernetes.io/csi: mounter.SetUpAt failed to get service accoount token attributes: {e}")
        })?;
        issued.insert(request.audience.clone(), token);
    }
    Ok(requests::tokens_json(&issued))
}

/// Unpublishes the pod's CSI volume `name` found on disk, and removes its
/// directory; what it was, or nothing if it held no volume.
pub(crate) async fn tear_down(
    plugin: &CsiContext,
    dirs: &PodDirs,
    name: &str,
) -> Result<Option<Unpublished>, String> {
    let dir = dirs.volume(names::PLUGIN, name);
    let target = dir.join(names::MOUNT_DIR);
    let data = match vol_data::load(&dir) {
        Ok(data) => data,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !tmpfs::is_mount_point(&target) => {
            // Nothing was published here (or all but the directory is gone).
            remove_mount_dir(&target).map_err(|e| e.to_string())?;
            return Ok(None);
        }
        Err(e) => {
            return Err(format!(
                "kubernetes.io/csi: unmounter failed to load volume data file [{}]: {e}",
                dir.display()
            ));
        }
    };
    let field = |key: &str| data.get(key).cloned().unwrap_or_default();
    let (driver, handle) = (field(vol_data::DRIVER_NAME), field(vol_data::VOLUME_HANDLE));
    let lifecycle = match field(vol_data::LIFECYCLE_MODE).as_str() {
        "Ephemeral" => Lifecycle::Ephemeral,
        _ => Lifecycle::Persistent,
    };
    let calls = DriverCalls::of(plugin.drivers(), &driver, &plugin.operations).map_err(|e| {
        format!("kubernetes.io/csi: Unmounter.TearDownAt failed to get CSI client: {e}")
    })?;
    calls
        .unpublish(&handle, &target.to_string_lossy())
        .await
        .map_err(|e| format!("kubernetes.io/csi: Unmounter.TearDownAt failed: {e}"))?;
    plugin.set_published(&target, false);
    plugin.stats.forget(&target);
    tracing::info!(volume = %name, %driver, target = %target.display(), "volume unpublished");
    remove_mount_dir(&target).map_err(|e| {
        format!(
            "kubernetes.io/csi: Unmounter.TearDownAt failed to clean mount dir [{}]: {e}",
            target.display()
        )
    })?;
    Ok(Some(Unpublished {
        driver,
        handle,
        lifecycle,
    }))
}
