//! How a DRA driver is served: directories, instance id, API versions,
//! health and registration, with the kubelet's defaults.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nodeplugins_api::constants::dra_service;
use nodeplugins_api::constants::layout::{DEFAULT_ROOT_DIR, PLUGINS_DIR, PLUGINS_REGISTRY_DIR};

use super::api_versions::ApiVersions;
use super::driver::DraDriver;
use super::health::{HEALTH_RESEND_INTERVAL, HealthReporter};
use crate::cdi::DEFAULT_CDI_DIR;

/// Settings of a [`DraDriverServer`](super::DraDriverServer), ending in
/// [`start`](Self::start).
#[derive(Clone)]
pub struct DraDriverBuilder {
    pub(super) driver: Arc<dyn DraDriver>,
    pub(super) driver_name: String,
    pub(super) registry_dir: PathBuf,
    pub(super) plugin_dir: PathBuf,
    pub(super) instance: Option<String>,
    pub(super) serialize: bool,
    pub(super) api_versions: ApiVersions,
    pub(super) health: Option<HealthReporter>,
    pub(super) health_resend: Duration,
    pub(super) register: bool,
    pub(super) state: StateDir,
    pub(super) cdi_kind: Option<String>,
    pub(super) cdi_dir: PathBuf,
    pub(super) lock_dir: Option<PathBuf>,
    pub(super) boot_id: Option<String>,
    pub(super) device_metadata: bool,
    #[cfg(feature = "kube")]
    pub(super) kube: Option<KubeSettings>,
    #[cfg(feature = "kube")]
    pub(super) resources: Option<super::slices::Resources>,
    #[cfg(feature = "kube")]
    pub(super) on_publish_error: Option<super::slices::PublishErrorHandler>,
    pub(super) on_error: Option<super::DraDriverErrorHandler>,
}

/// Where the prepared claims are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StateDir {
    /// The plugin directory.
    PluginDir,
    /// This directory.
    Dir(PathBuf),
    /// Memory only: nothing survives a restart.
    Memory,
}

/// The API server, for a driver in a cluster.
#[cfg(feature = "kube")]
#[derive(Clone)]
pub(super) struct KubeSettings {
    pub(super) client: kube::Client,
    pub(super) node_name: String,
}

impl DraDriverBuilder {
    pub(super) fn new(driver_name: String, driver: Arc<dyn DraDriver>) -> Self {
        let root = Path::new(DEFAULT_ROOT_DIR);
        Self {
            registry_dir: root.join(PLUGINS_REGISTRY_DIR),
            plugin_dir: root.join(PLUGINS_DIR).join(&driver_name),
            driver_name,
            driver,
            instance: None,
            serialize: true,
            api_versions: ApiVersions::default(),
            health: None,
            health_resend: HEALTH_RESEND_INTERVAL,
            register: true,
            state: StateDir::PluginDir,
            cdi_kind: None,
            cdi_dir: PathBuf::from(DEFAULT_CDI_DIR),
            lock_dir: None,
            boot_id: None,
            device_metadata: false,
            #[cfg(feature = "kube")]
            kube: None,
            #[cfg(feature = "kube")]
            resources: None,
            #[cfg(feature = "kube")]
            on_publish_error: None,
            on_error: None,
        }
    }

    /// The kubelet root directory (default `/var/lib/kubelet`): registers in
    /// `<root>/plugins_registry` and serves in `<root>/plugins/<driver>`.
    pub fn root_dir(mut self, root: impl AsRef<Path>) -> Self {
        let root = root.as_ref();
        self.registry_dir = root.join(PLUGINS_REGISTRY_DIR);
        self.plugin_dir = root.join(PLUGINS_DIR).join(&self.driver_name);
        self
    }

