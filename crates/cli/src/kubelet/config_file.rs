//! The kubelet's configuration files: a `KubeletConfiguration`
//! (`kubelet.config.k8s.io/v1beta1`) from `--config`, then each `*.conf`
//! under `--config-dir` (every subdirectory, in lexical order of the
//! paths) merged over it as a JSON merge patch, as the kubelet loads them.
//! A relative path in the fields the kubelet resolves (`staticPodPath`,
//! `authentication.x509.clientCAFile`, `tlsCertFile`,
//! `tlsPrivateKeyFile`, `resolvConf`, `volumePluginDir`, `podLogsDir`) is
//! taken from the directory of the file that set it. A wrong `apiVersion`
//! or `kind` is an error; a field the kubelet does not know is accepted
//! and named, as its lenient decoding does.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The group and version a file must declare.
pub(crate) const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The kind it must declare.
pub(crate) const KIND: &str = "KubeletConfiguration";

/// The fields of a v1beta1 `KubeletConfiguration` (`k8s.io/kubelet`
/// v0.37, `config/v1beta1/types.go`).
pub(crate) const KNOWN_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "enableServer",
    "staticPodPath",
    "podLogsDir",
    "syncFrequency",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "address",
    "port",
    "readOnlyPort",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsCurvePreferences",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "healthzPort",
    "healthzBindAddress",
    "oomScoreAdj",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
    "cgroupRoot",
    "cgroupsPerQOS",
    "cgroupDriver",
    "cpuManagerPolicy",
    "singleProcessOOMKill",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "qosReserved",
    "runtimeRequestTimeout",
    "hairpinMode",
    "maxPods",
    "podCIDR",
    "podPidsLimit",
    "resolvConf",
    "runOnce",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "mergeDefaultEvictionSettings",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "featureGates",
    "failSwapOn",
    "memorySwap",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "configMapAndSecretChangeDetectionStrategy",
    "systemReserved",
    "kubeReserved",
    "reservedSystemCPUs",
    "showHiddenMetricsForVersion",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "enforceNodeAllocatable",
    "allowedUnsafeSysctls",
    "defaultPodSysctls",
    "volumePluginDir",
    "providerID",
    "kernelMemcgNotification",
    "logging",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "memoryThrottlingFactor",
    "memoryReservationPolicy",
    "registerWithTaints",
    "registerNode",
    "tracing",
    "localStorageCapacityIsolation",
    "containerRuntimeEndpoint",
    "imageServiceEndpoint",
    "failCgroupV1",
    "userNamespaces",
];

/// The path fields resolved against their file's directory.
const PATH_FIELDS: &[&str] = &[
    "staticPodPath",
    "authentication.x509.clientCAFile",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "resolvConf",
    "volumePluginDir",
    "podLogsDir",
];

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("failed to load kubelet config file, path: {path}, error: {why}")]
    File { path: PathBuf, why: String },
    #[error("failed to read kubelet config drop-in directory {path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The configuration as the files give it (the kubelet's defaults not
/// yet applied), and the fields that no KubeletConfiguration has.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Loaded {
    pub(crate) config: Map<String, Value>,
    pub(crate) unknown_fields: Vec<String>,
    /// Whether `--config` named a file: without one the kubelet starts
    /// from its legacy defaults ([`LEGACY_DEFAULTS`]).
    pub(crate) from_file: bool,
}

/// A legacy default's value.
pub(crate) type LegacyValue = fn() -> Value;

/// What the kubelet's defaults are without a `--config` file, to keep its
/// older command line's: anonymous requests allowed, no token webhook,
/// every request authorized, the read-only port on 10255.
pub(crate) const LEGACY_DEFAULTS: &[(&str, LegacyValue)] = &[
    ("authentication.anonymous.enabled", || Value::Bool(true)),
    ("authentication.webhook.enabled", || Value::Bool(false)),
    ("authorization.mode", || Value::String("AlwaysAllow".into())),
    ("readOnlyPort", || Value::from(10255)),
];

