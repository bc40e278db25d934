//! The agent's settings: each from its flag, else its environment variable,
//! else the config file (`--config`, TOML), else the kubelet's default.
//!
//! ```toml
//! root_dir = "/var/lib/kubelet"
//! log_format = "json"            # or "text"
//! log_level = "info"
//! metrics_addr = "127.0.0.1:10261" # or "off"
//! dra_cleanup_grace = "30s"
//! get_info_timeout = "1s"
//! kubeconfig = "/etc/kubernetes/kubelet.conf"  # or "in-cluster", "off"
//! node_name = "node-1"
//! pod_resources_mode = "0600"    # or "0660", ..., "off"
//! worker_threads = "1"
//! ```
//!
//! Every duration is written as Go writes one (`500ms`, `30s`, `1m30s`,
//! `1h`), so a value copied from a kubelet flag means the same here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use nodeplugins::agent::{AgentConfig, DEFAULT_METRICS_ADDR};
use nodeplugins::kube_api::{
    ClientCertificates, KubeApiConfig, KubeConfigSource, NodeRegistration, default_node_name,
};
use nodeplugins::node_shutdown::{NodeShutdownConfig, PriorityGracePeriod};
use nodeplugins_api::constants::layout::DEFAULT_ROOT_DIR;

use nodeplugins_api::duration::parse_go_duration;
use nodeplugins_sdk::logging::LogFormat;

/// A metrics address, or none (`off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MetricsAddr(pub(crate) Option<std::net::SocketAddr>);

pub(crate) fn parse_metrics_addr(text: &str) -> Result<MetricsAddr, String> {
    if text == "off" {
        return Ok(MetricsAddr(None));
    }
    text.parse()
        .map(|addr| MetricsAddr(Some(addr)))
        .map_err(|_| format!("expected HOST:PORT (such as 127.0.0.1:10261) or off, got {text:?}"))
}

