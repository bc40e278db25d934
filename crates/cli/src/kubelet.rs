//! `nodeplugins kubelet` (and the binary run under the name `kubelet`):
//! the agent started as a kubelet is, by its command line and its
//! `KubeletConfiguration` file, so that a kubeadm node's unit
//! (`--bootstrap-kubeconfig ... --kubeconfig ... --config
//! /var/lib/kubelet/config.yaml` and the flags of `kubeadm-flags.env`)
//! starts the agent in the kubelet's place unchanged.
//!
//! The flags are parsed as the kubelet parses them (an unknown one is an
//! error), the files loaded and merged as it loads them, the command line
//! winning; what the agent honours becomes its settings, with the
//! kubelet's defaults (the runtime at containerd's socket, the API on
//! `0.0.0.0:10250`, health on `127.0.0.1:10248`, the Node registered);
//! every other field or flag given is reported once at start.
//!
//! | file | what |
//! |---|---|
//! | `flags` | the kubelet's flags and how they are written |
//! | `config_file` | the configuration files, drop-ins, relative paths |
//! | `translate` | from the kubelet's settings to the agent's |

mod config_file;
mod flags;
mod translate;

#[cfg(test)]
mod tests;

use std::path::Path;

use nodeplugins::kube_api::KUBELET_VERSION;
use nodeplugins_sdk::logging;

use crate::config::Settings;

/// Set (non-empty), the kubelet's command line prints the agent's
/// settings it makes, as `nodeplugins run --print-config` does, and what
/// it does not honour, and exits: the kubelet has no such flag, and an
/// unknown flag is an error.
pub(crate) const PRINT_CONFIG_ENV: &str = "NODEPLUGINS_PRINT_CONFIG";

/// The kubelet's command line `args` (without the program's name): runs
/// the agent as that kubelet would run, or prints the version or help.
pub(crate) async fn run(args: &[String]) -> anyhow::Result<()> {
    let given = flags::parse(args)?;
    if given.get("version").is_some_and(|v| v != "false") {
        let mut out = std::io::stdout().lock();
        std::io::Write::write_all(
            &mut out,
            format!("Kubernetes {KUBELET_VERSION}\n").as_bytes(),
        )?;
        return Ok(());
    }
    if given.get("help") == Some("true") {
        let mut out = std::io::stdout().lock();
        std::io::Write::write_all(&mut out, help().as_bytes())?;
        return Ok(());
    }
    let loaded = config_file::load(
        given.get("config").map(Path::new),
        given.get("config-dir").map(Path::new),
    )?;
    let plan = translate::plan(&given, &loaded)?;
    let settings = settings(&plan)?;
    if std::env::var_os(PRINT_CONFIG_ENV).is_some_and(|v| !v.is_empty()) {
        let mut text = settings.to_toml();
        for field in &plan.unknown_fields {
            text.push_str(&format!("# not a KubeletConfiguration field: {field}\n"));
        }
        for ignored in &plan.ignored {
            text.push_str(&format!("# not honoured: {ignored}\n"));
        }
        let mut out = std::io::stdout().lock();
        std::io::Write::write_all(&mut out, text.as_bytes())?;
        return Ok(());
    }
    logging::init(settings.log_format, &settings.log_level);
    for field in &plan.unknown_fields {
        tracing::warn!(field = %field, "not a KubeletConfiguration field: accepted and ignored, as the kubelet's lenient decoding does");
    }
    if !plan.ignored.is_empty() {
        tracing::warn!(
            ignored = %plan.ignored.join(", "),
            "kubelet settings this agent does not honour: ignored"
        );
    }
    crate::agent_run::run(settings.agent, settings.kube).await
}

/// The agent's settings for `plan`.
fn settings(plan: &translate::Plan) -> anyhow::Result<Settings> {
    let mut settings =
        Settings::from_values(&plan.values, "the kubelet's flags and configuration")?;
    let extras = &plan.extras;
    if let Some(server) = settings.agent.kubelet_server.as_mut() {
        server.token_webhook = extras.token_webhook;
        server.token_cache_ttl = extras.token_cache_ttl;
        server.authorized_ttl = extras.authorized_ttl;
        server.unauthorized_ttl = extras.unauthorized_ttl;
        server.debugging_handlers = extras.debugging_handlers;
        server.read_only_addr = extras.read_only;
    }
    if let Some(kube) = settings.kube.as_mut() {
        kube.node_lease_duration = Some(extras.lease_duration);
        if let Some(registration) = kube.node_registration.as_mut() {
            registration.status_update_frequency = extras.status_update_frequency;
            registration.status_report_frequency = extras.status_report_frequency;
        }
    }
    Ok(settings)
}

/// What `--help` prints: the flags and fields the agent honours.
fn help() -> String {
    format!(
        "nodeplugins, started as the kubelet {KUBELET_VERSION}: the kubelet's flags and \
KubeletConfiguration ({api}) file.

Honoured flags: --config, --config-dir, --kubeconfig, --bootstrap-kubeconfig (only when the \
kubeconfig exists), --hostname-override, --node-ip, --node-labels, --root-dir, --cert-dir, -v, \
--logging-format, --version, and the flags of the honoured fields below.

Honoured fields: enableServer, address, port, tlsCertFile, tlsPrivateKeyFile, \
authentication (x509.clientCAFile, webhook.enabled, webhook.cacheTTL, anonymous.enabled), \
authorization (mode, webhook.cacheAuthorizedTTL, webhook.cacheUnauthorizedTTL), \
enableDebuggingHandlers, healthzBindAddress, healthzPort, containerRuntimeEndpoint, \
imageServiceEndpoint (the same endpoint), podLogsDir, syncFrequency, volumeStatsAggPeriod, \
registerNode, registerWithTaints, maxPods, nodeStatusUpdateFrequency, \
nodeStatusReportFrequency, nodeLeaseDurationSeconds.

Any other flag of the kubelet's, or field, is accepted and reported at start as not honoured; \
a flag the kubelet does not have is an error.
",
        api = config_file::API_VERSION
    )
}
