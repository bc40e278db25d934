//! The volume manager's door: what a pod's operation asks of it. Its
//! worker asks for the pod's volumes before the pod's sandbox is made
//! (and again at each resync, which writes changed objects and renewed
//! tokens into them), and its release asks for them to be torn down once
//! its containers stopped and before its claims and devices are given
//! back. Everything is on disk in the kubelet's layout; nothing else is
//! kept across restarts.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use nodeplugins_api::quantity;

use crate::csi::CsiDriverStore;
use crate::kube_api::KubeApiHandle;
use crate::pods::VolumeStatus;
use crate::volumes::book::Book;
use crate::volumes::content::objects::{ObjectError, ObjectWatches};
use crate::volumes::content::payload::{Owners, Sources};
use crate::volumes::content::pod_certificates::{PodCertificateStates, PodCertificates};
use crate::volumes::content::token::TokenManager;
use crate::volumes::content::trust_bundles::TrustBundles;
use crate::volumes::csi::attach::Attachments;
use crate::volumes::csi::names as csi_names;
use crate::volumes::csi::operations::CsiOperations;
use crate::volumes::csi::plugin::CsiPlugin;
use crate::volumes::csi::stats::VolumeStats;
use crate::volumes::error::{SetUpError, VolumeError, VolumeFailure};
use crate::volumes::layout::PodDirs;
use crate::volumes::mounts::PodVolumes;
use crate::volumes::plan::{VolumeKind, plan};
use crate::volumes::set_up::{PodContext, set_up, tear_down};
use crate::volumes::{shared_root, sub_path};

/// The volume manager, shared by every pod's operation.
#[derive(Clone)]
pub struct VolumeHandle {
    inner: Arc<Inner>,
}

struct Inner {
    pods_dir: PathBuf,
    config_maps: ObjectWatches<ConfigMap>,
    secrets: ObjectWatches<Secret>,
    tokens: TokenManager,
    trust_bundles: TrustBundles,
    pod_certificates: Arc<PodCertificates>,
    csi: CsiPlugin,
    stats: VolumeStats,
    operations: CsiOperations,
    book: Mutex<Book>,
    /// When each pod was first seen, by UID (the kubelet's
    /// `kubernetes.io/config.seen`).
    first_seen: Mutex<HashMap<String, String>>,
}

/// The annotation the kubelet adds to every pod it is given: when it first
/// saw it (RFC 3339, to the nanosecond).
const CONFIG_SEEN: &str = "kubernetes.io/config.seen";
/// ... and where it came from (`api`).
const CONFIG_SOURCE: &str = "kubernetes.io/config.source";

