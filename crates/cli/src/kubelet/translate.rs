//! The kubelet's flags and configuration, as the agent's settings: each
//! field and flag the agent honours becomes the setting that does what
//! the kubelet does with it (with the kubelet's default where it is
//! absent, or its zero value, as the kubelet's defaulting takes both);
//! every other one given is named, with its value, so that it
//! is reported at start rather than dropped without a word.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Map, Value};

use super::config_file::{self, Loaded};
use super::flags::{Given, Target};
use nodeplugins_api::duration::parse_go_duration;

pub(crate) use crate::config::DEFAULT_RUNTIME_ENDPOINT;

/// What the kubelet's command line asks of the agent.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Plan {
    /// The agent's settings, by name, as a config file writes them.
    pub(crate) values: Vec<(&'static str, String)>,
    /// What the settings have no name for.
    pub(crate) extras: Extras,
    /// The fields and flags given that the agent does not honour, each
    /// `name=value`.
    pub(crate) ignored: Vec<String>,
    /// The fields no KubeletConfiguration has.
    pub(crate) unknown_fields: Vec<String>,
}

/// The kubelet's settings the agent's command line has no flag for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Extras {
    pub(crate) token_webhook: bool,
    pub(crate) token_cache_ttl: Duration,
    pub(crate) authorized_ttl: Duration,
    pub(crate) unauthorized_ttl: Duration,
    pub(crate) debugging_handlers: bool,
    /// The read-only port's address (`readOnlyPort` on `address`), if
    /// one is served.
    pub(crate) read_only: Option<std::net::SocketAddr>,
    pub(crate) status_update_frequency: Duration,
    pub(crate) status_report_frequency: Duration,
    pub(crate) lease_duration: Duration,
}

impl Default for Extras {
    fn default() -> Self {
        Self {
            token_webhook: true,
            token_cache_ttl: Duration::from_secs(120),
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
            debugging_handlers: true,
            read_only: None,
            status_update_frequency: Duration::from_secs(10),
            status_report_frequency: Duration::from_secs(300),
            lease_duration: Duration::from_secs(40),
        }
    }
}

/// Why a field could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kubelet configuration: {field}: {why}")]
pub(crate) struct FieldError {
    field: String,
    why: String,
}

/// Reads fields, remembering which were read.
struct Reader<'a> {
    config: &'a Map<String, Value>,
    read: BTreeSet<&'static str>,
}

impl Reader<'_> {
    fn value(&mut self, path: &'static str) -> Option<&Value> {
        self.read.insert(path);
        config_file::get(self.config, path).filter(|v| !v.is_null())
    }

    fn wrong(path: &str, want: &str, got: &Value) -> FieldError {
        FieldError {
            field: path.to_string(),
            why: format!("expected {want}, got {got}"),
        }
    }

    fn bool(&mut self, path: &'static str, default: bool) -> Result<bool, FieldError> {
        match self.value(path) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(Self::wrong(path, "a boolean", other)),
        }
    }

    fn int(&mut self, path: &'static str, default: i64) -> Result<i64, FieldError> {
        match self.value(path) {
            None => Ok(default),
            Some(Value::Number(n)) => n
                .as_i64()
                .ok_or_else(|| Self::wrong(path, "an integer", &Value::Number(n.clone()))),
            Some(other) => Err(Self::wrong(path, "an integer", other)),
        }
    }

    /// An integer the kubelet's defaulting takes 0 of as unset.
    fn nonzero_int(&mut self, path: &'static str, default: i64) -> Result<i64, FieldError> {
        self.int(path, default)
            .map(|n| if n == 0 { default } else { n })
    }

    fn string(&mut self, path: &'static str, default: &str) -> Result<String, FieldError> {
        match self.value(path) {
            None => Ok(default.to_string()),
            // An empty string is the default, as the kubelet's defaulting.
            Some(Value::String(s)) if s.is_empty() => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(Self::wrong(path, "a string", other)),
        }
    }

    fn duration(&mut self, path: &'static str, default: Duration) -> Result<Duration, FieldError> {
        match self.value(path) {
            None => Ok(default),
            // A zero duration is the default, as the kubelet's defaulting.
            Some(Value::String(s)) => match parse_go_duration(s) {
                Ok(d) if d.is_zero() => Ok(default),
                Ok(d) => Ok(d),
                Err(e) => Err(FieldError {
                    field: path.to_string(),
                    why: e.to_string(),
                }),
            },
            Some(other) => Err(Self::wrong(path, "a duration such as \"10s\"", other)),
        }
    }
}

