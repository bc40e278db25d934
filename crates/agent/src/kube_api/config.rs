//! How the agent reaches the API server and as which node.

use crate::fs_watch::FsWatcher;
use std::path::PathBuf;
use std::time::Duration;

/// The kubelet's `kubeAPIQPS` (its `KubeletConfiguration` default): API
/// requests per second, sustained, past the burst.
pub(crate) const KUBE_API_QPS: u32 = 50;
/// The kubelet's `kubeAPIBurst`: API requests sent at once before the
/// rate applies. Its Events have the same figures on a client of their own
/// (`eventRecordQPS`, `eventBurst`).
pub(crate) const KUBE_API_BURST: u32 = 100;

/// How long after a change the node status is written, so that a burst of
/// device list updates makes one write. Well inside the 100 ms within which
/// a change must be visible.
pub(super) const DEFAULT_SETTLE: Duration = Duration::from_millis(10);
/// The first retry after a failed write; it doubles per failure.
pub(super) const WRITE_RETRY_INITIAL: Duration = Duration::from_millis(100);
/// The longest wait between attempts of a failed write: the API catches up
/// within this long of coming back.
pub(super) const WRITE_RETRY_MAX: Duration = Duration::from_secs(2);
/// The deadline of one request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Up to this fraction of each retry's delay is added at random, so that
/// the nodes of a cluster do not all retry at once when the API server
/// comes back.
pub(super) const RETRY_JITTER: f64 = 0.2;
/// The first retry after the API server refused a write in a way that
/// repeating will not change (403, 422, a topology collision); it doubles
/// per failure.
pub(super) const REFUSED_RETRY_INITIAL: Duration = Duration::from_secs(10);
/// The longest wait between attempts of a refused write.
pub(super) const REFUSED_RETRY_MAX: Duration = Duration::from_secs(5 * 60);

/// How often the pods owner gives back what pods no longer active hold
/// (the kubelet DRA manager's `reconcileLoop` period).
pub const POD_RECONCILE_PERIOD: Duration = Duration::from_secs(60);
/// How often a running pod is synced again without a change: its volumes
/// written again from their objects and tokens (the kubelet's
/// `syncFrequency`, jittered by up to half).
pub const SYNC_FREQUENCY: Duration = Duration::from_secs(60);

/// How long the node's Lease holds by default (the kubelet's
/// `nodeLeaseDurationSeconds`); it is renewed every quarter of it.
pub const NODE_LEASE_DURATION: Duration = Duration::from_secs(40);

/// How often the CSINode is read when the credentials may not watch it
/// (the kubelet's node status report period), by default.
pub const CSINODE_RECHECK: Duration = Duration::from_secs(5 * 60);

/// Where the API server and credentials come from.
#[derive(Clone)]
#[non_exhaustive]
pub enum KubeConfigSource {
    /// A kubeconfig file (its current context).
    Kubeconfig(PathBuf),
    /// The pod's service account (`KUBERNETES_SERVICE_HOST`, the mounted token).
    InCluster,
    /// The application's own client, used as it is (its TLS, its
    /// credentials, its layers) with the agent's request deadline around
    /// it. The application keeps its credentials current: a 401 is not
    /// followed by a new client.
    Client(kube::Client),
}

impl std::fmt::Debug for KubeConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kubeconfig(path) => f.debug_tuple("Kubeconfig").field(path).finish(),
            Self::InCluster => f.write_str("InCluster"),
            Self::Client(client) => f
                .debug_struct("Client")
                .field("default_namespace", &client.default_namespace())
                .finish_non_exhaustive(),
        }
    }
}

