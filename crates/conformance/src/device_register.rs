//! The device plugin's registration on the tool's `kubelet.sock`: its
//! Register request, and registering again after a kubelet restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use super::kubelet_socket::{KubeletSocket, Registered};
use super::plugin::Plugin;
use super::rule::{Report, Verdict};
use super::rules::*;

/// The Register rule for a plugin that registered on the tool's
/// `kubelet.sock`; returns its service socket when Register was accepted.
pub(crate) fn register_rule(
    report: &mut Report,
    dir: &Path,
    registered: &Registered,
) -> Option<PathBuf> {
    let request = &registered.request;
    report.plugin = request.resource_name.clone();
    report.plugin_type = "DevicePlugin".into();
    let verdict = match &registered.connected {
        Ok(_) => Verdict::Pass(format!(
            "{} at {:?}, version {}: dialed and asked for its options during Register",
            request.resource_name, request.endpoint, request.version
        )),
        Err(why) => Verdict::Fail(format!("Register refused: {why}")),
    };
    report.record(&DP_REGISTER, verdict, Duration::ZERO);
    registered
        .connected
        .is_ok()
        .then(|| dir.join(&request.endpoint))
}

/// The kubelet restart rule: every socket in the directory removed and
/// `kubelet.sock` made again, then the plugin's next Register awaited.
pub(crate) async fn reregister_rule(
    report: &mut Report,
    socket: &mut KubeletSocket,
    requests: &mut mpsc::UnboundedReceiver<Registered>,
    timeout: Duration,
) {
    report
        .run(&DP_REREGISTER, async {
            while requests.try_recv().is_ok() {}
            let start = tokio::time::Instant::now();
            let removed = match socket.restart().await {
                Ok(removed) => removed,
                Err(e) => return Verdict::Skip(e),
            };
            let removed: Vec<String> = removed
                .iter()
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            let deadline = start + timeout;
            let mut refused = None;
            loop {
                match tokio::time::timeout_at(deadline, requests.recv()).await {
                    Ok(Some(Registered {
                        request,
                        connected: Ok(_),
                    })) => {
                        return Verdict::Pass(format!(
                            "{} registered again after {:?} (removed {removed:?})",
                            request.resource_name,
                            start.elapsed()
                        ));
                    }
                    Ok(Some(Registered {
                        connected: Err(why),
                        ..
                    })) => refused = Some(why),
                    _ => break,
                }
            }
            Verdict::Fail(match refused {
                Some(why) => format!(
                    "registered again but was refused: {why} (the kubelet removes every socket in the directory when it starts: {removed:?})"
                ),
                None => format!(
                    "no Register within {timeout:?} of kubelet.sock made again (the kubelet removed {removed:?} first)"
                ),
            })
        })
        .await;
}

/// The crash rule: the plugin killed with SIGKILL, so its socket stays,
/// then started again: it must register again, and serve, within
/// `timeout`.
pub(crate) async fn killed_rule(
    report: &mut Report,
    plugin: &mut Plugin,
    requests: &mut mpsc::UnboundedReceiver<Registered>,
    timeout: Duration,
) {
    report
        .run(&DP_KILLED, async {
            if !plugin.managed() {
                return Verdict::Skip("the tool restarts only a plugin it starts (--exec)".into());
            }
            if let Err(e) = plugin.kill().await {
                return Verdict::Skip(e);
            }
            while requests.try_recv().is_ok() {}
            if let Err(e) = plugin.start() {
                return Verdict::Fail(e);
            }
            let deadline = tokio::time::Instant::now() + timeout;
            let mut refused = None;
            loop {
                let next = tokio::select! {
                    next = tokio::time::timeout_at(deadline, requests.recv()) => next,
                    exit = plugin.wait_exit() => {
                        return Verdict::Fail(format!(
                            "started again after SIGKILL, the plugin exited ({exit})"
                        ));
                    }
                };
                match next {
                    Ok(Some(Registered {
                        request,
                        connected: Ok(_),
                    })) => {
                        return Verdict::Pass(format!(
                            "{} registered again after SIGKILL and a new start",
                            request.resource_name
                        ));
                    }
                    Ok(Some(Registered {
                        connected: Err(why),
                        ..
                    })) => refused = Some(why),
                    _ => break,
                }
            }
            Verdict::Fail(match refused {
                Some(why) => format!("registered again after SIGKILL but was refused: {why}"),
                None => format!("no Register within {timeout:?} of a new start after SIGKILL"),
            })
        })
        .await;
}
