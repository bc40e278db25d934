//! The CSI plugin's door and what it keeps between calls: the registered
//! drivers, the CSIDriver objects, which volumes are staged and published
//! (found again from disk after a restart, by the kubelet's marks: a
//! published volume's `vol_data.json` beside a mount, a staged one's
//! beside its staging directory), and one lock per persistent volume, so
//! that two pods of the node never stage or unstage the same volume at
//! once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::{CSIVolumeSource, Pod, Secret};
use kube::Api;
use tokio::sync::watch;

use crate::csi::CsiDriverStore;
use crate::kube_api::Connection;
use crate::volumes::content::token::TokenManager;
use crate::volumes::csi::calls::DriverCalls;
use crate::volumes::csi::driver_objects::{DriverObjects, DriverPolicy};
use crate::volumes::csi::names;
use crate::volumes::csi::source::{self, CsiVolume, Lifecycle, SecretRef};
use crate::volumes::csi::vol_data;
use crate::volumes::csi::{publish, stage};
use crate::volumes::layout::{self, PodDirs};
use crate::volumes::mounts::PodVolume;

/// What a pod's CSI volume is in its spec.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CsiSpec<'a> {
    /// An inline volume.
    Inline(&'a CSIVolumeSource),
    /// A claim of the pod's namespace.
    Claim(source::ClaimUse<'a>),
}

/// The pod a CSI volume is set up for.
pub(crate) struct CsiPod<'a> {
    pub(crate) pod: &'a Pod,
    pub(crate) dirs: &'a PodDirs,
    pub(crate) fs_group: Option<u32>,
    /// The node's labels, for the volumes' node affinity.
    pub(crate) labels: &'a BTreeMap<String, String>,
    pub(crate) tokens: &'a TokenManager,
}