    /// The directory the agent watches, if not `<root>/plugins_registry`.
    pub fn registry_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.registry_dir = dir.into();
        self
    }

    /// The driver's own directory (service socket and lock file), if not
    /// `<root>/plugins/<driver>`.
    pub fn plugin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.plugin_dir = dir.into();
        self
    }

    /// A per-instance id (the pod UID) for rolling updates: both sockets get
    /// per-instance names, so an old and a new instance run side by side.
    pub fn instance(mut self, id: impl Into<String>) -> Self {
        self.instance = Some(id.into());
        self
    }

    /// Serialize prepare and unprepare calls (default on; across instances
    /// when an instance id is set). The record of prepared claims is kept
    /// consistent either way.
    pub fn serialize(mut self, on: bool) -> Self {
        self.serialize = on;
        self
    }

    /// Where the lock file that serializes calls across instances
    /// (`serialize.lock`) is, if not the plugin directory (the Go helper's
    /// `FlockDirectoryPath`).
    pub fn lock_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.lock_dir = Some(dir.into());
        self
    }

    /// Which DRAPlugin versions to serve (default both).
    pub fn api_versions(mut self, versions: ApiVersions) -> Self {
        self.api_versions = versions;
        self
    }

    /// Serve device health from `reporter` (v1 and v1alpha1).
    pub fn health(mut self, reporter: HealthReporter) -> Self {
        self.health = Some(reporter);
        self
    }

    /// How often unchanged health is sent again; see [`HEALTH_RESEND_INTERVAL`].
    pub fn health_resend(mut self, every: Duration) -> Self {
        self.health_resend = every;
        self
    }

    /// Serve the registration socket (default on). Off for a driver whose
    /// registration is done elsewhere, such as by a separate registrar.
    pub fn register(mut self, on: bool) -> Self {
        self.register = on;
        self
    }

    /// Where the prepared claims are recorded (default: the plugin
    /// directory, shared by the instances of a rolling update).
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state = StateDir::Dir(dir.into());
        self
    }

    /// Keeps the prepared claims in memory only: nothing survives a restart
    /// (for tests and drivers that keep their own records).
    pub fn claims_in_memory(mut self) -> Self {
        self.state = StateDir::Memory;
        self
    }

    /// The CDI kind (`vendor/class`, such as `dra.example.com/gpu`) of the
    /// spec files written for devices with container edits.
    pub fn cdi_kind(mut self, kind: impl Into<String>) -> Self {
        self.cdi_kind = Some(kind.into());
        self
    }

    /// Writes device metadata files (KEP-5304) for every prepared claim, as
    /// the Go helper does with device metadata on: per request, a
    /// `DeviceMetadata` file in the plugin directory with each device's
    /// [`metadata`](super::PreparedDevice::metadata), mounted into the
    /// containers through a CDI spec in the CDI directory; removed when the
    /// claim is unprepared. A claim whose files cannot be written fails.
    pub fn device_metadata(mut self, on: bool) -> Self {
        self.device_metadata = on;
        self
    }

    /// Where CDI spec files are written (default `/var/run/cdi`).
    pub fn cdi_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cdi_dir = dir.into();
        self
    }

    /// The identity of this boot of the machine (default: the kernel's,
    /// `/proc/sys/kernel/random/boot_id`). A claim prepared during another
    /// boot is prepared again, with what it got then
    /// ([`Claim::before_reboot`](super::Claim::before_reboot)): what the
    /// driver made may not have survived the reboot.
    pub fn boot_id(mut self, id: impl Into<String>) -> Self {
        self.boot_id = Some(id.into());
        self
    }

    /// Runs in a cluster: reads each claim it prepares from the API server
    /// with `client` (as node `node_name`).
    #[cfg(feature = "kube")]
    pub fn kube(mut self, client: kube::Client, node_name: impl Into<String>) -> Self {
        self.kube = Some(KubeSettings {
            client,
            node_name: node_name.into(),
        });
        self
    }

    /// Publishes `resources` as ResourceSlices for the node; needs
    /// [`kube`](Self::kube), set before or after this ([`start`](Self::start)
    /// refuses one without the other).
    #[cfg(feature = "kube")]
    pub fn resources(mut self, resources: super::slices::Resources) -> Self {
        self.resources = Some(resources);
        self
    }

    /// Called with every publishing failure (besides the log line and the
    /// count in [`PublishStats`](super::PublishStats)): a request that
    /// failed or timed out (retried with backoff), a pool the API would
    /// refuse (not sent), fields the server dropped, a failed watch.
    #[cfg(feature = "kube")]
    pub fn on_publish_error(
        mut self,
        handler: impl Fn(&super::slices::PublishError) + Send + Sync + 'static,
    ) -> Self {
        self.on_publish_error = Some(std::sync::Arc::new(handler));
        self
    }

    /// Calls `handler` with every error while the driver runs, as the Go
    /// helper's `HandleError`: recoverable ones
    /// ([`DraDriverError::is_recoverable`](super::DraDriverError::is_recoverable): publishing failures, retried in
    /// the background) and fatal ones (the service stopped serving before
    /// shutdown), after which the driver should shut down and exit.
    pub fn on_error(
        mut self,
        handler: impl Fn(&super::DraDriverError) + Send + Sync + 'static,
    ) -> Self {
        self.on_error = Some(std::sync::Arc::new(handler));
        self
    }

    /// The directory of the lock file serializing calls across instances.
    pub(super) fn lock_path(&self) -> PathBuf {
        self.lock_dir
            .as_ref()
            .unwrap_or(&self.plugin_dir)
            .join(super::serializer::SERIALIZE_LOCK_FILE)
    }

    /// The directory the prepared claims are kept in, if any.
    pub(super) fn state_path(&self) -> Option<PathBuf> {
        match &self.state {
            StateDir::PluginDir => Some(self.plugin_dir.clone()),
            StateDir::Dir(dir) => Some(dir.clone()),
            StateDir::Memory => None,
        }
    }

    /// The service socket: `dra.sock`, or `dra-<instance>.sock`.
    pub fn service_socket(&self) -> PathBuf {
        match &self.instance {
            Some(id) => self.plugin_dir.join(format!("dra-{id}.sock")),
            None => self.plugin_dir.join("dra.sock"),
        }
    }

    /// The service names advertised as supported versions.
    pub fn services(&self) -> Vec<String> {
        let mut services = Vec::new();
        if self.api_versions.v1 {
            services.push(dra_service::V1.to_string());
        }
        if self.api_versions.v1beta1 {
            services.push(dra_service::V1BETA1.to_string());
        }
        if self.health.is_some() && !services.is_empty() {
            services.push(dra_service::HEALTH_V1.to_string());
            services.push(dra_service::HEALTH_V1ALPHA1.to_string());
        }
        services
    }
}

