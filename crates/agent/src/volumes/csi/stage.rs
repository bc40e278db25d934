//! A persistent volume staged on the node and unstaged, as the kubelet's
//! `MountDevice` and `UnmountDevice` do: the staging directory made
//! (0750) whether or not the driver stages; when it does, its
//! `vol_data.json` written beside it and `NodeStageVolume` called, with
//! the driver's capabilities asked before each step as the kubelet asks
//! them. A stage that failed for good leaves nothing; one the driver may
//! still be at work on keeps its marks, so that it is unstaged all the
//! same, and is staged again before the next use.

use crate::volumes::csi::calls::DriverCalls;
use crate::volumes::csi::context::{CsiContext, Staged};
use crate::volumes::csi::mount_dir::{make_dirs, remove_mount_dir};
use crate::volumes::csi::names;
use crate::volumes::csi::requests;
use crate::volumes::csi::source::CsiVolume;
use crate::volumes::csi::vol_data::{self, VolData};

/// Stages `volume` on the node, unless it is staged already.
pub(crate) async fn mount_device(
    plugin: &CsiContext,
    calls: &DriverCalls,
    volume: &CsiVolume,
    fs_group: Option<u32>,
) -> Result<(), String> {
    let staging = names::staging_path(&plugin.root, &volume.driver, &volume.handle);
    if plugin.is_staged(&staging) {
        return Ok(());
    }
    let failed = |e: String| {
        format!(
            "MountVolume.MountDevice failed for volume {:?} : {e}",
            volume.spec_name
        )
    };
    let stages = calls
        .capabilities()
        .await
        .map_err(|e| failed(e.to_string()))?
        .stage_unstage;
    let secrets = match (&volume.stage_secret, stages) {
        (Some(secret), true) => plugin
            .secret("NodeStageSecretRef", secret)
            .await
            .map_err(failed)?,
        _ => Default::default(),
    };
    make_dirs(&staging).map_err(|e| {
        failed(format!(
            "kubernetes.io/csi: attacher.MountDevice failed to create dir {:?}:  {e}",
            staging.display().to_string()
        ))
    })?;
    if !stages {
        plugin.set_staged(&staging, Staged::Yes);
        return Ok(());
    }
    let mount_group = calls
        .capabilities()
        .await
        .map_err(|e| failed(e.to_string()))?
        .volume_mount_group
        .then_some(fs_group)
        .flatten();
    let data: VolData = [
        (vol_data::VOLUME_HANDLE, volume.handle.clone()),
        (vol_data::DRIVER_NAME, volume.driver.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let Some(dir) = staging.parent()
        && let Err(e) = vol_data::save(dir, &data)
    {
        let _ = remove_mount_dir(&staging);
        return Err(failed(format!(
            "kubernetes.io/csi: failed to save volume info data: {e}"
        )));
    }
    let single_node_multi_writer = calls
        .capabilities()
        .await
        .map_err(|e| failed(e.to_string()))?
        .single_node_multi_writer;
    let request = requests::stage(
        volume,
        &staging.to_string_lossy(),
        secrets,
        mount_group,
        single_node_multi_writer,
    );
    match calls.stage(request).await {
        Ok(()) => {
            plugin.set_staged(&staging, Staged::Yes);
            tracing::info!(volume = %volume.spec_name, driver = %volume.driver, staging = %staging.display(), "volume staged");
            Ok(())
        }
        Err(e) if e.finished => {
            let _ = remove_mount_dir(&staging);
            plugin.set_staged(&staging, Staged::No);
            Err(failed(e.to_string()))
        }
        Err(e) => {
            plugin.set_staged(&staging, Staged::Uncertain);
            Err(failed(e.to_string()))
        }
    }
}

/// Unstages volume `handle` of `driver`: `NodeUnstageVolume` when the
/// driver stages (its `vol_data.json` says it was staged), then the
/// staging directory removed if nothing is mounted there.
pub(crate) async fn unmount_device(
    plugin: &CsiContext,
    driver: &str,
    handle: &str,
) -> Result<(), String> {
    let staging = names::staging_path(&plugin.root, driver, handle);
    let Some(dir) = staging.parent() else {
        return Ok(());
    };
    let failed = |e: String| format!("UnmountDevice failed for volume {handle:?} : {e}");
    match vol_data::load(dir) {
        Ok(_) => {}
        // Never staged (or its driver does not stage): nothing to call.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            plugin.set_staged(&staging, Staged::No);
            return Ok(());
        }
        Err(e) => return Err(failed(e.to_string())),
    }
    let calls = DriverCalls::of(plugin.drivers(), driver, &plugin.operations).map_err(|e| {
        failed(format!(
            "kubernetes.io/csi: attacher.UnmountDevice failed to create newCsiDriverClient: {e}"
        ))
    })?;
    let stages = calls
        .capabilities()
        .await
        .map_err(|e| {
            failed(format!(
                "kubernetes.io/csi: attacher.UnmountDevice failed to check whether STAGE_UNSTAGE_VOLUME set: {e}"
            ))
        })?
        .stage_unstage;
    if stages {
        calls
            .unstage(handle, &staging.to_string_lossy())
            .await
            .map_err(|e| {
                failed(format!(
                    "kubernetes.io/csi: attacher.UnmountDevice failed: {e}"
                ))
            })?;
        tracing::info!(driver, handle, staging = %staging.display(), "volume unstaged");
    }
    remove_mount_dir(&staging).map_err(|e| {
        failed(format!(
            "kubernetes.io/csi: failed to clean up global mount {}: {e}",
            dir.display()
        ))
    })?;
    plugin.set_staged(&staging, Staged::No);
    Ok(())
}
