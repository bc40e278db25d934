//! A run: the plugin met where the options say, started and stopped when
//! the tool manages it, and every rule of its type in order.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeplugins_api::constants::plugin_type;

#[cfg(feature = "kube")]
use super::api_server;
use super::claims::{self, TestClaim};
use super::deadlines::Deadlines;
use super::kubelet_socket::KubeletSocket;
use super::plugin::Plugin;
use super::restarts::{self, Met};
use super::rule::{Report, Selection, Verdict};
use super::rules::{self, *};
use super::{PluginKind, csi, device, device_register, dra, registration, slices, sockets};

/// Where the tool meets the plugin.
#[derive(Debug, Clone)]
pub(crate) enum Meeting {
    /// A registration socket: this socket, or the first to appear in this
    /// directory.
    Registry(PathBuf),
    /// A device plugin registering on `<dir>/kubelet.sock`, served by the
    /// tool.
    KubeletSocket(PathBuf),
}

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) meeting: Meeting,
    /// The plugin's command line, when the tool starts it.
    pub(crate) exec: Option<String>,
    /// Run the restart rules.
    pub(crate) restarts: bool,
    /// The DRA rules' claims (made up when not given).
    pub(crate) claims: Option<PathBuf>,
    /// Read the DRA rules' claims from the API server with this kubeconfig.
    #[cfg(feature = "kube")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// How long each call may take.
    pub(crate) deadlines: Deadlines,
    /// How long a plugin may take to register again after a restart.
    pub(crate) restart_timeout: Duration,
    /// The rules to run.
    pub(crate) selection: Selection,
    /// Where the CDI specs a driver's ids must resolve to are.
    pub(crate) cdi_dirs: Vec<PathBuf>,
    /// The type the plugin met through its registration socket must have.
    pub(crate) expect: Option<PluginKind>,
}

impl Options {
    /// How long the plugin may take to start and register: starting a
    /// process on a loaded machine is not the plugin's promptness.
    fn start_timeout(&self) -> Duration {
        self.restart_timeout
    }
}

/// Runs every rule for the plugin `options` describe.
pub(crate) async fn run(options: &Options) -> Result<Report, String> {
    let claims = match &options.claims {
        Some(file) => claims::load(file)?,
        None => claims::made_up(),
    };
    let mut plugin = Plugin::new(options.exec.clone());
    let report = match &options.meeting {
        Meeting::KubeletSocket(dir) => device_plugin(options, dir, &mut plugin).await,
        Meeting::Registry(path) => registered(options, path, &mut plugin, &claims).await,
    };
    // The plugin the run started ends with it, whether or not the run
    // could be made.
    let stopped = plugin.stop().await;
    let mut report = report?;
    stopped?;
    // Every rule is reported, those that could not run as SKIP with why.
    let kubelet_socket = matches!(options.meeting, Meeting::KubeletSocket(_));
    report.complete(&rules::every(kubelet_socket, &report.plugin_type));
    Ok(report)
}