impl VolumeHandle {
    /// Volumes of node `node_name`'s pods under `pods_dir` (whose parent,
    /// the node's root, is made a shared mount first), their objects
    /// and tokens read through `kube`'s client, their CSI volumes set up by
    /// the drivers of `csi_drivers` (the claimed ones' usage read every
    /// `stats_period`, up to twice as long), the attachable ones said in
    /// use in the Node's status that `kube` writes, and waited for until
    /// its Node shows them attached.
    pub fn new(
        pods_dir: PathBuf,
        node_name: String,
        kube: &KubeApiHandle,
        csi_drivers: CsiDriverStore,
        stats_period: Duration,
    ) -> Self {
        if let Some(root) = pods_dir.parent()
            && let Err(e) = shared_root::make_rshared(root)
        {
            tracing::warn!(root = %root.display(), error = %e, "cannot make the node's root a shared mount; volumes mounted under it will not propagate to containers that ask for it");
        }
        let stats = VolumeStats::default();
        let operations = CsiOperations::default();
        let connection = kube.connection();
        let attachments = Attachments::new(node_name.clone(), kube.node(), kube.volumes_in_use());
        let pod_certificates =
            Arc::new(PodCertificates::new(connection.clone(), node_name.clone()));
        Self {
            inner: Arc::new(Inner {
                pod_certificates,
                csi: CsiPlugin::new(
                    &pods_dir,
                    node_name,
                    (csi_drivers, operations.clone()),
                    connection.clone(),
                    attachments,
                    (stats_period, stats.clone()),
                ),
                stats,
                operations,
                pods_dir,
                config_maps: ObjectWatches::new("configmap", connection.clone()),
                secrets: ObjectWatches::new("secret", connection.clone()),
                trust_bundles: TrustBundles::new(connection.clone()),
                tokens: TokenManager::new(connection),
                book: Mutex::new(Book::default()),
                first_seen: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Sets up the volumes of `pod` its containers mount (again: what is
    /// set up stays, changed content is written), on the node `node` (its
    /// allocatable resources, its labels). The volumes set up, or every
    /// one that failed and why (the others stay set up).
    #[tracing::instrument(skip_all)]
    pub(crate) async fn set_up(
        &self,
        pod: &Pod,
        node: Option<&Node>,
    ) -> Result<PodVolumes, VolumeError> {
        let allocatable: BTreeMap<String, String> = node
            .and_then(|n| n.status.as_ref()?.allocatable.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|(resource, quantity)| (resource, quantity.0))
            .collect();
        let allocatable = &allocatable;
        let labels = node
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let pod = &self.as_given(pod, &uid);
        let dirs = PodDirs::new(&self.inner.pods_dir, &uid);
        let planned = plan(pod);
        if let Err(e) = dirs.make() {
            return Err(VolumeError::SetUp(
                planned
                    .iter()
                    .map(|v| VolumeFailure {
                        volume: v.name.clone(),
                        error: SetUpError::from(format!("cannot make the pod's directories: {e}"))
                            .said(&v.name),
                    })
                    .collect(),
            ));
        }
        self.register_objects(pod, &uid);
        let ctx = PodContext {
            dirs: &dirs,
            pod,
            sources: Sources {
                config_maps: &self.inner.config_maps,
                secrets: &self.inner.secrets,
                tokens: &self.inner.tokens,
                trust_bundles: &self.inner.trust_bundles,
                pod_certificates: &self.inner.pod_certificates,
                node,
                allocatable,
            },
            owners: owners(pod),
            memory: (
                allocatable.get("memory").and_then(|q| quantity::value(q)),
                pod_memory_limit(pod),
            ),
            csi: &self.inner.csi,
            labels: &labels,
        };
        let mut volumes = PodVolumes::new();
        let mut failures = Vec::new();
        let mut records = Vec::new();
        for volume in &planned {
            match set_up(&ctx, volume).await {
                Ok(set) => {
                    records.push(VolumeStatus {
                        name: volume.name.clone(),
                        kind: volume.kind.name().into(),
                        path: set.host_path.display().to_string(),
                        error: None,
                    });
                    volumes.insert(volume.name.clone(), set);
                }
                Err(error) => {
                    records.push(VolumeStatus {
                        name: volume.name.clone(),
                        kind: volume.kind.name().into(),
                        path: dirs
                            .volume(volume.kind.plugin(), &volume.name)
                            .display()
                            .to_string(),
                        error: Some(error.to_string()),
                    });
                    failures.push(VolumeFailure {
                        volume: volume.name.clone(),
                        error: error.said(&volume.name),
                    });
                }
            }
        }
        if let Ok(mut book) = self.inner.book.lock() {
            book.set(&uid, records);
        }
        if failures.is_empty() {
            Ok(volumes)
        } else {
            Err(VolumeError::SetUp(failures))
        }
    }

    /// Tears down every volume pod `uid` has on disk (a CSI volume
    /// unpublished, and unstaged after its last pod), then what is left of
    /// its volume directories; the objects and tokens only it used are
    /// forgotten. A volume that cannot be torn down keeps the pod's
    /// directory (and is tried again).
    #[tracing::instrument(skip_all)]
    pub(crate) async fn tear_down(&self, uid: &str) -> Result<(), VolumeError> {
        let dirs = PodDirs::new(&self.inner.pods_dir, uid);
        let failure = |volume: String, error: String| VolumeFailure { volume, error };
        let found = {
            let dirs = dirs.clone();
            tokio::task::spawn_blocking(move || dirs.volumes_on_disk())
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r)
        };
        let found = found.map_err(|e| {
            VolumeError::TearDown(vec![failure(
                String::new(),
                format!("cannot read the pod's volumes: {e}"),
            )])
        })?;
        let mut failures: Vec<VolumeFailure> = self
            .inner
            .csi
            .unstage_pending(uid)
            .await
            .into_iter()
            .map(|(handle, error)| failure(handle, error))
            .collect();
        // The containers' subPath mounts go first, as the kubelet cleans
        // them before it tears down their volumes.
        let pod_dir = self.inner.pods_dir.join(uid);
        let cleaned = tokio::task::spawn_blocking(move || sub_path::clean(&pod_dir))
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r);
        if let Err(e) = cleaned {
            return Err(VolumeError::TearDown(vec![failure(
                String::new(),
                format!("error cleaning subPath mounts: {e}"),
            )]));
        }
        for (plugin, name) in found {
            let done = if plugin == csi_names::PLUGIN {
                self.inner.csi.tear_down(uid, &dirs, &name).await
            } else {
                let dirs = dirs.clone();
                let volume = name.clone();
                tokio::task::spawn_blocking(move || tear_down(&dirs, &plugin, &volume))
                    .await
                    .unwrap_or_else(|e| Err(format!("tearing down failed unexpectedly: {e}")))
            };
            if let Err(error) = done {
                failures.push(failure(name, error));
            }
        }
        if failures.is_empty() {
            let dirs = dirs.clone();
            let removed = tokio::task::spawn_blocking(move || dirs.remove_volume_dirs())
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r);
            if let Err(e) = removed {
                failures.push(failure(String::new(), e.to_string()));
            }
        }
        if !failures.is_empty() {
            return Err(VolumeError::TearDown(failures));
        }
        self.inner.config_maps.unregister_pod(uid);
        self.inner.secrets.unregister_pod(uid);
        self.inner.tokens.forget_pod(uid);
        self.inner.pod_certificates.forget_pod(uid);
        self.inner.csi.forget_pod(uid);
        if let Ok(mut book) = self.inner.book.lock() {
            book.remove(uid);
        }
        if let Ok(mut seen) = self.inner.first_seen.lock() {
            seen.remove(uid);
        }
        Ok(())
    }

    /// Learns what is mounted on the node from disk (the attachable volumes
    /// staged), and from then on says the volumes in use in the Node's
    /// status. Called once, as the pods are first served.
    pub(crate) async fn sync(&self) {
        self.inner.csi.sync().await;
    }

    /// What is to be said on pod `uid` about its volumes (a volume that
    /// failed to grow while in use) since last asked.
    pub(crate) fn take_warnings(&self, uid: &str) -> Vec<crate::volumes::error::Warning> {
        let mut warnings = self.inner.csi.take_warnings(uid);
        warnings.extend(self.inner.pod_certificates.take_warnings(uid));
        warnings
    }

    /// The pods that have volumes on disk (their UIDs).
    pub(crate) fn pods_on_disk(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.inner.pods_dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let uid = e.file_name().to_string_lossy().into_owned();
                let dirs = PodDirs::new(&self.inner.pods_dir, &uid);
                dirs.volumes_on_disk()
                    .is_ok_and(|v| !v.is_empty())
                    .then_some(uid)
            })
            .collect()
    }