/// Loads `--config` (if given) and the drop-ins of `--config-dir` (if
/// given) over it.
pub(crate) fn load(config: Option<&Path>, drop_ins: Option<&Path>) -> Result<Loaded, ConfigError> {
    let mut loaded = Loaded::default();
    if let Some(path) = config {
        loaded.from_file = true;
        let file = read(path)?;
        note_unknown(&file, &mut loaded.unknown_fields);
        loaded.config = file;
    }
    if let Some(dir) = drop_ins {
        let mut files = Vec::new();
        walk(dir, &mut files)?;
        files.sort();
        for path in files {
            let file = read(&path)?;
            note_unknown(&file, &mut loaded.unknown_fields);
            merge_patch(&mut loaded.config, file);
        }
    }
    loaded.unknown_fields.sort();
    loaded.unknown_fields.dedup();
    Ok(loaded)
}

fn note_unknown(file: &Map<String, Value>, unknown: &mut Vec<String>) {
    unknown.extend(
        file.keys()
            .filter(|key| !KNOWN_FIELDS.contains(&key.as_str()))
            .cloned(),
    );
}

/// Every `*.conf` below `dir`.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    let failed = |source| ConfigError::Dir {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(failed)? {
        let entry = entry.map_err(failed)?;
        let path = entry.path();
        if entry.file_type().map_err(failed)?.is_dir() {
            walk(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "conf") {
            files.push(path);
        }
    }
    Ok(())
}

/// One file: YAML or JSON, a KubeletConfiguration, its relative paths
/// made absolute.
fn read(path: &Path) -> Result<Map<String, Value>, ConfigError> {
    let failed = |why: String| ConfigError::File {
        path: path.to_path_buf(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
    let value: Value = serde_yaml_ng::from_str(&text).map_err(|e| failed(e.to_string()))?;
    let Value::Object(mut file) = value else {
        return Err(failed("the file is not a mapping".into()));
    };
    let api_version = file.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = file.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version.is_empty() || kind.is_empty() {
        return Err(failed(format!(
            "Object 'apiVersion' and 'kind' are required: apiVersion {api_version:?}, kind {kind:?}"
        )));
    }
    if api_version != API_VERSION || kind != KIND {
        return Err(failed(format!(
            "no kind {kind:?} is registered for version {api_version:?}: this agent reads {KIND} of {API_VERSION}"
        )));
    }
    let dir = path.parent().unwrap_or(Path::new(""));
    for field in PATH_FIELDS {
        if let Some(Value::String(text)) = get_mut(&mut file, field)
            && !text.is_empty()
            && Path::new(text.as_str()).is_relative()
        {
            *text = dir.join(text.as_str()).display().to_string();
        }
    }
    Ok(file)
}

fn get_mut<'a>(map: &'a mut Map<String, Value>, path: &str) -> Option<&'a mut Value> {
    let mut parts = path.split('.');
    let mut value = map.get_mut(parts.next()?)?;
    for part in parts {
        value = value.as_object_mut()?.get_mut(part)?;
    }
    Some(value)
}

/// The value at `path` (`authentication.x509.clientCAFile`).
pub(crate) fn get<'a>(map: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut value = map.get(parts.next()?)?;
    for part in parts {
        value = value.as_object()?.get(part)?;
    }
    Some(value)
}

/// Sets `path` to `value`, making the objects on the way.
pub(crate) fn set(map: &mut Map<String, Value>, path: &str, value: Value) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else {
        return;
    };
    let mut object = map;
    for part in parts {
        let next = object
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !next.is_object() {
            *next = Value::Object(Map::new());
        }
        let Value::Object(next) = next else {
            return;
        };
        object = next;
    }
    object.insert(last.to_string(), value);
}

/// RFC 7386: `patch` over `target`; a null removes.
fn merge_patch(target: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(&key);
            }
            Value::Object(inner) => {
                let slot = target
                    .entry(key)
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(slot) = slot {
                    merge_patch(slot, inner);
                }
            }
            other => {
                target.insert(key, other);
            }
        }
    }
}
