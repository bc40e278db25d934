//! The CSI plugin's door: a pod's CSI volume resolved, checked against
//! its driver's CSIDriver object, waited for until it is attached when its
//! driver needs that, staged and published (or unpublished and unstaged),
//! under one lock per volume, so that two pods of the node never stage or
//! unstage the same volume at once.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{CSIVolumeSource, Volume};
use tokio::sync::watch;

use crate::csi::CsiDriverStore;
use crate::kube_api::Connection;
use crate::volumes::csi::attach::Attachments;
use crate::volumes::csi::calls::DriverCalls;
use crate::volumes::csi::context::CsiContext;
use crate::volumes::csi::driver_objects::{DriverObjects, DriverPolicy};
use crate::volumes::csi::expand::Expander;
use crate::volumes::csi::names;
use crate::volumes::csi::operations::CsiOperations;
use crate::volumes::csi::publish::{self, CsiPod};
use crate::volumes::csi::source::{self, CsiVolume, Lifecycle};
use crate::volumes::csi::stage;
use crate::volumes::csi::stats::{StatsCollector, VolumeStats};
use crate::volumes::csi::vol_data;
use crate::volumes::error::SetUpError;
use crate::volumes::error::Warning;
use crate::volumes::layout::{self, PodDirs};
use crate::volumes::mounts::PodVolume;