/// The CSI plugin, shared by every pod's volumes.
pub(crate) struct CsiPlugin {
    /// The node's state directory (the kubelet's root).
    pub(crate) root: PathBuf,
    pods_dir: PathBuf,
    pub(crate) node_name: String,
    drivers: CsiDriverStore,
    objects: DriverObjects,
    pub(crate) connection: watch::Receiver<Connection>,
    state: Mutex<State>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

#[derive(Default)]
struct State {
    /// Target paths published.
    published: HashSet<PathBuf>,
    /// Staging paths staged.
    staged: HashSet<PathBuf>,
    /// Staging paths whose stage call may still be at work: staged again
    /// before use, though their marks are on disk.
    uncertain: HashSet<PathBuf>,
}

impl CsiPlugin {
    /// The plugin for pods under `pods_dir` of node `node_name`, calling
    /// `drivers` and reading the API through `connection`.
    pub(crate) fn new(
        pods_dir: &Path,
        node_name: String,
        drivers: CsiDriverStore,
        connection: watch::Receiver<Connection>,
    ) -> Self {
        Self {
            root: pods_dir.parent().unwrap_or(pods_dir).to_path_buf(),
            pods_dir: pods_dir.to_path_buf(),
            node_name,
            drivers,
            objects: DriverObjects::new(connection.clone()),
            connection,
            state: Mutex::new(State::default()),
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// Sets up the pod's CSI volume `name` of `spec`: staged first when it
    /// is persistent, then published (nothing called of what is both
    /// already, unless its driver asks to be published again).
    pub(crate) async fn set_up(
        &self,
        pod: &CsiPod<'_>,
        name: &str,
        spec: CsiSpec<'_>,
    ) -> Result<PodVolume, String> {
        let volume = match spec {
            CsiSpec::Inline(source) => source::inline(pod.pod, name, source),
            CsiSpec::Claim(claim) => source::persistent(self.client(), pod.pod, claim, pod.labels)
                .await
                .map_err(|e| e.to_string())?,
        };
        let policy = self
            .objects
            .policy(&volume.driver)
            .await
            .map_err(|e| e.to_string())?;
        lifecycle_allowed(&volume, &policy)?;
        if volume.lifecycle == Lifecycle::Persistent && policy.attach_required {
            return Err(format!(
                "volume {} of driver {} must be attached first (its CSIDriver {}), and this node does not attach volumes yet",
                volume.handle,
                volume.driver,
                if policy.exists {
                    "has attachRequired"
                } else {
                    "object is missing, which means attachRequired"
                }
            ));
        }
        let calls = DriverCalls::of(&self.drivers, &volume.driver).map_err(|e| {
            format!("kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: {e}")
        })?;
        let lock = self.lock(&volume);
        let _held = lock.lock().await;
        if volume.lifecycle == Lifecycle::Persistent {
            stage::mount_device(self, &calls, &volume, pod.fs_group).await?;
        }
        publish::set_up(self, &calls, pod, &volume, &policy).await
    }

    /// Tears down the pod's CSI volume `name` found on disk: unpublished,
    /// then unstaged when no other pod of the node has it published.
    pub(crate) async fn tear_down(&self, dirs: &PodDirs, name: &str) -> Result<(), String> {
        let Some(published) = publish::tear_down(self, dirs, name).await? else {
            return Ok(());
        };
        if published.lifecycle != Lifecycle::Persistent {
            return Ok(());
        }
        let key = names::unique_name(&published.driver, &published.handle);
        let lock = self.lock_key(&key);
        let _held = lock.lock().await;
        if self.published_elsewhere(&published.driver, &published.handle) {
            return Ok(());
        }
        stage::unmount_device(self, &published.driver, &published.handle).await
    }

    /// The API client of the moment.
    pub(crate) fn client(&self) -> kube::Client {
        self.connection.borrow().client.clone()
    }

    /// The data of secret `secret`, for a call of `what` (`NodeStageSecretRef`).
    pub(crate) async fn secret(
        &self,
        what: &str,
        secret: &SecretRef,
    ) -> Result<BTreeMap<String, String>, String> {
        let secrets: Api<Secret> = Api::namespaced(self.client(), &secret.namespace);
        let found = secrets.get(&secret.name).await.map_err(|e| {
            format!(
                "fetching {what} {}/{} failed: {e}",
                secret.namespace, secret.name
            )
        })?;
        Ok(found
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect())
    }

    /// The drivers registered on the node.
    pub(crate) fn drivers(&self) -> &CsiDriverStore {
        &self.drivers
    }

    /// Whether `target` is published (in memory, or found so on disk: its
    /// `vol_data.json` beside a mount), remembered if found.
    pub(crate) fn is_published(&self, target: &Path) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.published.contains(target) {
            return true;
        }
        let found = target
            .parent()
            .is_some_and(|dir| dir.join(vol_data::FILE).is_file())
            && crate::volumes::kinds::tmpfs::is_mount_point(target);
        if found {
            state.published.insert(target.to_path_buf());
        }
        found
    }

    /// Records whether `target` is published.
    pub(crate) fn set_published(&self, target: &Path, published: bool) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if published {
            state.published.insert(target.to_path_buf());
        } else {
            state.published.remove(target);
        }
    }

    /// Whether `staging` is staged (in memory, or found so on disk: its
    /// `vol_data.json` beside it, unless its stage call may still be at
    /// work), remembered if found.
    pub(crate) fn is_staged(&self, staging: &Path) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.staged.contains(staging) {
            return true;
        }
        if state.uncertain.contains(staging) {
            return false;
        }
        let found = staging
            .parent()
            .is_some_and(|dir| dir.join(vol_data::FILE).is_file());
        if found {
            state.staged.insert(staging.to_path_buf());
        }
        found
    }

    /// Records `staging` staged, not staged, or possibly staged.
    pub(crate) fn set_staged(&self, staging: &Path, staged: Staged) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.staged.remove(staging);
        state.uncertain.remove(staging);
        match staged {
            Staged::Yes => {
                state.staged.insert(staging.to_path_buf());
            }
            Staged::Uncertain => {
                state.uncertain.insert(staging.to_path_buf());
            }
            Staged::No => {}
        }
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

/// A staging path's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Staged {
    Yes,
    No,
    /// The stage call may still be at work.
    Uncertain,
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