    /// Pod `uid`'s volumes as last set up.
    pub fn volumes_of(&self, uid: &str) -> Vec<VolumeStatus> {
        self.inner
            .book
            .lock()
            .map(|b| b.of(uid))
            .unwrap_or_default()
    }

    /// The claimed volumes' usage, for `/metrics`.
    pub fn stats(&self) -> VolumeStats {
        self.inner.stats.clone()
    }

    /// The pods' certificates by signer and state, for `/metrics`.
    pub fn pod_certificate_states(&self) -> PodCertificateStates {
        PodCertificateStates(self.inner.pod_certificates.clone())
    }

    /// The CSI node calls' durations, for `/metrics`.
    pub fn csi_operations(&self) -> CsiOperations {
        self.inner.operations.clone()
    }

    /// Where the pods' directories are.
    pub fn pods_dir(&self) -> &Path {
        &self.inner.pods_dir
    }

    /// How many ConfigMaps and Secrets are watched for the node's pods.
    pub fn objects_watched(&self) -> usize {
        self.inner.config_maps.watched() + self.inner.secrets.watched()
    }

    /// `pod` as the kubelet holds it: with its own annotations of where it
    /// came from and when it was first seen, which the downward API's
    /// `metadata.annotations` shows.
    fn as_given(&self, pod: &Pod, uid: &str) -> Pod {
        let seen = self
            .inner
            .first_seen
            .lock()
            .map(|mut all| {
                all.entry(uid.to_string())
                    .or_insert_with(|| k8s_openapi::jiff::Timestamp::now().to_string())
                    .clone()
            })
            .unwrap_or_default();
        let mut given = pod.clone();
        let annotations = given.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(CONFIG_SOURCE.into(), "api".into());
        annotations.insert(CONFIG_SEEN.into(), seen);
        given
    }

