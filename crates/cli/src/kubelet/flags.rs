//! The kubelet's command line, parsed as its flag library parses it:
//! `--name=value` or `--name value`, a boolean flag alone meaning true
//! (`--name=false` to turn it off), `-v` as a one-letter form, `--` ending
//! the flags. Every flag the kubelet v1.37 has is known: those that are
//! configuration fields (deprecated on the command line, still working)
//! set their field over the config file; the others are the kubelet's
//! own. A flag it does not have is an error, as upstream.

use std::collections::BTreeMap;

/// How a flag's value is written, and what it becomes in the
/// configuration's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `true` or `false`; alone, true.
    Bool,
    /// A string.
    Str,
    /// An integer.
    Int,
    /// A Go duration (`10s`, `1m30s`).
    Duration,
    /// Comma-separated strings.
    List,
    /// `key=value,...`, values strings.
    Map,
    /// `key=bool,...` (feature gates).
    BoolMap,
    /// `key[=value]:Effect,...`.
    Taints,
}

/// Where a flag's value goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A KubeletConfiguration field, by its path (`authentication.x509.clientCAFile`).
    Config(&'static str),
    /// One of the kubelet's own flags, not in the file.
    Own,
}

/// A flag of the kubelet's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flag {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) target: Target,
}

const fn own(name: &'static str, kind: Kind) -> Flag {
    Flag {
        name,
        kind,
        target: Target::Own,
    }
}

const fn field(name: &'static str, kind: Kind, path: &'static str) -> Flag {
    Flag {
        name,
        kind,
        target: Target::Config(path),
    }
}

use Kind::{Bool, BoolMap, Duration, Int, List, Map, Str, Taints};