#[cfg(all(test, feature = "kube"))]
mod tests {
    use std::collections::HashMap;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::dra_driver::{
        Claim, DraDriverError, PrepareResults, PreparedClaim, Resources, UnprepareResults,
    };

    struct Nothing;

    #[async_trait::async_trait]
    impl DraDriver for Nothing {
        async fn prepare(&self, _: Vec<Claim>) -> PrepareResults {
            HashMap::new()
        }

        async fn unprepare(&self, _: Vec<PreparedClaim>) -> UnprepareResults {
            HashMap::new()
        }
    }

    fn client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap_or_default());
        kube::Client::try_from(config).unwrap_or_else(|e| panic!("client: {e}"))
    }

    #[tokio::test]
    async fn resources_and_the_api_client_may_come_in_either_order() {
        let before = DraDriverBuilder::new("gpu.example.com".into(), Arc::new(Nothing))
            .resources(Resources::new())
            .kube(client(), "node-1");
        assert!(before.resources.is_some() && before.kube.is_some());
        let after = DraDriverBuilder::new("gpu.example.com".into(), Arc::new(Nothing))
            .kube(client(), "node-1")
            .resources(Resources::new());
        assert!(after.resources.is_some() && after.kube.is_some());
    }

    #[tokio::test]
    async fn resources_without_an_api_client_are_refused_at_start() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let refused = DraDriverBuilder::new("gpu.example.com".into(), Arc::new(Nothing))
            .root_dir(root.path())
            .resources(Resources::new())
            .start(CancellationToken::new())
            .await;
        assert!(matches!(refused, Err(DraDriverError::ResourcesWithoutKube)));
    }
}