    /// ConfigMap `namespace`/`name`, which a container of pod `uid` takes
    /// variables from, as its watch has it (`None`: it does not exist).
    pub(crate) async fn env_config_map(
        &self,
        uid: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<ConfigMap>>, ObjectError> {
        self.inner.config_maps.register(namespace, name, uid);
        self.inner.config_maps.get(namespace, name).await
    }

    /// Secret `namespace`/`name`, as [`Self::env_config_map`].
    pub(crate) async fn env_secret(
        &self,
        uid: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Secret>>, ObjectError> {
        self.inner.secrets.register(namespace, name, uid);
        self.inner.secrets.get(namespace, name).await
    }

    /// Starts the watches of the objects `pod`'s volumes and its
    /// containers' environment name (as the kubelet's managers register
    /// every ConfigMap and Secret a pod names).
    fn register_objects(&self, pod: &Pod, uid: &str) {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let (config_maps, secrets) = crate::pods::env_objects_named(pod);
        for name in &config_maps {
            self.inner.config_maps.register(namespace, name, uid);
        }
        for name in &secrets {
            self.inner.secrets.register(namespace, name, uid);
        }
        for volume in plan(pod) {
            match &volume.kind {
                VolumeKind::ConfigMap(source) => {
                    self.inner
                        .config_maps
                        .register(namespace, &source.name, uid);
                }
                VolumeKind::Secret(source) => {
                    if let Some(name) = &source.secret_name {
                        self.inner.secrets.register(namespace, name, uid);
                    }
                }
                VolumeKind::Projected(source) => {
                    for projection in source.sources.iter().flatten() {
                        if let Some(map) = &projection.config_map {
                            self.inner.config_maps.register(namespace, &map.name, uid);
                        }
                        if let Some(secret) = &projection.secret {
                            self.inner.secrets.register(namespace, &secret.name, uid);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// Who `pod`'s files belong to: its `fsGroup`, and the one user all its
/// containers run as (`FsUserFrom`).
fn owners(pod: &Pod) -> Owners {
    let Some(spec) = pod.spec.as_ref() else {
        return Owners::default();
    };
    let pod_user = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let users: std::collections::BTreeSet<Option<i64>> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.run_as_user)
                .or(pod_user)
        })
        .collect();
    let fs_user = match users.into_iter().collect::<Vec<_>>().as_slice() {
        [Some(user)] => u32::try_from(*user).ok(),
        _ => None,
    };
    Owners {
        fs_user,
        fs_group: spec
            .security_context
            .as_ref()
            .and_then(|s| s.fs_group)
            .and_then(|g| u32::try_from(g).ok()),
    }
}

/// The memory limit of `pod`: its containers' limits summed, or its
/// largest init container's when that is more (none set: none).
fn pod_memory_limit(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let limit = |c: &k8s_openapi::api::core::v1::Container| {
        c.resources
            .as_ref()?
            .limits
            .as_ref()?
            .get("memory")
            .and_then(|q| quantity::value(&q.0))
    };
    let sum: Option<i64> = spec
        .containers
        .iter()
        .filter_map(limit)
        .reduce(|a, b| a.saturating_add(b));
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .filter_map(limit)
        .max();
    match (sum, init) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}