/// Every flag of the kubelet v1.37 (`cmd/kubelet/app/options`, and the
/// logging and version flags every component has).
pub(crate) const FLAGS: &[Flag] = &[
    // The kubelet's own (KubeletFlags).
    own("config", Str),
    own("config-dir", Str),
    own("kubeconfig", Str),
    own("bootstrap-kubeconfig", Str),
    own("hostname-override", Str),
    own("node-ip", Str),
    own("cert-dir", Str),
    own("cloud-provider", Str),
    own("root-dir", Str),
    own("seccomp-default", Bool),
    own("node-labels", Map),
    own("lock-file", Str),
    own("exit-on-lock-contention", Bool),
    own("minimum-container-ttl-duration", Duration),
    own("maximum-dead-containers-per-container", Int),
    own("maximum-dead-containers", Int),
    own("experimental-mounter-path", Str),
    own("experimental-allocatable-ignore-eviction", Bool),
    own("runtime-cgroups", Str),
    own("image-credential-provider-config", Str),
    own("image-credential-provider-bin-dir", Str),
    // Every component's.
    own("v", Int),
    own("vmodule", Str),
    own("log-flush-frequency", Duration),
    own("logging-format", Str),
    own("log-json-info-buffer-size", Str),
    own("log-json-split-stream", Bool),
    own("log-text-info-buffer-size", Str),
    own("log-text-split-stream", Bool),
    own("version", Str),
    own("help", Bool),
    // Configuration fields.
    field("enable-server", Bool, "enableServer"),
    field("fail-swap-on", Bool, "failSwapOn"),
    field("pod-manifest-path", Str, "staticPodPath"),
    field("sync-frequency", Duration, "syncFrequency"),
    field("file-check-frequency", Duration, "fileCheckFrequency"),
    field("http-check-frequency", Duration, "httpCheckFrequency"),
    field("manifest-url", Str, "staticPodURL"),
    field("manifest-url-header", Map, "staticPodURLHeader"),
    field("address", Str, "address"),
    field("port", Int, "port"),
    field("read-only-port", Int, "readOnlyPort"),
    field("fail-cgroupv1", Bool, "failCgroupV1"),
    field(
        "container-runtime-endpoint",
        Str,
        "containerRuntimeEndpoint",
    ),
    field("image-service-endpoint", Str, "imageServiceEndpoint"),
    field("anonymous-auth", Bool, "authentication.anonymous.enabled"),
    field(
        "authentication-token-webhook",
        Bool,
        "authentication.webhook.enabled",
    ),
    field(
        "authentication-token-webhook-cache-ttl",
        Duration,
        "authentication.webhook.cacheTTL",
    ),
    field("client-ca-file", Str, "authentication.x509.clientCAFile"),
    field("authorization-mode", Str, "authorization.mode"),
    field(
        "authorization-webhook-cache-authorized-ttl",
        Duration,
        "authorization.webhook.cacheAuthorizedTTL",
    ),
    field(
        "authorization-webhook-cache-unauthorized-ttl",
        Duration,
        "authorization.webhook.cacheUnauthorizedTTL",
    ),
    field("tls-cert-file", Str, "tlsCertFile"),
    field("tls-private-key-file", Str, "tlsPrivateKeyFile"),
    field("rotate-server-certificates", Bool, "serverTLSBootstrap"),
    field("tls-cipher-suites", List, "tlsCipherSuites"),
    field("tls-min-version", Str, "tlsMinVersion"),
    field("rotate-certificates", Bool, "rotateCertificates"),
    field("registry-qps", Int, "registryPullQPS"),
    field("registry-burst", Int, "registryBurst"),
    field("event-qps", Int, "eventRecordQPS"),
    field("event-burst", Int, "eventBurst"),
    field("enable-debugging-handlers", Bool, "enableDebuggingHandlers"),
    field("contention-profiling", Bool, "enableContentionProfiling"),
    field("healthz-port", Int, "healthzPort"),
    field("healthz-bind-address", Str, "healthzBindAddress"),
    field("oom-score-adj", Int, "oomScoreAdj"),
    field("cluster-domain", Str, "clusterDomain"),
    field("volume-plugin-dir", Str, "volumePluginDir"),
    field("cluster-dns", List, "clusterDNS"),
    field(
        "streaming-connection-idle-timeout",
        Duration,
        "streamingConnectionIdleTimeout",
    ),
    field(
        "node-status-update-frequency",
        Duration,
        "nodeStatusUpdateFrequency",
    ),
    field("minimum-image-ttl-duration", Duration, "imageMinimumGCAge"),
    field(
        "image-gc-high-threshold",
        Int,
        "imageGCHighThresholdPercent",
    ),
    field("image-gc-low-threshold", Int, "imageGCLowThresholdPercent"),
    field("volume-stats-agg-period", Duration, "volumeStatsAggPeriod"),
    field("feature-gates", BoolMap, "featureGates"),
    field("kubelet-cgroups", Str, "kubeletCgroups"),
    field("system-cgroups", Str, "systemCgroups"),
    field("provider-id", Str, "providerID"),
    field("cgroups-per-qos", Bool, "cgroupsPerQOS"),
    field("cgroup-driver", Str, "cgroupDriver"),
    field("cgroup-root", Str, "cgroupRoot"),
    field("cpu-manager-policy", Str, "cpuManagerPolicy"),
    field("cpu-manager-policy-options", Map, "cpuManagerPolicyOptions"),
    field(
        "cpu-manager-reconcile-period",
        Duration,
        "cpuManagerReconcilePeriod",
    ),
    field("qos-reserved", Map, "qosReserved"),
    field("topology-manager-policy", Str, "topologyManagerPolicy"),
    field("runtime-request-timeout", Duration, "runtimeRequestTimeout"),
    field("hairpin-mode", Str, "hairpinMode"),
    field("max-pods", Int, "maxPods"),
    field("pod-cidr", Str, "podCIDR"),
    field("pod-max-pids", Int, "podPidsLimit"),
    field("resolv-conf", Str, "resolvConf"),
    field("runonce", Bool, "runOnce"),
    field("cpu-cfs-quota", Bool, "cpuCFSQuota"),
    field("cpu-cfs-quota-period", Duration, "cpuCFSQuotaPeriod"),
    field(
        "enable-controller-attach-detach",
        Bool,
        "enableControllerAttachDetach",
    ),
    field("make-iptables-util-chains", Bool, "makeIPTablesUtilChains"),
    field("container-log-max-size", Str, "containerLogMaxSize"),
    field("container-log-max-files", Int, "containerLogMaxFiles"),
    field("allowed-unsafe-sysctls", List, "allowedUnsafeSysctls"),
    field("node-status-max-images", Int, "nodeStatusMaxImages"),
    field("kernel-memcg-notification", Bool, "kernelMemcgNotification"),
    field(
        "local-storage-capacity-isolation",
        Bool,
        "localStorageCapacityIsolation",
    ),
    field("max-open-files", Int, "maxOpenFiles"),
    field("kube-api-content-type", Str, "contentType"),
    field("kube-api-qps", Int, "kubeAPIQPS"),
    field("kube-api-burst", Int, "kubeAPIBurst"),
    field("serialize-image-pulls", Bool, "serializeImagePulls"),
    field("eviction-hard", Map, "evictionHard"),
    field("eviction-soft", Map, "evictionSoft"),
    field("eviction-soft-grace-period", Map, "evictionSoftGracePeriod"),
    field(
        "eviction-pressure-transition-period",
        Duration,
        "evictionPressureTransitionPeriod",
    ),
    field(
        "eviction-max-pod-grace-period",
        Int,
        "evictionMaxPodGracePeriod",
    ),
    field("eviction-minimum-reclaim", Map, "evictionMinimumReclaim"),
    field("pods-per-core", Int, "podsPerCore"),
    field("protect-kernel-defaults", Bool, "protectKernelDefaults"),
    field("reserved-cpus", Str, "reservedSystemCPUs"),
    field("topology-manager-scope", Str, "topologyManagerScope"),
    field(
        "topology-manager-policy-options",
        Map,
        "topologyManagerPolicyOptions",
    ),
    field("system-reserved", Map, "systemReserved"),
    field("kube-reserved", Map, "kubeReserved"),
    field("enforce-node-allocatable", List, "enforceNodeAllocatable"),
    field("system-reserved-cgroup", Str, "systemReservedCgroup"),
    field("kube-reserved-cgroup", Str, "kubeReservedCgroup"),
    field("memory-manager-policy", Str, "memoryManagerPolicy"),
    field("reserved-memory", Str, "reservedMemory"),
    field("register-node", Bool, "registerNode"),
    field("register-with-taints", Taints, "registerWithTaints"),
];