/// What a pod's CSI volume is in its spec.
#[derive(Debug, Clone)]
pub(crate) enum CsiSpec<'a> {
    /// An inline volume.
    Inline(&'a CSIVolumeSource),
    /// An inline volume of a migrated in-tree plugin.
    Migrated(&'a Volume),
    /// A claim of the pod's namespace, bound to a CSI volume.
    Claimed(Box<CsiVolume>),
}

/// The CSI plugin, shared by every pod's volumes.
pub(crate) struct CsiPlugin {
    context: CsiContext,
    pods_dir: PathBuf,
    objects: DriverObjects,
    attachments: Attachments,
    expander: Expander,
    /// Persistent volumes to unstage at a pod's tear-down though the pod
    /// has no directory for them, by the pod's UID (driver, handle): one
    /// its tear-down unpublished but failed to unstage (tried again, as
    /// the kubelet keeps unmounting a device until it is done), or one
    /// whose stage for it may have been done (as the kubelet unmounts a
    /// device whose mount is uncertain).
    unstage_pending: Mutex<HashMap<String, BTreeSet<(String, String)>>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl CsiPlugin {
    /// The plugin for pods under `pods_dir` of node `node_name`, calling
    /// `drivers` (each call measured in `operations`) and reading the API
    /// through `connection`, its attachable volumes waited for through
    /// `attachments`, the claimed volumes' usage read every `stats.0` into
    /// `stats.1`.
    pub(crate) fn new(
        pods_dir: &Path,
        node_name: String,
        (drivers, operations): (CsiDriverStore, CsiOperations),
        connection: watch::Receiver<Connection>,
        attachments: Attachments,
        stats: (Duration, VolumeStats),
    ) -> Self {
        Self {
            attachments,
            context: CsiContext::new(
                pods_dir.parent().unwrap_or(pods_dir).to_path_buf(),
                node_name,
                drivers.clone(),
                connection.clone(),
                StatsCollector::new(drivers, operations.clone(), stats.0, stats.1),
                operations,
            ),
            pods_dir: pods_dir.to_path_buf(),
            objects: DriverObjects::new(connection),
            expander: Expander::default(),
            unstage_pending: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// Sets up the pod's CSI volume `name` of `spec`: staged first when it
    /// is persistent, then published (nothing called of what is both
    /// already, unless its driver asks to be published again), then grown
    /// on the node when its claim was grown.
    pub(crate) async fn set_up(
        &self,
        pod: &CsiPod<'_>,
        name: &str,
        spec: CsiSpec<'_>,
    ) -> Result<PodVolume, SetUpError> {
        let volume = match spec {
            CsiSpec::Inline(source) => source::inline(pod.pod, name, source),
            CsiSpec::Migrated(volume) => {
                source::migrated_inline(pod.pod, volume).map_err(|e| e.to_string())?
            }
            CsiSpec::Claimed(volume) => *volume,
        };
        let spec_name = volume.spec_name.clone();
        self.set_up_volume(pod, volume)
            .await
            .map_err(|e| e.for_spec(&spec_name))
    }

    /// [`set_up`](Self::set_up) of `volume`, known.
    async fn set_up_volume(
        &self,
        pod: &CsiPod<'_>,
        mut volume: CsiVolume,
    ) -> Result<PodVolume, SetUpError> {
        let policy = self
            .objects
            .policy(&volume.driver)
            .await
            .map_err(|e| e.to_string())?;
        lifecycle_allowed(&volume, &policy)?;
        let attachable = volume.lifecycle == Lifecycle::Persistent && policy.attach_required;
        let unique = names::unique_name(&volume.driver, &volume.handle);
        if attachable {
            self.attach(pod, &mut volume, &policy, &unique)
                .await
                .map_err(SetUpError::Said)?;
        }
        let calls = DriverCalls::of(
            self.context.drivers(),
            &volume.driver,
            &self.context.operations,
        )
        .map_err(|e| format!("kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: {e}"))?
        .migrated(volume.migrated);
        let lock = self.lock(&volume);
        let _held = lock.lock().await;
        if volume.lifecycle == Lifecycle::Persistent {
            let staged = stage::mount_device(&self.context, &calls, &volume, pod.fs_group).await;
            if staged.is_err() {
                let staging =
                    names::staging_path(&self.context.root, &volume.driver, &volume.handle);
                if self.context.stage_uncertain(&staging) {
                    // The driver may have staged it: unstaged with the pod
                    // if nothing else has it by then, as the kubelet
                    // unmounts a device whose mount it is unsure of.
                    let uid = pod.pod.metadata.uid.as_deref().unwrap_or_default();
                    self.keep_for_unstage(uid, &volume.driver, &volume.handle);
                }
            }
            staged.map_err(SetUpError::Said)?;
            if attachable {
                self.attachments.mounted(&unique, true);
            }
        }
        let target = pod
            .dirs
            .volume(names::PLUGIN, &volume.dir_name())
            .join(names::MOUNT_DIR);
        let mounted_before = self.context.is_published(&target);
        let set = publish::set_up(&self.context, &calls, pod, &volume, &policy).await?;
        if volume.lifecycle == Lifecycle::Persistent {
            let uid = pod.pod.metadata.uid.as_deref().unwrap_or_default();
            self.expander
                .grow(
                    &self.context,
                    &calls,
                    &volume,
                    uid,
                    &target.to_string_lossy(),
                    !mounted_before,
                )
                .await
                .map_err(SetUpError::Said)?;
        }
        Ok(set)
    }

    /// The client of the API, to read the pods' claims with.
    pub(crate) fn client(&self) -> kube::Client {
        self.context.client()
    }

    /// The warnings about pod `uid`'s volumes since last asked (a volume
    /// that failed to grow while in use).
    pub(crate) fn take_warnings(&self, uid: &str) -> Vec<Warning> {
        self.expander.take_warnings(uid)
    }

    /// The attach handshake of the attachable `volume`: said in use by the
    /// pod, waited for until the Node shows it attached, and its
    /// VolumeAttachment's metadata read into its publish context, unless it
    /// is staged and published for the pod already (and its driver does
    /// not ask to be published again).
    async fn attach(
        &self,
        pod: &CsiPod<'_>,
        volume: &mut CsiVolume,
        policy: &DriverPolicy,
        unique: &str,
    ) -> Result<(), String> {
        let uid = pod.pod.metadata.uid.as_deref().unwrap_or_default();
        self.attachments.want(uid, unique);
        let staging = names::staging_path(&self.context.root, &volume.driver, &volume.handle);
        let target = pod
            .dirs
            .volume(names::PLUGIN, &volume.dir_name())
            .join(names::MOUNT_DIR);
        if self.context.is_staged(&staging)
            && self.context.is_published(&target)
            && !policy.requires_republish
        {
            return Ok(());
        }
        self.attachments
            .wait_attached(&volume.spec_name, unique)
            .await?;
        volume.publish_context = self
            .attachments
            .publish_context(self.context.client(), &volume.driver, &volume.handle)
            .await
            .map_err(|e| {
                format!(
                    "MountVolume.WaitForAttach failed for volume {:?} : {e}",
                    volume.spec_name
                )
            })?;
        Ok(())
    }

    /// Pod `uid` is gone: the attachable volumes it wanted are no longer
    /// in use for it, and what was kept for it is forgotten.
    pub(crate) fn forget_pod(&self, uid: &str) {
        self.attachments.forget_pod(uid);
        self.expander.forget_pod(uid);
    }

    /// Finds the attachable volumes staged on the node (their staging
    /// `vol_data.json`, with a driver whose CSIDriver asks for attaching,
    /// or that cannot be read yet), so that they stay in use until they are
    /// unstaged; from then on the volumes in use are said.
    pub(crate) async fn sync(&self) {
        let staged = names::staged_on_disk(&self.context.root);
        let mut found = BTreeSet::new();
        for (driver, handle) in staged {
            let attachable = match self.objects.policy(&driver).await {
                Ok(policy) => policy.attach_required,
                // Not known yet: kept in use, so as not to be detached.
                Err(_) => true,
            };
            if attachable {
                found.insert(names::unique_name(&driver, &handle));
            }
        }
        if !found.is_empty() {
            tracing::info!(
                volumes = found.len(),
                "attachable volumes found staged on the node"
            );
        }
        self.attachments.synced(found);
    }

    /// Tears down pod `uid`'s CSI volume `name` found on disk (in `dirs`):
    /// unpublished, then unstaged when no other pod of the node has it
    /// published.
    pub(crate) async fn tear_down(
        &self,
        uid: &str,
        dirs: &PodDirs,
        name: &str,
    ) -> Result<(), String> {
        let Some(published) = publish::tear_down(&self.context, dirs, name).await? else {
            return Ok(());
        };
        if published.lifecycle != Lifecycle::Persistent {
            return Ok(());
        }
        self.unstage_unused(uid, &published.driver, &published.handle)
            .await
    }

    /// Unstages again what pod `uid`'s last tear-down unpublished and
    /// failed to unstage; why each that still fails does, by handle.
    pub(crate) async fn unstage_pending(&self, uid: &str) -> Vec<(String, String)> {
        let pending: Vec<(String, String)> = self
            .unstage_pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .map(|p| p.iter().cloned().collect())
            .unwrap_or_default();
        let mut failures = Vec::new();
        for (driver, handle) in pending {
            if let Err(e) = self.unstage_unused(uid, &driver, &handle).await {
                failures.push((handle, e));
            }
        }
        failures
    }

    /// Keeps volume `handle` of `driver` to be unstaged at pod `uid`'s
    /// tear-down.
    fn keep_for_unstage(&self, uid: &str, driver: &str, handle: &str) {
        self.unstage_pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(uid.to_string())
            .or_default()
            .insert((driver.to_string(), handle.to_string()));
    }

    /// Unstages volume `handle` of `driver`, unpublished from pod `uid`,
    /// unless another pod of the node has it published; a failure is kept
    /// for the pod's next tear-down.
    async fn unstage_unused(&self, uid: &str, driver: &str, handle: &str) -> Result<(), String> {
        let key = names::unique_name(driver, handle);
        let lock = self.lock_key(&key);
        let _held = lock.lock().await;
        let pending = (driver.to_string(), handle.to_string());
        if !self.published_elsewhere(driver, handle) {
            if let Err(e) = stage::unmount_device(&self.context, driver, handle).await {
                self.keep_for_unstage(uid, driver, handle);
                return Err(e);
            }
            self.attachments.mounted(&key, false);
            self.expander.forget_volume(&key);
        }
        let mut all = self
            .unstage_pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(of_pod) = all.get_mut(uid) {
            of_pod.remove(&pending);
            if of_pod.is_empty() {
                all.remove(uid);
            }
        }
        Ok(())
    }

    /// Whether a pod of the node has volume `handle` of `driver` published:
    /// a `vol_data.json` of a CSI volume of any pod naming both.
    fn published_elsewhere(&self, driver: &str, handle: &str) -> bool {
        let Ok(pods) = std::fs::read_dir(&self.pods_dir) else {
            return false;
        };
        let csi = layout::escape(names::PLUGIN);
        pods.flatten().any(|pod| {
            let Ok(volumes) = std::fs::read_dir(pod.path().join("volumes").join(&csi)) else {
                return false;
            };
            volumes.flatten().any(|volume| {
                vol_data::load(&volume.path()).is_ok_and(|data| {
                    data.get(vol_data::DRIVER_NAME).map(String::as_str) == Some(driver)
                        && data.get(vol_data::VOLUME_HANDLE).map(String::as_str) == Some(handle)
                })
            })
        })
    }

    fn lock(&self, volume: &CsiVolume) -> Arc<tokio::sync::Mutex<()>> {
        self.lock_key(&names::unique_name(&volume.driver, &volume.handle))
    }

    fn lock_key(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        // Locks nobody holds or waits for are dropped as others are made.
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        locks.entry(key.to_string()).or_default().clone()
    }
}

/// Whether `policy`'s driver serves volumes of `volume`'s lifecycle
/// (`supportsVolumeLifecycleMode`).
fn lifecycle_allowed(volume: &CsiVolume, policy: &DriverPolicy) -> Result<(), String> {
    let mode = volume.lifecycle.name();
    match volume.lifecycle {
        Lifecycle::Ephemeral if !policy.exists => Err(format!(
            "kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode {mode:?} not supported by driver {} (no CSIDriver object)",
            volume.driver
        )),
        Lifecycle::Ephemeral if !policy.ephemeral => Err(format!(
            "kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode {mode:?} not supported by driver {} (only supports [\"Persistent\"])",
            volume.driver
        )),
        Lifecycle::Persistent if !policy.persistent => Err(format!(
            "kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode {mode:?} not supported by driver {} (only supports [\"Ephemeral\"])",
            volume.driver
        )),
        _ => Ok(()),
    }
}