/// A device plugin registering on the tool's `kubelet.sock`.
async fn device_plugin(
    options: &Options,
    dir: &Path,
    plugin: &mut Plugin,
) -> Result<Report, String> {
    let (mut socket, mut requests) = KubeletSocket::start(dir, options.deadlines).await?;
    plugin.start()?;
    let mut report = Report {
        plugin: socket.path().display().to_string(),
        plugin_type: plugin_type::DEVICE.into(),
        outcomes: Vec::new(),
        selection: options.selection.clone(),
    };
    // A plugin that exits fails at once, with why; one that stays and does
    // not register fails after the start timeout.
    let first = tokio::select! {
        first = tokio::time::timeout(options.start_timeout(), requests.recv()) => Ok(first),
        exit = plugin.wait_exit() => Err(exit),
    };
    let Ok(Ok(Some(registered))) = first else {
        let why = match first {
            Err(exit) => format!("the plugin exited ({exit}) without registering"),
            Ok(_) => format!(
                "no Register on {} within {:?}",
                socket.path().display(),
                options.start_timeout()
            ),
        };
        report.record(&DP_REGISTER, Verdict::Fail(why), Duration::ZERO);
        socket.stop().await;
        return Ok(report);
    };
    let Some(endpoint) = device_register::register_rule(&mut report, dir, &registered) else {
        // Refused: the kubelet knows no such plugin, and every other rule
        // is reported as not run.
        socket.stop().await;
        return Ok(report);
    };
    let request = Some(&registered.request);
    let cdi = &options.cdi_dirs;
    device::rules(&mut report, &endpoint, request, cdi, options.deadlines).await;
    if options.restarts {
        device_register::reregister_rule(
            &mut report,
            &mut socket,
            &mut requests,
            options.restart_timeout,
        )
        .await;
        let timeout = options.restart_timeout;
        device_register::killed_rule(&mut report, plugin, &mut requests, timeout).await;
    } else {
        report.skip_all(
            &[&DP_REREGISTER, &DP_KILLED],
            "restart rules not asked for (--restarts)",
        );
    }
    socket.stop().await;
    Ok(report)
}

/// Starts the plugin again when a rule ended it (a CSI registrar exits
/// when the kubelet rejects its driver, as node-driver-registrar does, for
/// its pod to restart it), so that the rules after it meet a running
/// plugin and not the socket it left behind. `gone`: a rule saw it stop
/// answering, and its process may still be on its way out: it is waited
/// for. Waits for its registration socket to answer.
async fn revive(
    plugin: &mut Plugin,
    watched: &Path,
    socket: &Path,
    gone: bool,
    timeout: Duration,
) -> Result<(), String> {
    if !plugin.managed() {
        return Ok(());
    }
    if gone && !plugin.exited() {
        let _ = tokio::time::timeout(timeout, plugin.wait_exit()).await;
    }
    if !plugin.exited() {
        return Ok(());
    }
    // Ends what is left of its command line, as its pod's restart would.
    plugin.stop().await?;
    // Whatever it left behind, the restart gets a clean directory entry.
    let _ = std::fs::remove_file(socket);
    plugin.start()?;
    sockets::find_socket(watched, timeout).await.map(|_| ())
}