/// Values the agent's own behaviour already is: a field set to one of
/// these is honoured though the agent has no setting for it.
fn as_the_agent_does(path: &str, value: &Value) -> bool {
    let empty = |v: &Value| match v {
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    match path {
        // No pod cgroups, no allocatable enforcement,
        // no swap or cgroup v1 refusal, no serving certificate requests.
        "cgroupsPerQOS" | "failSwapOn" | "failCgroupV1" | "serverTLSBootstrap" | "runOnce" => {
            value == &Value::Bool(false)
        }
        "enforceNodeAllocatable"
        | "staticPodPath"
        | "staticPodURL"
        | "featureGates"
        | "tlsCipherSuites"
        | "providerID" => empty(value),
        _ => false,
    }
}

/// A duration as the agent's settings read it.
fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// `host:port` for a listener (`[v6]:port`).
fn listen(address: &str, port: i64) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// The plan for the kubelet's command line `given` and the files it named
/// (`loaded`).
pub(crate) fn plan(given: &Given, loaded: &Loaded) -> Result<Plan, FieldError> {
    // The command line wins over the files.
    let mut config = loaded.config.clone();
    if !loaded.from_file {
        for (path, value) in config_file::LEGACY_DEFAULTS {
            if config_file::get(&config, path).is_none() {
                config_file::set(&mut config, path, value());
            }
        }
    }
    for (flag, value) in given.iter() {
        if let Target::Config(path) = flag.target
            && let Ok(json) = super::flags::to_json(flag, value)
        {
            config_file::set(&mut config, path, json);
        }
    }
    let mut r = Reader {
        config: &config,
        read: BTreeSet::new(),
    };
    let mut values: Vec<(&'static str, String)> = Vec::new();
    let mut extras = Extras::default();

    // The kubelet's API.
    let enabled = r.bool("enableServer", true)?;
    let address = r.string("address", "0.0.0.0")?;
    let port = r.nonzero_int("port", 10250)?;
    values.push((
        "kubelet_server",
        if enabled {
            listen(&address, port)
        } else {
            "off".into()
        },
    ));
    let cert = r.string("tlsCertFile", "")?;
    let key = r.string("tlsPrivateKeyFile", "")?;
    if !cert.is_empty() || !key.is_empty() {
        values.push(("tls_cert_file", cert));
        values.push(("tls_private_key_file", key));
    }
    let client_ca = r.string("authentication.x509.clientCAFile", "")?;
    if !client_ca.is_empty() {
        values.push(("client_ca_file", client_ca));
    }
    let anonymous = r.bool("authentication.anonymous.enabled", false)?;
    values.push((
        "anonymous_auth",
        if anonymous { "on" } else { "off" }.into(),
    ));
    extras.token_webhook = r.bool("authentication.webhook.enabled", true)?;
    extras.token_cache_ttl =
        r.duration("authentication.webhook.cacheTTL", extras.token_cache_ttl)?;
    values.push((
        "authorization_mode",
        r.string("authorization.mode", "Webhook")?,
    ));
    extras.authorized_ttl = r.duration(
        "authorization.webhook.cacheAuthorizedTTL",
        extras.authorized_ttl,
    )?;
    extras.unauthorized_ttl = r.duration(
        "authorization.webhook.cacheUnauthorizedTTL",
        extras.unauthorized_ttl,
    )?;
    extras.debugging_handlers = r.bool("enableDebuggingHandlers", true)?;
    // The read-only port, on the same address; it is served beside the
    // kubelet's API.
    let read_only_port = r.int("readOnlyPort", 0)?;
    if read_only_port > 0 {
        let addr = listen(&address, read_only_port);
        extras.read_only = Some(addr.parse().map_err(|e| FieldError {
            field: "readOnlyPort".into(),
            why: format!("{addr}: {e}"),
        })?);
    }

    // Health (and the agent's metrics) where the kubelet's healthz is.
    let healthz_address = r.string("healthzBindAddress", "127.0.0.1")?;
    let healthz_port = r.int("healthzPort", 10248)?;
    values.push((
        "metrics_addr",
        if healthz_port > 0 {
            listen(&healthz_address, healthz_port)
        } else {
            "off".into()
        },
    ));

    // The runtime and the pods.
    let runtime = r.string("containerRuntimeEndpoint", DEFAULT_RUNTIME_ENDPOINT)?;
    let images = r.string("imageServiceEndpoint", "")?;
    values.push(("container_runtime_endpoint", runtime.clone()));
    values.push(("pod_logs_dir", r.string("podLogsDir", "/var/log/pods")?));
    values.push((
        "sync_frequency",
        millis(r.duration("syncFrequency", Duration::from_secs(60))?),
    ));
    values.push((
        "volume_stats_agg_period",
        millis(r.duration("volumeStatsAggPeriod", Duration::from_secs(60))?),
    ));

    // The pods' DNS.
    if let Some(servers) = r.value("clusterDNS") {
        let servers = servers
            .as_array()
            .ok_or_else(|| Reader::wrong("clusterDNS", "a list of IP addresses", servers))?;
        let text: Vec<&str> = servers.iter().filter_map(Value::as_str).collect();
        values.push(("cluster_dns", text.join(",")));
    }
    values.push(("cluster_domain", r.string("clusterDomain", "")?));
    // An empty resolvConf is no file, not the default.
    let resolv_conf = match r.value("resolvConf") {
        None => "/etc/resolv.conf".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(Reader::wrong("resolvConf", "a path", other)),
    };
    values.push(("resolv_conf", resolv_conf));

    // Static pods.
    let static_pod_path = r.string("staticPodPath", "")?;
    if !static_pod_path.is_empty() {
        values.push(("static_pod_path", static_pod_path));
    }
    values.push((
        "file_check_frequency",
        millis(r.duration("fileCheckFrequency", Duration::from_secs(20))?),
    ));

    // The node's graceful shutdown.
    values.push((
        "shutdown_grace_period",
        millis(r.duration("shutdownGracePeriod", Duration::ZERO)?),
    ));
    values.push((
        "shutdown_grace_period_critical_pods",
        millis(r.duration("shutdownGracePeriodCriticalPods", Duration::ZERO)?),
    ));
    if let Some(groups) = r.value("shutdownGracePeriodByPodPriority") {
        let wrong = || {
            Reader::wrong(
                "shutdownGracePeriodByPodPriority",
                "a list of {priority, shutdownGracePeriodSeconds}",
                groups,
            )
        };
        let list = groups.as_array().ok_or_else(wrong)?;
        let mut text = Vec::new();
        for group in list {
            let priority = group["priority"].as_i64().unwrap_or(0);
            let seconds = group["shutdownGracePeriodSeconds"].as_i64().unwrap_or(0);
            if !group.is_object() {
                return Err(wrong());
            }
            text.push(format!("{priority}={seconds}"));
        }
        if !text.is_empty() {
            values.push(("shutdown_grace_period_by_pod_priority", text.join(",")));
        }
    }

    // The Node.
    let register = r.bool("registerNode", true)?;
    values.push(("register_node", if register { "on" } else { "off" }.into()));
    values.push(("max_pods", r.nonzero_int("maxPods", 110)?.to_string()));
    if let Some(taints) = r.value("registerWithTaints") {
        let taints = taints
            .as_array()
            .ok_or_else(|| Reader::wrong("registerWithTaints", "a list of taints", taints))?;
        let text: Vec<String> = taints
            .iter()
            .map(|t| {
                let key = t["key"].as_str().unwrap_or_default();
                let effect = t["effect"].as_str().unwrap_or_default();
                match t["value"].as_str().filter(|v| !v.is_empty()) {
                    Some(value) => format!("{key}={value}:{effect}"),
                    None => format!("{key}:{effect}"),
                }
            })
            .collect();
        if !text.is_empty() {
            values.push(("register_with_taints", text.join(",")));
        }
    }
    // An update frequency set and no report frequency: the report
    // frequency is the update frequency, as the kubelet's defaulting has
    // it for older configurations.
    let update_set = r
        .value("nodeStatusUpdateFrequency")
        .and_then(Value::as_str)
        .and_then(|s| parse_go_duration(s).ok())
        .is_some_and(|d| !d.is_zero());
    extras.status_update_frequency =
        r.duration("nodeStatusUpdateFrequency", extras.status_update_frequency)?;
    let report_default = if update_set {
        extras.status_update_frequency
    } else {
        extras.status_report_frequency
    };
    extras.status_report_frequency = r.duration("nodeStatusReportFrequency", report_default)?;
    // The client certificate.
    let rotate = r.bool("rotateCertificates", false)?;
    values.push((
        "rotate_certificates",
        if rotate { "on" } else { "off" }.into(),
    ));
    extras.lease_duration = Duration::from_secs(
        u64::try_from(r.nonzero_int("nodeLeaseDurationSeconds", 40)?).unwrap_or(40),
    );

    // What was given and not read.
    let read = r.read;
    let mut ignored = Vec::new();
    if !images.is_empty() && images != runtime {
        ignored.push(format!(
            "imageServiceEndpoint={images:?} (images are pulled from the runtime endpoint)"
        ));
    }
    for (key, value) in &config {
        if key == "apiVersion"
            || key == "kind"
            || !config_file::KNOWN_FIELDS.contains(&key.as_str())
        {
            continue;
        }
        let mut leaves = Vec::new();
        leaves_of(key, value, &mut leaves);
        for (path, value) in leaves {
            if read.contains(path.as_str()) || as_the_agent_does(&path, value) {
                continue;
            }
            ignored.push(format!("{path}={value}"));
        }
    }

    // The kubelet's own flags.
    let own = |name: &str| given.get(name).map(str::to_string);
    if let Some(root) = own("root-dir") {
        values.push(("root_dir", root));
    }
    // The kubelet's certificate directory is its own flag, not under its
    // root directory.
    values.push((
        "cert_dir",
        own("cert-dir")
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "/var/lib/kubelet/pki".into()),
    ));
    let bootstrap = own("bootstrap-kubeconfig").filter(|b| !b.is_empty());
    match own("kubeconfig").filter(|k| !k.is_empty()) {
        Some(path) => {
            values.push(("kubeconfig", path));
            if let Some(bootstrap) = bootstrap {
                values.push(("bootstrap_kubeconfig", bootstrap));
            }
        }
        None => {
            // No kubeconfig: standalone, the bootstrap unused, as the
            // kubelet.
            if let Some(bootstrap) = bootstrap {
                ignored.push(format!(
                    "--bootstrap-kubeconfig={bootstrap} (no --kubeconfig: standalone)"
                ));
            }
            values.push(("kubeconfig", "off".into()));
        }
    }
    let node_name = match own("hostname-override").filter(|h| !h.trim().is_empty()) {
        Some(name) => Some(name.trim().to_lowercase()),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_lowercase())
            .filter(|h| !h.is_empty()),
    };
    if let Some(name) = node_name {
        values.push(("node_name", name));
    }
    if let Some(ips) = own("node-ip").filter(|ip| !matches!(ip.trim(), "" | "0.0.0.0" | "::")) {
        values.push(("node_ip", ips));
    }
    if let Some(labels) = own("node-labels").filter(|l| !l.is_empty()) {
        values.push(("node_labels", labels));
    }
    let verbosity = own("v").and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    values.push((
        "log_level",
        match verbosity {
            ..=3 => "info",
            4..=5 => "debug",
            _ => "trace",
        }
        .into(),
    ));
    if let Some(format) = own("logging-format") {
        values.push(("log_format", format));
    }
    const HONOURED: &[&str] = &[
        "config",
        "config-dir",
        "kubeconfig",
        "bootstrap-kubeconfig",
        "hostname-override",
        "node-ip",
        "cert-dir",
        "root-dir",
        "node-labels",
        "v",
        "logging-format",
        "version",
        "help",
    ];
    for (flag, value) in given.iter() {
        if flag.target == Target::Own
            && !HONOURED.contains(&flag.name)
            && !(flag.name == "cloud-provider" && value.is_empty())
        {
            ignored.push(format!("--{}={value}", flag.name));
        }
    }
    Ok(Plan {
        values,
        extras,
        ignored,
        unknown_fields: loaded.unknown_fields.clone(),
    })
}

/// The leaves of a field: itself, or for `authentication` and
/// `authorization`, the fields within (each read on its own).
fn leaves_of<'a>(key: &str, value: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    match value {
        Value::Object(inner)
            if key.starts_with("authentication") || key.starts_with("authorization") =>
        {
            for (name, value) in inner {
                leaves_of(&format!("{key}.{name}"), value, out);
            }
        }
        _ => out.push((key.to_string(), value)),
    }
}
