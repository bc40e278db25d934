//! The restart rules: the registration socket goes when the plugin stops
//! and comes back when it starts again, and a second instance registers
//! beside the first (a rolling update).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeplugins_api::transport::{dial, root_cause};

use super::deadlines::Deadlines;
use super::plugin::Plugin;
use super::registration::{Registered, get_info};
use super::rule::{Report, Verdict};
use super::rules::*;
use super::sockets::{another_socket, find_socket};

/// Where the plugin was met: its registration socket, the path the tool
/// was given (that socket, or the directory it is in), and its name.
pub(crate) struct Met<'a> {
    pub(crate) socket: &'a Path,
    pub(crate) watched: &'a Path,
    pub(crate) name: &'a str,
}

/// The restart rules of every type: the socket goes when the plugin stops
/// and comes back when it starts again (under any name in a watched
/// directory: the kubelet registers whatever socket appears). Returns the
/// new socket.
pub(crate) async fn restart_rules(
    report: &mut Report,
    plugin: &mut Plugin,
    met: &Met<'_>,
    timeout: Duration,
    deadlines: Deadlines,
) -> Option<PathBuf> {
    let socket = met.socket;
    report
        .run_needed(&REG_SOCKET_GONE, async {
            match plugin.stop().await {
                Err(e) => return Verdict::Fail(e),
                Ok(false) => {
                    return Verdict::Fail("the plugin did not exit on SIGTERM; killed".to_string());
                }
                Ok(true) => {}
            }
            Verdict::check(
                !socket.exists(),
                if socket.exists() {
                    format!(
                        "{} is still there after the plugin exited",
                        socket.display()
                    )
                } else {
                    format!("{} removed", socket.display())
                },
            )
        })
        .await;
    // Whatever it left behind, the restart gets a clean directory entry.
    let _ = std::fs::remove_file(socket);
    let mut found = None;
    report
        .run_needed(&REG_SOCKET_BACK, async {
            if let Err(e) = plugin.start() {
                return Verdict::Fail(e);
            }
            let back = match find_socket(met.watched, timeout).await {
                Ok(back) => back,
                Err(e) => return Verdict::Fail(e),
            };
            let verdict = answers_as_before(&back, met, deadlines, "").await;
            found = Some(back);
            verdict
        })
        .await;
    found
}

/// The rolling-update rule: a second instance beside the first.
pub(crate) async fn second_instance_rule(
    report: &mut Report,
    plugin: &Plugin,
    first: &Registered,
    socket: &Path,
    watched: &Path,
    timeout: Duration,
    deadlines: Deadlines,
) {
    report
        .run(&REG_SECOND_INSTANCE, async {
            let Some(mut second) = plugin.second() else {
                return Verdict::Skip(
                    "--exec has no {instance} to start a second instance with".into(),
                );
            };
            if !watched.is_dir() {
                return Verdict::Skip("--registry names a socket, not a directory".into());
            }
            if let Err(e) = second.start() {
                return Verdict::Fail(e);
            }
            // The second instance's registration, or why there is none; a
            // second that exits has none at once.
            let second_info = tokio::select! {
                found = another_socket(watched, socket, timeout) => match found {
                    None => Err(format!(
                        "no second registration socket in {} within {timeout:?}",
                        watched.display()
                    )),
                    Some(other) => get_info(&other, deadlines)
                        .await
                        .map(|info| (other, info))
                        .map_err(|e| format!("the second instance: {e}")),
                },
                exit = second.wait_exit() => Err(format!("the second instance exited ({exit})")),
            };
            let second_info = second_info.and_then(|(other, info)| {
                if info.name != first.info.name {
                    Err(format!(
                        "the second instance calls itself {:?}, the first {:?}",
                        info.name, first.info.name
                    ))
                } else if !info.endpoint.is_empty() && info.endpoint == first.info.endpoint {
                    Err(format!(
                        "both instances serve at {:?}, and the kubelet refuses the second",
                        info.endpoint
                    ))
                } else {
                    Ok(other)
                }
            });
            // Whatever became of the second, the first must still serve:
            // the kubelet keeps calling it.
            let verdict = match (dial(&first.endpoint, deadlines.dial()).await, second_info) {
                (Err(e), _) => Verdict::Fail(format!(
                    "the first instance's service, beside the second: {}",
                    root_cause(&e)
                )),
                (Ok(_), Err(why)) => Verdict::Warn(format!(
                    "{why}: the kubelet keeps using the first, but a surge update (two pods on the node) cannot start the new one"
                )),
                (Ok(_), Ok(other)) => Verdict::Pass(format!(
                    "{} beside {}",
                    other.display(),
                    socket.display()
                )),
            };
            let _ = second.stop().await;
            // Whatever the second instance left behind is not the first's.
            if let Some(other) = another_socket(watched, socket, Duration::ZERO).await {
                let _ = std::fs::remove_file(other);
            }
            verdict
        })
        .await;
}

/// The crash rule: the plugin killed with SIGKILL, so its sockets stay,
/// then started again: it must answer GetInfo at a registration socket,
/// under its name, within `timeout`.
pub(crate) async fn killed_rule(
    report: &mut Report,
    plugin: &mut Plugin,
    met: &Met<'_>,
    timeout: Duration,
    deadlines: Deadlines,
) {
    report
        .run(&REG_KILLED, async {
            if let Err(e) = plugin.kill().await {
                return Verdict::Skip(e);
            }
            if let Err(e) = plugin.start() {
                return Verdict::Fail(e);
            }
            // A stale socket file accepts no connection: only the new
            // plugin's is found.
            let found = tokio::select! {
                found = find_socket(met.watched, timeout) => found,
                exit = plugin.wait_exit() => Err(format!("the plugin exited ({exit})")),
            };
            let back = match found {
                Ok(back) => back,
                Err(e) => {
                    return Verdict::Fail(format!(
                        "after SIGKILL and a new start: {e}; the kubelet keeps retrying the stale socket and never registers the plugin again"
                    ));
                }
            };
            answers_as_before(&back, met, deadlines, " after SIGKILL and a new start").await
        })
        .await;
}

/// Whether the registration socket `back` of a restarted plugin answers
/// GetInfo under the plugin's name; `when` ends the verdict's text.
async fn answers_as_before(
    back: &Path,
    met: &Met<'_>,
    deadlines: Deadlines,
    when: &str,
) -> Verdict {
    match get_info(back, deadlines).await {
        Ok(info) if info.name == met.name => {
            Verdict::Pass(format!("{} answers GetInfo{when}", back.display()))
        }
        Ok(info) => Verdict::Fail(format!(
            "{} calls itself {:?}, not {:?} as before",
            back.display(),
            info.name,
            met.name
        )),
        Err(e) => Verdict::Fail(format!("{}: {e}", back.display())),
    }
}