macro_rules! settings {
    ($( $(#[doc = $doc:literal])* $field:ident : $ty:ty, $env:literal, $parse:expr ;)*) => {
        /// `nodeplugins run` flags; each also reads an environment variable.
        #[derive(Debug, Default, clap::Args)]
        pub(crate) struct RunArgs {
            /// A TOML file with any of these settings (flags and environment
            /// variables take precedence).
            #[arg(long, env = "NODEPLUGINS_CONFIG")]
            pub(crate) config: Option<PathBuf>,
            /// Print the settings in effect, as a config file, and exit.
            #[arg(long)]
            pub(crate) print_config: bool,
            $(
                $(#[doc = $doc])*
                #[arg(long, env = $env, value_parser = $parse)]
                pub(crate) $field: Option<$ty>,
            )*
        }

        /// The config file: the same settings, as strings.
        #[derive(Debug, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileConfig {
            $( $field: Option<String>, )*
        }

        /// Flag or environment, else file.
        #[derive(Debug, Default)]
        struct Chosen {
            $( $field: Option<$ty>, )*
        }

        fn choose(args: &RunArgs, file: &FileConfig, path: &Path) -> anyhow::Result<Chosen> {
            Ok(Chosen {
                $(
                    $field: match (&args.$field, &file.$field) {
                        (Some(value), _) => Some(value.clone()),
                        (None, Some(text)) => Some(($parse)(text).map_err(|e| {
                            anyhow::anyhow!("{}: {}: {e}", path.display(), stringify!($field))
                        })?),
                        (None, None) => None,
                    },
                )*
            })
        }
    };
}

fn parse_path(text: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(text))
}

const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// A level (`info`) or a filter of `TARGET=LEVEL` directives, optionally
/// after a level (`info,h2=warn`). A bare word that is not a level would
/// filter by a target of that name and silence everything else, which is
/// never what a typo meant, so it is refused.
fn parse_log_level(text: &str) -> Result<String, String> {
    let is_level = |word: &str| LEVELS.contains(&word.trim().to_ascii_lowercase().as_str());
    for directive in text.split(',') {
        let ok = match directive.rsplit_once('=') {
            Some((target, level)) => !target.trim().is_empty() && is_level(level),
            None => is_level(directive),
        };
        if !ok {
            return Err(format!(
                "{directive:?} is not a level ({}) or TARGET=LEVEL",
                LEVELS.join(", ")
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(text)
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

fn parse_log_format(text: &str) -> Result<LogFormat, String> {
    text.parse()
        .map_err(|_| format!("expected text or json, got {text:?}"))
}

settings! {
    /// Root directory, like the kubelet's --root-dir [default: /var/lib/kubelet].
    root_dir: PathBuf, "NODEPLUGINS_ROOT_DIR", parse_path;
    /// Log line format: text or json [default: text].
    log_format: LogFormat, "NODEPLUGINS_LOG_FORMAT", parse_log_format;
    /// Log level or filter; RUST_LOG overrides it [default: info].
    log_level: String, "NODEPLUGINS_LOG_LEVEL", parse_log_level;
    /// Where to serve /metrics, /healthz and /readyz (HOST:PORT, port 0 for
    /// any), or off [default: 127.0.0.1:10261].
    metrics_addr: MetricsAddr, "NODEPLUGINS_METRICS_ADDR", parse_metrics_addr;
    /// How long a DRA driver may have no connected instance before it is
    /// cleaned up [default: 30s].
    dra_cleanup_grace: Duration, "NODEPLUGINS_DRA_CLEANUP_GRACE", parse_go_duration;
    /// DRA NodePrepareResources/NodeUnprepareResources deadline [default: 45s].
    dra_call_timeout: Duration, "NODEPLUGINS_DRA_CALL_TIMEOUT", parse_go_duration;
    /// Device health reports count this long when a DRA driver sets no timeout [default: 30s].
    dra_health_timeout: Duration, "NODEPLUGINS_DRA_HEALTH_TIMEOUT", parse_go_duration;
    /// A device plugin resource stays known this long after its last plugin left [default: 5m].
    device_grace_period: Duration, "NODEPLUGINS_DEVICE_GRACE_PERIOD", parse_go_duration;
    /// Dialing a device plugin or a DRA driver [default: 10s].
    plugin_dial_timeout: Duration, "NODEPLUGINS_PLUGIN_DIAL_TIMEOUT", parse_go_duration;
    /// GetInfo on a registration socket [default: 1s].
    get_info_timeout: Duration, "NODEPLUGINS_GET_INFO_TIMEOUT", parse_go_duration;
    /// NotifyRegistrationStatus [default: 5s].
    notify_timeout: Duration, "NODEPLUGINS_NOTIFY_TIMEOUT", parse_go_duration;
    /// The longest wait before a failed registration is retried [default: 2m2s].
    max_backoff: Duration, "NODEPLUGINS_MAX_BACKOFF", parse_go_duration;
    /// CSI NodeGetInfo [default: 2m].
    csi_timeout: Duration, "NODEPLUGINS_CSI_TIMEOUT", parse_go_duration;
    /// Publish to the Kubernetes API as the kubelet does: a kubeconfig file,
    /// in-cluster (the pod's service account), or off [default: off].
    kubeconfig: KubeconfigSetting, "NODEPLUGINS_KUBECONFIG", parse_kubeconfig;
    /// The Node to publish for [default: $NODE_NAME (a pod's node, from the downward API), else the host name, lower case].
    node_name: String, "NODEPLUGINS_NODE_NAME", parse_node_name;
    /// With a kubeconfig, serve the pods bound to the node: allocate their
    /// devices and prepare their claims when they come, give them back
    /// when they go (on), or leave that to allocate and prepare by hand
    /// (off) [default: on].
    pods: Switch, "NODEPLUGINS_PODS", parse_switch;
    /// How often what pods no longer active hold is given back even when
    /// nothing changed [default: 60s].
    pod_reconcile_period: Duration, "NODEPLUGINS_POD_RECONCILE_PERIOD", parse_go_duration;
    /// How often a running pod is synced again without a change: its
    /// volumes' ConfigMaps, Secrets and tokens written again, as the
    /// kubelet's --sync-frequency (up to half longer at random) [default: 1m].
    sync_frequency: Duration, "NODEPLUGINS_SYNC_FREQUENCY", parse_go_duration;
    /// How often the usage of the pods' claimed CSI volumes is read (the
    /// kubelet_volume_stats_* metrics), as the kubelet's
    /// volumeStatsAggPeriod (up to twice as long at random) [default: 1m].
    volume_stats_agg_period: Duration, "NODEPLUGINS_VOLUME_STATS_AGG_PERIOD", parse_go_duration;
    /// The container runtime the node's pods run on, as the kubelet's
    /// --container-runtime-endpoint (unix:///path, or a socket path), or
    /// simulated: containers "run" from their start until stopped and
    /// nothing is executed, for trying the agent on a machine without a
    /// runtime, only when asked for [default, when pods are served:
    /// unix:///run/containerd/containerd.sock, the kubelet's].
    container_runtime_endpoint: RuntimeEndpoint, "NODEPLUGINS_CONTAINER_RUNTIME_ENDPOINT", parse_runtime_endpoint;
    /// Where the container runtime writes the pods' logs, as the kubelet's
    /// podLogsDir [default: /var/log/pods].
    pod_logs_dir: PathBuf, "NODEPLUGINS_POD_LOGS_DIR", parse_path;
    /// How often the node's CSINode is read when the credentials may not
    /// watch it (a node's own identity may only get it); a CSINode another
    /// writer deleted or changed is repaired within this long [default: 5m].
    csinode_recheck: Duration, "NODEPLUGINS_CSINODE_RECHECK", parse_go_duration;
    /// Mode of the pod-resources socket (octal; its directory gets the same
    /// plus search), or off to not serve it [default: 0600].
    pod_resources_mode: PodResourcesMode, "NODEPLUGINS_POD_RESOURCES_MODE", parse_pod_resources_mode;
    /// With pods served, register the node and keep its status as the
    /// kubelet's --register-node does: the Node made when missing, its
    /// addresses, capacity, allocatable, nodeInfo and conditions (Ready
    /// from the runtime's readiness) written [default: off].
    register_node: Switch, "NODEPLUGINS_REGISTER_NODE", parse_switch;
    /// The node's addresses, comma-separated, as the kubelet's --node-ip
    /// (a loopback address is taken, with a warning) [default: found from
    /// the host name, its DNS, or the default route].
    node_ip: NodeIps, "NODEPLUGINS_NODE_IP", parse_node_ips;
    /// Labels the registered Node gets, as the kubelet's --node-labels
    /// (key=value,...; under kubernetes.io or k8s.io only those a
    /// kubelet may set) [default: none].
    node_labels: Labels, "NODEPLUGINS_NODE_LABELS", parse_node_labels;
    /// Taints the Node is made with, as the kubelet's
    /// --register-with-taints (key[=value]:Effect,...) [default: none].
    register_with_taints: Taints, "NODEPLUGINS_REGISTER_WITH_TAINTS", parse_taints;
    /// The credentials that may ask for the node's first client
    /// certificate, as the kubelet's --bootstrap-kubeconfig: when the
    /// kubeconfig is missing or its certificate expired, a
    /// CertificateSigningRequest is made with them and the kubeconfig
    /// written, naming the certificate in the cert dir [default: none].
    bootstrap_kubeconfig: PathBuf, "NODEPLUGINS_BOOTSTRAP_KUBECONFIG", parse_path;
    /// Ask for a new client certificate at 70-90% of the current one's
    /// life, as the kubelet's rotateCertificates (a kubeconfig naming
    /// <cert dir>/kubelet-client-current.pem, as a bootstrap writes it)
    /// [default: off].
    rotate_certificates: Switch, "NODEPLUGINS_ROTATE_CERTIFICATES", parse_switch;
    /// The cluster's DNS servers, comma-separated, as the kubelet's
    /// --cluster-dns: a pod of dnsPolicy ClusterFirst (off the host's
    /// network) or ClusterFirstWithHostNet resolves through them alone
    /// [default: none, such pods get the node's resolver settings].
    cluster_dns: ClusterDns, "NODEPLUGINS_CLUSTER_DNS", parse_cluster_dns;
    /// The cluster's domain, as the kubelet's --cluster-domain: a
    /// cluster-first pod searches <namespace>.svc.<domain>, svc.<domain>
    /// and <domain> before the node's search domains [default: none].
    cluster_domain: String, "NODEPLUGINS_CLUSTER_DOMAIN", parse_cluster_domain;
    /// The node's resolver file, the base of the pods' DNS settings, as
    /// the kubelet's --resolv-conf ("" for none: a pod in the node's DNS
    /// gets a loopback name server) [default: /etc/resolv.conf].
    resolv_conf: ResolvConf, "NODEPLUGINS_RESOLV_CONF", parse_resolv_conf;
    /// The node's static pods, as the kubelet's staticPodPath (its
    /// --pod-manifest-path): a manifest, or a directory of them (not
    /// recursing, names starting with '.' skipped), each one v1 Pod run
    /// on the node with a mirror pod in the API [default: none].
    static_pod_path: PathBuf, "NODEPLUGINS_STATIC_POD_PATH", parse_path;
    /// How often the static pod path is read again besides its inotify
    /// watch, as the kubelet's fileCheckFrequency [default: 20s].
    file_check_frequency: Duration, "NODEPLUGINS_FILE_CHECK_FREQUENCY", parse_go_duration;
    /// How long the node's shutdown is held for its pods, as the kubelet's
    /// shutdownGracePeriod: with logind's shutdown lock held, the node is
    /// not ready, new pods are refused and the running ones stopped,
    /// lowest priority first (0s: off) [default: 0s].
    shutdown_grace_period: Duration, "NODEPLUGINS_SHUTDOWN_GRACE_PERIOD", parse_go_duration;
    /// The part of the shutdown grace period kept for critical pods
    /// (priority 2000000000 and up), stopped last, as the kubelet's
    /// shutdownGracePeriodCriticalPods [default: 0s].
    shutdown_grace_period_critical_pods: Duration, "NODEPLUGINS_SHUTDOWN_GRACE_PERIOD_CRITICAL_PODS", parse_go_duration;
    /// The shutdown's groups by pod priority instead of the two periods,
    /// as the kubelet's shutdownGracePeriodByPodPriority:
    /// PRIORITY=SECONDS,... (a pod goes to the highest group not above its
    /// priority) [default: none].
    shutdown_grace_period_by_pod_priority: ShutdownGroups, "NODEPLUGINS_SHUTDOWN_GRACE_PERIOD_BY_POD_PRIORITY", parse_shutdown_groups;
    /// The pods the node takes, as the kubelet's --max-pods [default: 110].
    max_pods: u32, "NODEPLUGINS_MAX_PODS", parse_max_pods;
    /// Where to serve the kubelet's HTTPS API (logs, exec, attach,
    /// port-forward for the API server), as the kubelet's --address and
    /// --port (HOST:PORT, such as 0.0.0.0:10250), or off; its port is the
    /// registered Node's kubelet endpoint [default: off].
    kubelet_server: ServerAddr, "NODEPLUGINS_KUBELET_SERVER", parse_server_addr;
    /// The kubelet API's serving certificate (PEM, the leaf first), as
    /// the kubelet's --tls-cert-file [default: a self-signed one made once
    /// in the cert dir].
    tls_cert_file: PathBuf, "NODEPLUGINS_TLS_CERT_FILE", parse_path;
    /// Its key, as the kubelet's --tls-private-key-file.
    tls_private_key_file: PathBuf, "NODEPLUGINS_TLS_PRIVATE_KEY_FILE", parse_path;
    /// Where the self-signed serving certificate and the client
    /// certificates are kept, as the kubelet's --cert-dir [default:
    /// <root>/pki].
    cert_dir: PathBuf, "NODEPLUGINS_CERT_DIR", parse_path;
    /// The CA client certificates of the kubelet's API must chain to, as
    /// the kubelet's --client-ca-file (the API server's kubelet client
    /// certificate is signed by it) [default: none, no client
    /// certificates].
    client_ca_file: PathBuf, "NODEPLUGINS_CLIENT_CA_FILE", parse_path;
    /// Whether the kubelet's API takes requests without credentials as
    /// system:anonymous, as the kubelet's --anonymous-auth [default: off].
    anonymous_auth: Switch, "NODEPLUGINS_ANONYMOUS_AUTH", parse_switch;
    /// How the kubelet's API authorizes requests, as the kubelet's
    /// --authorization-mode: Webhook (a SubjectAccessReview on
    /// nodes/<subresource>) or AlwaysAllow [default: Webhook].
    authorization_mode: AuthzMode, "NODEPLUGINS_AUTHORIZATION_MODE", parse_authorization_mode;
    /// Threads running the agent: 1 runs it all on one thread, which saves
    /// the hand-offs between threads (its work is small and waits on
    /// sockets); more use a multi-threaded runtime [default: 1].
    worker_threads: usize, "NODEPLUGINS_WORKER_THREADS", parse_worker_threads;
}

/// The node's addresses (`--node-ip`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeIps(Vec<std::net::IpAddr>);

fn parse_node_ips(text: &str) -> Result<NodeIps, String> {
    if text.trim().is_empty() {
        // None given: found as the kubelet finds them.
        return Ok(NodeIps(Vec::new()));
    }
    let ips = text
        .split(',')
        .map(|ip| {
            ip.trim()
                .parse::<std::net::IpAddr>()
                .map_err(|_| format!("{ip:?} is not an IP address"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    match ips.as_slice() {
        [_] => Ok(NodeIps(ips)),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(NodeIps(ips)),
        _ => Err(format!(
            "expected one IP address, or two of different families (dual-stack), got {text:?}"
        )),
    }
}

/// The node shutdown's groups by pod priority: (priority, seconds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ShutdownGroups(Vec<(i32, i64)>);

fn parse_shutdown_groups(text: &str) -> Result<ShutdownGroups, String> {
    text.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|group| {
            let (priority, seconds) = group
                .split_once('=')
                .ok_or_else(|| format!("{group:?} is not PRIORITY=SECONDS"))?;
            let priority = priority
                .trim()
                .parse::<i32>()
                .map_err(|_| format!("{priority:?} is not a priority"))?;
            let seconds = seconds
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|s| *s >= 0)
                .ok_or_else(|| format!("{seconds:?} is not a number of seconds"))?;
            Ok((priority, seconds))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(ShutdownGroups)
}

/// The cluster's DNS servers (`--cluster-dns`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClusterDns(Vec<std::net::IpAddr>);

fn parse_cluster_dns(text: &str) -> Result<ClusterDns, String> {
    text.split(',')
        .map(str::trim)
        .filter(|ip| !ip.is_empty())
        .map(|ip| {
            ip.parse::<std::net::IpAddr>()
                .map_err(|_| format!("{ip:?} is not an IP address"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(ClusterDns)
}

fn parse_cluster_domain(text: &str) -> Result<String, String> {
    let domain = text.trim().trim_end_matches('.');
    if domain.contains(char::is_whitespace) {
        return Err(format!("{text:?} is not a domain"));
    }
    Ok(domain.to_string())
}

/// The node's resolver file (`--resolv-conf`); `None`: none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvConf(Option<PathBuf>);

fn parse_resolv_conf(text: &str) -> Result<ResolvConf, String> {
    Ok(ResolvConf(
        Some(text.trim())
            .filter(|t| !t.is_empty())
            .map(PathBuf::from),
    ))
}

/// Labels (`--node-labels`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Labels(std::collections::BTreeMap<String, String>);

fn parse_node_labels(text: &str) -> Result<Labels, String> {
    let mut labels = std::collections::BTreeMap::new();
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("{pair:?} is not key=value"));
        };
        labels.insert(key.trim().to_string(), value.trim().to_string());
    }
    nodeplugins::kube_api::validate_node_labels(&labels)?;
    Ok(Labels(labels))
}

/// Taints (`--register-with-taints`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Taints(Vec<k8s_openapi::api::core::v1::Taint>);

fn parse_taints(text: &str) -> Result<Taints, String> {
    let mut taints = Vec::new();
    for spec in text.split(',').filter(|p| !p.trim().is_empty()) {
        let spec = spec.trim();
        let Some((key_value, effect)) = spec.rsplit_once(':') else {
            return Err(format!("{spec:?} is not key[=value]:Effect"));
        };
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            return Err(format!(
                "{spec:?}: the effect must be NoSchedule, PreferNoSchedule or NoExecute"
            ));
        }
        let (key, value) = match key_value.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (key_value, None),
        };
        if key.is_empty() {
            return Err(format!("{spec:?} has no key"));
        }
        taints.push(k8s_openapi::api::core::v1::Taint {
            key: key.to_string(),
            value,
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(Taints(taints))
}

fn parse_max_pods(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a number of pods above 0, got {text:?}")),
    }
}

/// Where the kubelet's API is served, if anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerAddr(Option<std::net::SocketAddr>);

fn parse_server_addr(text: &str) -> Result<ServerAddr, String> {
    if text == "off" {
        return Ok(ServerAddr(None));
    }
    text.parse()
        .map(|addr| ServerAddr(Some(addr)))
        .map_err(|_| format!("expected HOST:PORT (such as 0.0.0.0:10250) or off, got {text:?}"))
}

/// The kubelet API's authorization mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AuthzMode(nodeplugins::kubelet_server::AuthorizationMode);

fn parse_authorization_mode(text: &str) -> Result<AuthzMode, String> {
    use nodeplugins::kubelet_server::AuthorizationMode;
    match text {
        "Webhook" => Ok(AuthzMode(AuthorizationMode::Webhook)),
        "AlwaysAllow" => Ok(AuthzMode(AuthorizationMode::AlwaysAllow)),
        _ => Err(format!("expected Webhook or AlwaysAllow, got {text:?}")),
    }
}

/// The kubelet's default runtime endpoint, the node's pods' runtime when
/// none is given.
pub(crate) const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// The container runtime: an endpoint, or the simulated one (`None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeEndpoint(Option<String>);

fn parse_runtime_endpoint(text: &str) -> Result<RuntimeEndpoint, String> {
    match text {
        "simulated" => Ok(RuntimeEndpoint(None)),
        "" => Err("expected an endpoint (unix:///path, or a path) or simulated".into()),
        t if t.starts_with("unix://") || t.starts_with('/') => {
            Ok(RuntimeEndpoint(Some(t.to_string())))
        }
        t => Err(format!(
            "expected unix:///path, an absolute socket path or simulated, got {t:?}"
        )),
    }
}

/// The most worker threads accepted.
const MAX_WORKER_THREADS: usize = 256;

fn parse_worker_threads(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_WORKER_THREADS).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a number of threads from 1 to {MAX_WORKER_THREADS}, got {text:?}"
        )),
    }
}

/// A setting that is on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Switch(bool);

fn parse_switch(text: &str) -> Result<Switch, String> {
    match text {
        "on" => Ok(Switch(true)),
        "off" => Ok(Switch(false)),
        _ => Err(format!("expected on or off, got {text:?}")),
    }
}

/// The pod-resources socket's mode, or none (not served).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PodResourcesMode(Option<u32>);

fn parse_pod_resources_mode(text: &str) -> Result<PodResourcesMode, String> {
    if text == "off" {
        return Ok(PodResourcesMode(None));
    }
    match u32::from_str_radix(text, 8) {
        Ok(mode) if mode <= 0o777 && mode & 0o600 == 0o600 => Ok(PodResourcesMode(Some(mode))),
        Ok(_) => Err(format!(
            "{text:?} must give its owner read and write (0600 to 0777)"
        )),
        Err(_) => Err(format!(
            "expected an octal mode such as 0600, or off, got {text:?}"
        )),
    }
}

/// Where the API server is, or none.
#[derive(Debug, Clone)]
pub(crate) enum KubeconfigSetting {
    Off,
    Source(KubeConfigSource),
}

fn parse_kubeconfig(text: &str) -> Result<KubeconfigSetting, String> {
    match text {
        "" => Err("expected a kubeconfig path, in-cluster or off".into()),
        "off" => Ok(KubeconfigSetting::Off),
        "in-cluster" => Ok(KubeconfigSetting::Source(KubeConfigSource::InCluster)),
        path => Ok(KubeconfigSetting::Source(KubeConfigSource::Kubeconfig(
            PathBuf::from(path),
        ))),
    }
}

fn parse_node_name(text: &str) -> Result<String, String> {
    if nodeplugins_api::names::is_dns_subdomain(text) {
        Ok(text.to_string())
    } else {
        Err(format!("{text:?} is not a node name (a DNS subdomain)"))
    }
}

/// What `run` starts with.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) agent: AgentConfig,
    pub(crate) log_format: LogFormat,
    pub(crate) log_level: String,
    /// Publishing to the Kubernetes API, when a kubeconfig is given.
    pub(crate) kube: Option<KubeApiConfig>,
    /// The node name in effect (shown by --print-config even when off).
    pub(crate) node_name: String,
    /// Threads running the agent; 1 is a single-threaded runtime.
    pub(crate) worker_threads: usize,
}

fn human(d: Duration) -> String {
    if d.subsec_millis() != 0 || d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}

impl Settings {
    /// Resolves `args` against the config file it names, if any.
    pub(crate) fn resolve(args: &RunArgs) -> anyhow::Result<Self> {
        let (file, path) = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("read config file {}", path.display()))?;
                let file: FileConfig = toml::from_str(&text)
                    .with_context(|| format!("config file {}", path.display()))?;
                (file, path.clone())
            }
            None => (FileConfig::default(), PathBuf::new()),
        };
        Self::resolve_with(args, &file, &path)
    }

    /// The settings `values` name (each as a config file writes it),
    /// nothing else given; `origin` names where they came from in errors.
    pub(crate) fn from_values(values: &[(&str, String)], origin: &str) -> anyhow::Result<Self> {
        let table: toml::Table = values
            .iter()
            .map(|(name, value)| (name.to_string(), toml::Value::String(value.clone())))
            .collect();
        let file: FileConfig = toml::Value::Table(table)
            .try_into()
            .with_context(|| origin.to_string())?;
        Self::resolve_with(&RunArgs::default(), &file, Path::new(origin))
    }

    fn resolve_with(args: &RunArgs, file: &FileConfig, path: &Path) -> anyhow::Result<Self> {
        let c = choose(args, file, path)?;
        let root_dir = c
            .root_dir
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT_DIR));
        let mut agent = AgentConfig::new(&root_dir);
        agent.metrics_addr = match c.metrics_addr {
            Some(addr) => addr.0,
            None => {
                parse_metrics_addr(DEFAULT_METRICS_ADDR)
                    .map_err(anyhow::Error::msg)?
                    .0
            }
        };
        let set = |target: &mut Duration, value: Option<Duration>| {
            if let Some(value) = value {
                *target = value;
            }
        };
        set(&mut agent.dra.cleanup_grace, c.dra_cleanup_grace);
        set(&mut agent.dra.call_timeout, c.dra_call_timeout);
        set(&mut agent.dra.health_timeout, c.dra_health_timeout);
        set(&mut agent.dra.dial_timeout, c.plugin_dial_timeout);
        set(&mut agent.devices.dial_timeout, c.plugin_dial_timeout);
        set(&mut agent.devices.grace_period, c.device_grace_period);
        set(&mut agent.plugins.get_info_timeout, c.get_info_timeout);
        set(&mut agent.plugins.notify_timeout, c.notify_timeout);
        set(&mut agent.plugins.max_backoff, c.max_backoff);
        set(&mut agent.csi_timeout, c.csi_timeout);
        if let Some(dir) = c.pod_logs_dir {
            agent.pod_logs_dir = dir;
        }
        match c.pod_resources_mode {
            Some(PodResourcesMode(None)) => agent.pod_resources = None,
            Some(PodResourcesMode(Some(mode))) => {
                if let Some(pod_resources) = &mut agent.pod_resources {
                    pod_resources.mode = mode;
                }
            }
            None => {}
        }
        let node_name = match c.node_name {
            Some(name) => name,
            None => default_node_name()
                .context("cannot read the host name for the node name; give --node-name")?,
        };
        if let Some(ServerAddr(Some(addr))) = c.kubelet_server {
            use nodeplugins::kubelet_server::{KubeletServerConfig, ServingCertificate};
            let cert_dir = c.cert_dir.clone().unwrap_or_else(|| root_dir.join("pki"));
            let mut server = KubeletServerConfig::new(addr, cert_dir, node_name.clone());
            match (c.tls_cert_file.clone(), c.tls_private_key_file.clone()) {
                (Some(cert), Some(key)) => {
                    server.certificate = ServingCertificate::Files { cert, key };
                }
                (None, None) => {}
                _ => anyhow::bail!(
                    "tls_cert_file and tls_private_key_file go together: give both or neither"
                ),
            }
            server.client_ca_file = c.client_ca_file.clone();
            server.anonymous = c.anonymous_auth.is_some_and(|Switch(on)| on);
            if let Some(AuthzMode(mode)) = c.authorization_mode {
                server.authorization = mode;
            }
            agent.kubelet_server = Some(server);
        }
        let kube = match c.kubeconfig {
            None | Some(KubeconfigSetting::Off) => None,
            Some(KubeconfigSetting::Source(source)) => {
                let mut kube = KubeApiConfig::new(source, node_name.clone());
                kube.serve_pods = c.pods.is_none_or(|Switch(on)| on);
                set(&mut kube.pod_reconcile_period, c.pod_reconcile_period);
                set(&mut kube.sync_frequency, c.sync_frequency);
                set(&mut kube.volume_stats_agg_period, c.volume_stats_agg_period);
                set(&mut kube.csinode_recheck, c.csinode_recheck);
                if let Some(ClusterDns(ips)) = c.cluster_dns.clone() {
                    kube.pod_dns.cluster_dns = ips;
                }
                if let Some(domain) = c.cluster_domain.clone() {
                    kube.pod_dns.cluster_domain = domain;
                }
                if let Some(ResolvConf(file)) = c.resolv_conf.clone() {
                    kube.pod_dns.resolv_conf = file;
                }
                if let Some(path) = c.static_pod_path.clone() {
                    kube.static_pods = Some(nodeplugins::pods::StaticPodsConfig {
                        path,
                        check_frequency: c
                            .file_check_frequency
                            .unwrap_or(nodeplugins::pods::DEFAULT_FILE_CHECK_FREQUENCY),
                    });
                }
                if let Some(NodeIps(ips)) = c.node_ip.clone() {
                    kube.pod_dns.node_ips = ips;
                }
                let shutdown = match c.shutdown_grace_period_by_pod_priority.clone() {
                    Some(ShutdownGroups(groups)) if !groups.is_empty() => {
                        NodeShutdownConfig::by_pod_priority(
                            groups
                                .into_iter()
                                .map(|(p, s)| PriorityGracePeriod::new(p, s))
                                .collect(),
                        )
                    }
                    _ => NodeShutdownConfig::new(
                        c.shutdown_grace_period.unwrap_or_default(),
                        c.shutdown_grace_period_critical_pods.unwrap_or_default(),
                    ),
                };
                kube.node_shutdown = shutdown.enabled().then_some(shutdown);
                if c.register_node.is_some_and(|Switch(on)| on) {
                    let mut registration = NodeRegistration::new(root_dir.clone());
                    if let Some(NodeIps(ips)) = c.node_ip.clone() {
                        registration.node_ips = ips;
                    }
                    if let Some(Labels(labels)) = c.node_labels.clone() {
                        registration.labels = labels;
                    }
                    if let Some(Taints(taints)) = c.register_with_taints.clone() {
                        registration.taints = taints;
                    }
                    if let Some(max_pods) = c.max_pods {
                        registration.max_pods = max_pods;
                    }
                    kube.node_registration = Some(registration);
                }
                let rotate = c.rotate_certificates.is_some_and(|Switch(on)| on);
                if rotate || c.bootstrap_kubeconfig.is_some() {
                    let cert_dir = c.cert_dir.clone().unwrap_or_else(|| root_dir.join("pki"));
                    let mut certs = ClientCertificates::new(cert_dir);
                    certs.bootstrap_kubeconfig = c.bootstrap_kubeconfig.clone();
                    certs.rotate = rotate;
                    kube.client_certificates = Some(certs);
                }
                Some(kube)
            }
        };
        // Pods run on the kubelet's endpoint unless another, or the
        // simulated runtime, is asked for: a node never reports its pods
        // Running on a runtime nobody chose.
        agent.container_runtime_endpoint = match c.container_runtime_endpoint {
            Some(RuntimeEndpoint(endpoint)) => endpoint,
            None if kube.as_ref().is_some_and(|k| k.serve_pods) => {
                Some(DEFAULT_RUNTIME_ENDPOINT.to_string())
            }
            None => None,
        };
        Ok(Self {
            agent,
            log_format: c.log_format.unwrap_or(LogFormat::Text),
            log_level: c.log_level.unwrap_or_else(|| "info".into()),
            kube,
            node_name,
            worker_threads: c.worker_threads.unwrap_or(1),
        })
    }

    /// The settings as a config file.
    pub(crate) fn to_toml(&self) -> String {
        use nodeplugins::kubelet_server::{AuthorizationMode, ServingCertificate};
        let a = &self.agent;
        let server = a.kubelet_server.as_ref();
        let format = match self.log_format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        };
        let metrics = a.metrics_addr.map_or("off".to_string(), |m| m.to_string());
        let kubeconfig = match self.kube.as_ref().map(|k| &k.source) {
            None => "off".to_string(),
            Some(KubeConfigSource::InCluster) => "in-cluster".to_string(),
            Some(KubeConfigSource::Kubeconfig(path)) => path.display().to_string(),
            // An application's own client is no setting of the command
            // line's; the command line never makes one.
            Some(_) => "off".to_string(),
        };
        let registration = self
            .kube
            .as_ref()
            .and_then(|k| k.node_registration.as_ref());
        let certs = self
            .kube
            .as_ref()
            .and_then(|k| k.client_certificates.as_ref());
        let default_dns = nodeplugins::pods::PodDnsConfig::default();
        let dns = self.kube.as_ref().map_or(&default_dns, |k| &k.pod_dns);
        let static_pods = self.kube.as_ref().and_then(|k| k.static_pods.as_ref());
        let shutdown = self.kube.as_ref().and_then(|k| k.node_shutdown.as_ref());
        let lines = [
            ("root_dir", a.root_dir.display().to_string()),
            ("log_format", format.to_string()),
            ("log_level", self.log_level.clone()),
            ("metrics_addr", metrics),
            ("dra_cleanup_grace", human(a.dra.cleanup_grace)),
            ("dra_call_timeout", human(a.dra.call_timeout)),
            ("dra_health_timeout", human(a.dra.health_timeout)),
            ("device_grace_period", human(a.devices.grace_period)),
            ("plugin_dial_timeout", human(a.devices.dial_timeout)),
            ("get_info_timeout", human(a.plugins.get_info_timeout)),
            ("notify_timeout", human(a.plugins.notify_timeout)),
            ("max_backoff", human(a.plugins.max_backoff)),
            ("csi_timeout", human(a.csi_timeout)),
            ("kubeconfig", kubeconfig),
            (
                "container_runtime_endpoint",
                a.container_runtime_endpoint
                    .clone()
                    .unwrap_or_else(|| "simulated".into()),
            ),
            ("pod_logs_dir", a.pod_logs_dir.display().to_string()),
            ("node_name", self.node_name.clone()),
            (
                "pods",
                match self.kube.as_ref() {
                    Some(kube) if !kube.serve_pods => "off".into(),
                    _ => "on".into(),
                },
            ),
            (
                "pod_reconcile_period",
                human(
                    self.kube
                        .as_ref()
                        .map_or(nodeplugins::kube_api::POD_RECONCILE_PERIOD, |k| {
                            k.pod_reconcile_period
                        }),
                ),
            ),
            (
                "sync_frequency",
                human(
                    self.kube
                        .as_ref()
                        .map_or(nodeplugins::kube_api::SYNC_FREQUENCY, |k| k.sync_frequency),
                ),
            ),
            (
                "volume_stats_agg_period",
                human(
                    self.kube
                        .as_ref()
                        .map_or(nodeplugins::volumes::VOLUME_STATS_AGG_PERIOD, |k| {
                            k.volume_stats_agg_period
                        }),
                ),
            ),
            (
                "csinode_recheck",
                human(
                    self.kube
                        .as_ref()
                        .map_or(nodeplugins::kube_api::CSINODE_RECHECK, |k| {
                            k.csinode_recheck
                        }),
                ),
            ),
            (
                "register_node",
                if registration.is_some() { "on" } else { "off" }.into(),
            ),
            (
                "node_ip",
                registration.map_or(String::new(), |r| {
                    r.node_ips
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            ),
            (
                "node_labels",
                registration.map_or(String::new(), |r| {
                    r.labels
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            ),
            (
                "register_with_taints",
                registration.map_or(String::new(), |r| {
                    r.taints
                        .iter()
                        .map(|t| match &t.value {
                            Some(v) => format!("{}={v}:{}", t.key, t.effect),
                            None => format!("{}:{}", t.key, t.effect),
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            ),
            (
                "bootstrap_kubeconfig",
                certs
                    .and_then(|c| c.bootstrap_kubeconfig.as_ref())
                    .map_or(String::new(), |p| p.display().to_string()),
            ),
            (
                "rotate_certificates",
                if certs.is_some_and(|c| c.rotate) {
                    "on"
                } else {
                    "off"
                }
                .into(),
            ),
            (
                "cluster_dns",
                dns.cluster_dns
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("cluster_domain", dns.cluster_domain.clone()),
            (
                "static_pod_path",
                static_pods.map_or(String::new(), |s| s.path.display().to_string()),
            ),
            (
                "file_check_frequency",
                human(
                    static_pods.map_or(nodeplugins::pods::DEFAULT_FILE_CHECK_FREQUENCY, |s| {
                        s.check_frequency
                    }),
                ),
            ),
            (
                "shutdown_grace_period",
                human(shutdown.map_or(Duration::ZERO, |s| s.grace_period)),
            ),
            (
                "shutdown_grace_period_critical_pods",
                human(shutdown.map_or(Duration::ZERO, |s| s.critical_pods_grace_period)),
            ),
            (
                "shutdown_grace_period_by_pod_priority",
                shutdown.map_or(String::new(), |s| {
                    s.by_pod_priority
                        .iter()
                        .map(|g| format!("{}={}", g.priority, g.grace_period_seconds))
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            ),
            (
                "resolv_conf",
                dns.resolv_conf
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string()),
            ),
            (
                "max_pods",
                registration
                    .map_or(nodeplugins::kube_api::DEFAULT_MAX_PODS, |r| r.max_pods)
                    .to_string(),
            ),
            (
                "pod_resources_mode",
                a.pod_resources
                    .as_ref()
                    .map_or("off".into(), |p| format!("{:04o}", p.mode)),
            ),
            (
                "kubelet_server",
                server.map_or("off".to_string(), |s| s.addr.to_string()),
            ),
            (
                "tls_cert_file",
                match server.map(|s| &s.certificate) {
                    Some(ServingCertificate::Files { cert, .. }) => cert.display().to_string(),
                    _ => String::new(),
                },
            ),
            (
                "tls_private_key_file",
                match server.map(|s| &s.certificate) {
                    Some(ServingCertificate::Files { key, .. }) => key.display().to_string(),
                    _ => String::new(),
                },
            ),
            (
                "cert_dir",
                match server.map(|s| &s.certificate) {
                    Some(ServingCertificate::SelfSigned { cert_dir, .. }) => {
                        cert_dir.display().to_string()
                    }
                    _ => certs.map_or_else(
                        || a.root_dir.join("pki").display().to_string(),
                        |c| c.cert_dir.display().to_string(),
                    ),
                },
            ),
            (
                "client_ca_file",
                server
                    .and_then(|s| s.client_ca_file.as_ref())
                    .map_or(String::new(), |p| p.display().to_string()),
            ),
            (
                "anonymous_auth",
                if server.is_some_and(|s| s.anonymous) {
                    "on"
                } else {
                    "off"
                }
                .into(),
            ),
            (
                "authorization_mode",
                match server.map_or(AuthorizationMode::Webhook, |s| s.authorization) {
                    AuthorizationMode::Webhook => "Webhook",
                    AuthorizationMode::AlwaysAllow => "AlwaysAllow",
                }
                .into(),
            ),
            ("worker_threads", self.worker_threads.to_string()),
        ];
        lines
            .iter()
            .map(|(k, v)| format!("{k} = {}\n", toml::Value::String(v.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests;