/// The one-letter forms.
const SHORTHANDS: &[(char, &str)] = &[('v', "v"), ('h', "help")];

/// The flags given, each with the text of its value (the last one wins,
/// as upstream), in the order first given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Given {
    values: BTreeMap<&'static str, String>,
    order: Vec<&'static Flag>,
}

impl Given {
    /// The value of `name`, when it was given.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The flags given, in the order first given, with their values.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static Flag, &str)> {
        self.order
            .iter()
            .filter_map(|flag| Some((*flag, self.values.get(flag.name)?.as_str())))
    }

    fn set(&mut self, flag: &'static Flag, value: String) {
        if self.values.insert(flag.name, value).is_none() {
            self.order.push(flag);
        }
    }
}

/// Why a command line was refused (the kubelet's wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FlagError {
    #[error("failed to parse kubelet flag: unknown flag: {0}")]
    Unknown(String),
    #[error("failed to parse kubelet flag: unknown shorthand flag: {0:?} in {1}")]
    UnknownShorthand(char, String),
    #[error("failed to parse kubelet flag: flag needs an argument: {0}")]
    NeedsValue(String),
    #[error(
        "failed to parse kubelet flag: invalid argument {value:?} for \"--{flag}\" flag: {why}"
    )]
    Invalid {
        flag: &'static str,
        value: String,
        why: String,
    },
    #[error("unknown command {0:?}")]
    Command(String),
}

fn find(name: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|flag| flag.name == name)
}