/// A plugin met through its registration socket.
async fn registered(
    options: &Options,
    watched: &Path,
    plugin: &mut Plugin,
    claims: &[TestClaim],
) -> Result<Report, String> {
    // The kubelet makes its plugins_registry before any plugin starts; a
    // plugin may expect it.
    if !watched.exists() && watched.extension().is_none_or(|e| e != "sock") {
        std::fs::create_dir_all(watched)
            .map_err(|e| format!("create {}: {e}", watched.display()))?;
    }
    plugin.start()?;
    let mut report = Report {
        plugin: watched.display().to_string(),
        selection: options.selection.clone(),
        ..Report::default()
    };
    // A plugin that exits before its socket appears fails at once.
    let found = tokio::select! {
        found = sockets::find_socket(watched, options.start_timeout()) => found,
        exit = plugin.wait_exit() => Err(format!("the plugin exited ({exit}) without a registration socket")),
    };
    let socket = match found {
        Ok(socket) => socket,
        Err(why) => {
            report.record(&REG_GET_INFO, Verdict::Fail(why), Duration::ZERO);
            return Ok(report);
        }
    };
    report.plugin = socket.display().to_string();
    let deadlines = options.deadlines;
    let Some(found) = registration::rules(&mut report, &socket, deadlines).await else {
        return Ok(report);
    };
    let kind = found.info.r#type.clone();
    if let Some(expected) = options.expect
        && kind != expected.plugin_type()
    {
        return Err(format!(
            "{} registered as a {kind:?}, not the {:?} the run expects",
            socket.display(),
            expected.plugin_type()
        ));
    }
    let gone = report
        .outcome(REG_NOTIFY_FALSE.id)
        .is_some_and(|o| matches!(o.verdict, Verdict::Warn(_)));
    let revived = revive(plugin, watched, &socket, gone, options.start_timeout()).await;
    #[cfg(feature = "kube")]
    let api = match &options.kubeconfig {
        Some(kubeconfig) if kind == plugin_type::DRA => {
            Some(api_server::connect(kubeconfig).await?)
        }
        _ => None,
    };
    #[cfg(feature = "kube")]
    let from_api = match &api {
        Some(client) => Some(claims::from_api(client, &found.info.name).await?),
        None => None,
    };
    #[cfg(feature = "kube")]
    let claims = from_api.as_deref().unwrap_or(claims);
    match kind.as_str() {
        plugin_type::DEVICE => {
            let cdi = &options.cdi_dirs;
            device::rules(&mut report, &found.endpoint, None, cdi, deadlines).await;
        }
        plugin_type::DRA => {
            if !report.left_out(DRA_SLICE_RULES) {
                #[cfg(feature = "kube")]
                slices::rules(
                    &mut report,
                    api.as_ref(),
                    &found.info.name,
                    options.start_timeout(),
                )
                .await;
                #[cfg(not(feature = "kube"))]
                slices::rules(&mut report);
            }
            let cdi = &options.cdi_dirs;
            dra::rules(
                &mut report,
                &found.info,
                &found.endpoint,
                claims,
                cdi,
                deadlines,
            )
            .await;
        }
        plugin_type::CSI => {
            let endpoint = &found.endpoint;
            let rule = csi::node_info_rule(endpoint, deadlines);
            report.run(&CSI_NODE_INFO, rule).await;
        }
        _ => {}
    }
    let mut restart = vec![&REG_SOCKET_GONE, &REG_SOCKET_BACK];
    if kind == plugin_type::DRA {
        restart.insert(0, &REG_SECOND_INSTANCE);
        restart.push(&DRA_RESTART);
    }
    restart.push(&REG_KILLED);
    let met = Met {
        socket: &socket,
        watched,
        name: &found.info.name,
    };
    if !options.restarts {
        report.skip_all(&restart, "restart rules not asked for (--restarts)");
    } else if !plugin.managed() {
        report.skip_all(
            &restart,
            "the tool restarts only a plugin it starts (--exec)",
        );
    } else if let Err(why) = &revived {
        report.skip_all(
            &restart,
            &format!("an earlier rule ended the plugin and it did not come back: {why}"),
        );
    } else {
        // For a DRA driver also a second instance beside the first, and claims
        // prepared before the restart to unprepare after it.
        let call = deadlines.dra_call();
        let before = match kind == plugin_type::DRA {
            false => None,
            true => {
                restarts::second_instance_rule(
                    &mut report,
                    plugin,
                    &found,
                    &socket,
                    watched,
                    options.restart_timeout,
                    deadlines,
                )
                .await;
                Some(
                    match dra::connect(&found.info, &found.endpoint, deadlines).await {
                        Ok(client) => dra::prepare_before_restart(&client, claims, call).await,
                        Err(e) => Err(e),
                    },
                )
            }
        };
        let timeout = options.restart_timeout;
        let back = restarts::restart_rules(&mut report, plugin, &met, timeout, deadlines).await;
        if let Some(before) = before {
            let after = match back {
                None => Ok(None),
                Some(back) => match registration::get_info(&back, deadlines).await {
                    Err(_) => Ok(None),
                    Ok(info) => {
                        let endpoint = if info.endpoint.is_empty() {
                            back
                        } else {
                            PathBuf::from(&info.endpoint)
                        };
                        dra::connect(&info, &endpoint, deadlines).await.map(Some)
                    }
                },
            };
            dra::restart_rule(&mut report, before, after, claims, call).await;
        }
    }
    // A plugin that does not come back after a clean restart is not tried
    // after a crash: the rule is reported as not run for that failure.
    if options.restarts && plugin.managed() && revived.is_ok() && !report.failed(&REG_SOCKET_BACK) {
        let timeout = options.restart_timeout;
        restarts::killed_rule(&mut report, plugin, &met, timeout, deadlines).await;
    }
    Ok(report)
}
