//! Settings of the pods owner.

use std::path::PathBuf;
use std::time::Duration;

use crate::kube_api::KubeApiConfig;

/// The first retry of a pod whose admission failed or waits; it doubles
/// per failure.
const RETRY_INITIAL: Duration = Duration::from_secs(1);
/// The longest wait between attempts: the kubelet's pod worker tries a
/// failed pod again after 10 s (`workerBackOffPeriod`).
const RETRY_MAX: Duration = Duration::from_secs(10);
/// The file, in the agent's state directory, recording the boot id of its
/// last run.
pub const BOOT_RECORD_FILE: &str = "boot-id";
/// The file, in the agent's state directory, where the simulated runtime
/// keeps its sandboxes and containers.
pub const SIMULATED_RUNTIME_FILE: &str = "simulated-runtime.json";
/// Up to this fraction of each retry's delay is added at random.
const RETRY_JITTER: f64 = 0.2;

/// Settings of the pods owner.
#[derive(Debug, Clone)]
pub struct PodsConfig {
    /// The node whose pods are served.
    pub node_name: String,
    /// Whether the pods bound to the node are watched and served; off,
    /// pods are prepared only when asked ([`super::PodsHandle::prepare_pod`]).
    pub serve: bool,
    /// How often what pods no longer active hold is given back even
    /// without a change. Default: 60 s (the kubelet DRA manager's
    /// reconcile period).
    pub reconcile_period: Duration,
    /// The first retry of a failed or waiting pod. Default: 1 s.
    pub retry_initial: Duration,
    /// The longest wait between attempts. Default: 10 s.
    pub retry_max: Duration,
    /// Up to this fraction of each retry's delay is added at random.
    /// Default: 0.2.
    pub retry_jitter: f64,
    /// The deadline of one API request. Default: the publisher's (10 s).
    pub request_timeout: Duration,
    /// Where the runtime writes pods' container logs (the kubelet's
    /// `podLogsDir`), one directory per pod made before its sandbox;
    /// `None` for a runtime that writes none (the simulated one).
    /// Default: `None`.
    pub pod_logs_dir: Option<PathBuf>,
    /// The node's address, which pods (in the host's network) have too;
    /// `None`: the Node's first `InternalIP`. Default: `None`.
    pub node_ip: Option<String>,
    /// Where the boot id of the agent's last run is recorded, to tell a
    /// reboot; `None`: reboots are not told. Default: `None` (the agent
    /// sets its state directory).
    pub boot_record: Option<PathBuf>,
    /// Where the files a real runtime's containers mount (a pod's hosts
    /// file, its containers' termination logs) are made, a directory per
    /// pod (the kubelet's `<root>/pods`); `None` with the simulated
    /// runtime. Default: `None`.
    pub pods_dir: Option<PathBuf>,
    /// How often a running pod is synced again without a change (its
    /// volumes written again), up to half longer at random. Default: the
    /// API settings' (1 min).
    pub sync_frequency: Duration,
    /// How often the usage of the pods' claimed volumes is read, up to
    /// twice as long at random. Default: the API settings' (1 min).
    pub volume_stats_agg_period: Duration,
    /// The resolver settings the pods get. Default: the API settings'.
    pub dns: super::PodDnsConfig,
    /// Where static pods are read from; `None`: none are. Default: the
    /// API settings'.
    pub static_pods: Option<super::StaticPodsConfig>,
    /// The agent's inotify instance, which the static pod path's watch
    /// shares. Default: one of its own.
    pub fs_watcher: crate::fs_watch::FsWatcher,
}

impl PodsConfig {
    /// The settings for the node and API of `kube`.
    pub fn new(kube: &KubeApiConfig) -> Self {
        Self {
            node_name: kube.node_name.clone(),
            serve: kube.serve_pods,
            reconcile_period: kube.pod_reconcile_period,
            retry_initial: RETRY_INITIAL,
            retry_max: RETRY_MAX,
            retry_jitter: RETRY_JITTER,
            request_timeout: kube.request_timeout,
            pod_logs_dir: None,
            node_ip: None,
            boot_record: None,
            pods_dir: None,
            sync_frequency: kube.sync_frequency,
            volume_stats_agg_period: kube.volume_stats_agg_period,
            dns: kube.pod_dns.clone(),
            static_pods: kube.static_pods.clone(),
            fs_watcher: kube.fs_watcher.clone(),
        }
    }
}