/// Parses the kubelet's command line (without the program's name).
pub(crate) fn parse(args: &[String]) -> Result<Given, FlagError> {
    let mut given = Given::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            if let Some(command) = rest.next() {
                return Err(FlagError::Command(command.clone()));
            }
            break;
        }
        let (flag, inline, shown) = if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (long, None),
            };
            let flag = find(name).ok_or_else(|| FlagError::Unknown(format!("--{name}")))?;
            (flag, inline, format!("--{name}"))
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = short.chars();
            let letter = chars.next().unwrap_or_default();
            let name = SHORTHANDS
                .iter()
                .find(|(c, _)| *c == letter)
                .map(|(_, name)| *name)
                .ok_or_else(|| FlagError::UnknownShorthand(letter, arg.clone()))?;
            let attached = chars.as_str();
            let inline = match attached.strip_prefix('=') {
                Some(value) => Some(value.to_string()),
                None if attached.is_empty() => None,
                None => Some(attached.to_string()),
            };
            let flag = find(name).ok_or_else(|| FlagError::Unknown(format!("-{letter}")))?;
            (flag, inline, format!("-{letter}"))
        } else {
            return Err(FlagError::Command(arg.clone()));
        };
        let value = match inline {
            Some(value) => value,
            // A boolean alone is true; `--version` alone prints the version.
            None if flag.kind == Kind::Bool => "true".to_string(),
            None if flag.name == "version" => "true".to_string(),
            None => rest.next().cloned().ok_or(FlagError::NeedsValue(shown))?,
        };
        check(flag, &value)?;
        given.set(flag, value);
    }
    Ok(given)
}

/// Whether `value` is one `flag` takes.
fn check(flag: &'static Flag, value: &str) -> Result<(), FlagError> {
    to_json(flag, value)
        .map(|_| ())
        .map_err(|why| FlagError::Invalid {
            flag: flag.name,
            value: value.to_string(),
            why,
        })
}

fn parse_bool(text: &str) -> Result<bool, String> {
    // Go's strconv.ParseBool.
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!(
            "strconv.ParseBool: parsing {text:?}: invalid syntax"
        )),
    }
}

/// `value` as the configuration's JSON has it.
pub(crate) fn to_json(flag: &Flag, value: &str) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    let pairs = || -> Result<Vec<(String, String)>, String> {
        value
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.split_once('=')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .ok_or_else(|| format!("malformed pair, expect string=string: {item:?}"))
            })
            .collect()
    };
    Ok(match flag.kind {
        Kind::Bool => Value::Bool(parse_bool(value)?),
        Kind::Str => Value::String(value.to_string()),
        Kind::Int => Value::from(
            value
                .parse::<i64>()
                .map_err(|_| format!("strconv.ParseInt: parsing {value:?}: invalid syntax"))?,
        ),
        Kind::Duration => {
            nodeplugins_api::duration::parse_go_duration(value).map_err(|e| e.to_string())?;
            Value::String(value.to_string())
        }
        Kind::List => Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| Value::String(item.to_string()))
                .collect(),
        ),
        Kind::Map => Value::Object(
            pairs()?
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        ),
        Kind::BoolMap => Value::Object(
            pairs()?
                .into_iter()
                .map(|(k, v)| parse_bool(&v).map(|b| (k, Value::Bool(b))))
                .collect::<Result<_, _>>()?,
        ),
        Kind::Taints => Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| {
                    let (head, effect) = item
                        .rsplit_once(':')
                        .ok_or_else(|| format!("invalid taint spec: {item}"))?;
                    let mut taint = serde_json::Map::new();
                    match head.split_once('=') {
                        Some((key, value)) => {
                            taint.insert("key".into(), Value::String(key.into()));
                            taint.insert("value".into(), Value::String(value.into()));
                        }
                        None => {
                            taint.insert("key".into(), Value::String(head.into()));
                        }
                    }
                    taint.insert("effect".into(), Value::String(effect.into()));
                    Ok(Value::Object(taint))
                })
                .collect::<Result<_, String>>()?,
        ),
    })
}