/// Settings of the API publishing.
#[derive(Debug, Clone)]
pub struct KubeApiConfig {
    /// Where the API server and credentials come from.
    pub source: KubeConfigSource,
    /// The Node this agent writes for (the kubelet's `--hostname-override`).
    pub node_name: String,
    /// How long after a change the node status is written, so that a burst of device list
    /// updates makes one write. Well inside the 100 ms within which a change must be visible.
    /// Default: 10 ms.
    pub settle: Duration,
    /// The first retry after a failed write; it doubles per failure. Default: 100 ms.
    pub retry_initial: Duration,
    /// The longest wait between attempts of a failed write: the API catches up within this long
    /// of coming back. Default: 2 s.
    pub retry_max: Duration,
    /// The deadline of one request. Default: 10 s.
    pub request_timeout: Duration,
    /// Up to this fraction of each retry's delay is added at random, so that the nodes of a
    /// cluster do not all retry at once when the API server comes back. Default: 0.2.
    pub retry_jitter: f64,
    /// The first retry after the API server refused a write in a way that repeating will not
    /// change (403, 422, a topology collision); it doubles per failure. Default: 10 s.
    pub refused_retry_initial: Duration,
    /// The longest wait between attempts of a refused write. Default: 5 min.
    pub refused_retry_max: Duration,
    /// Whether the pods bound to the node are served from the API
    /// (`crate::pods`): their devices allocated and claims prepared when
    /// they come, given back when they go. Off, allocations and prepares
    /// are made by hand (the admin socket). Default: on.
    pub serve_pods: bool,
    /// How often what pods no longer active hold is given back even
    /// without a change (the kubelet DRA manager's reconcile period).
    /// Default: 60 s.
    pub pod_reconcile_period: Duration,
    /// How often the node's CSINode is read when its credentials may not
    /// watch it (a node's own identity may only get it), up to a fifth
    /// longer at random; it is also read whenever the Node changes. A
    /// CSINode deleted or changed by another writer is repaired within
    /// this long. Default: 5 min (the kubelet's node status report period).
    pub csinode_recheck: Duration,
    /// How often a running pod is synced again without a change (its
    /// volumes' ConfigMaps, Secrets and tokens written again), up to half
    /// longer at random. Default: 1 min (the kubelet's `syncFrequency`).
    pub sync_frequency: Duration,
    /// How long the node's Lease (in `kube-node-lease`) holds; it is
    /// renewed every quarter of it, while the pods are served
    /// ([`serve_pods`](Self::serve_pods): the agent is the node's
    /// kubelet). `None`: no Lease. Default: 40 s (the kubelet's
    /// `nodeLeaseDurationSeconds`).
    pub node_lease_duration: Option<Duration>,
    /// How often the usage of the pods' claimed volumes is read (up to
    /// twice as long at random). Default: 1 min (the kubelet's
    /// `volumeStatsAggPeriod`).
    pub volume_stats_agg_period: Duration,
    /// The node registered and its status kept as the kubelet's (the
    /// kubelet's `registerNode`): the Node made when missing, its
    /// addresses, capacity, allocatable, `nodeInfo` and conditions
    /// written, while the pods are served. `None`: the Node is someone
    /// else's to make and keep. Default: `None`.
    pub node_registration: Option<crate::kube_api::NodeRegistration>,
    /// The node's client certificate bootstrapped and rotated as the
    /// kubelet's (its `--bootstrap-kubeconfig`, `rotateCertificates`,
    /// `--cert-dir`), with a kubeconfig source. `None`: the credentials are
    /// used as they are. Default: `None`.
    pub client_certificates: Option<crate::kube_api::ClientCertificates>,
    /// The resolver settings the pods get (the kubelet's `clusterDNS`,
    /// `clusterDomain`, `resolvConf`). Default: no cluster name servers,
    /// the node's `/etc/resolv.conf`.
    pub pod_dns: crate::pods::PodDnsConfig,
    /// Where the node's static pods are read from (the kubelet's
    /// `staticPodPath`, `fileCheckFrequency`); `None`: the node runs only
    /// the API's pods. Default: `None`.
    pub static_pods: Option<crate::pods::StaticPodsConfig>,
    /// The node's graceful shutdown (`shutdownGracePeriod` and the rest):
    /// with a grace period, the agent holds logind's shutdown while it
    /// stops its pods (with pods served and a runtime).
    pub node_shutdown: Option<crate::node_shutdown::NodeShutdownConfig>,
    /// Notices the credentials' files changing (the agent shares one among
    /// all its parts).
    pub fs_watcher: FsWatcher,
}

impl KubeApiConfig {
    /// The defaults for node `node_name` reached through `source`.
    pub fn new(source: KubeConfigSource, node_name: impl Into<String>) -> Self {
        Self {
            source,
            node_name: node_name.into(),
            settle: DEFAULT_SETTLE,
            retry_initial: WRITE_RETRY_INITIAL,
            retry_max: WRITE_RETRY_MAX,
            request_timeout: REQUEST_TIMEOUT,
            retry_jitter: RETRY_JITTER,
            refused_retry_initial: REFUSED_RETRY_INITIAL,
            refused_retry_max: REFUSED_RETRY_MAX,
            serve_pods: true,
            pod_reconcile_period: POD_RECONCILE_PERIOD,
            csinode_recheck: CSINODE_RECHECK,
            sync_frequency: SYNC_FREQUENCY,
            node_lease_duration: Some(NODE_LEASE_DURATION),
            volume_stats_agg_period: crate::volumes::VOLUME_STATS_AGG_PERIOD,
            node_registration: None,
            client_certificates: None,
            pod_dns: crate::pods::PodDnsConfig::default(),
            static_pods: None,
            node_shutdown: None,
            fs_watcher: FsWatcher::new(),
        }
    }
}

/// The environment variable a pod's downward API sets to its node's name
/// (`fieldRef: spec.nodeName`), as DRA drivers and CSI sidecars read it.
pub(super) const NODE_NAME_ENV: &str = "NODE_NAME";

/// The node name by default: `NODE_NAME` (in a pod, the downward API's
/// node name) when set, else the host name, lower case, as the kubelet
/// takes it. In a pod without the host's network the host name is the
/// pod's name, hence `NODE_NAME` first.
pub fn default_node_name() -> Option<String> {
    let from_env = std::env::var(NODE_NAME_ENV).ok();
    let name = match from_env.filter(|n| !n.trim().is_empty()) {
        Some(name) => name,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?,
    };
    let name = name.trim().to_lowercase();
    (!name.is_empty()).then_some(name)
}
