//! The registration rules every plugin type shares: the registration
//! socket as the kubelet's plugin watcher meets it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeplugins_api::call;
use nodeplugins_api::constants::plugin_type;
use nodeplugins_api::pluginregistration::v1::registration_client::RegistrationClient;
use nodeplugins_api::pluginregistration::v1::{PluginInfo, RegistrationStatus};
use nodeplugins_api::transport::{dial, root_cause};

use super::plugin::Plugin;
use super::rule::{Report, Verdict};
use super::rules::*;
use crate::check::{CALL_TIMEOUT, check_name, check_versions, get_info, is_socket};

/// Waits up to `timeout` for a registration socket that accepts
/// connections: `path` itself, or the first to appear in the directory
/// `path`.
pub(crate) async fn find_socket(path: &Path, timeout: Duration) -> Result<PathBuf, String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(found) = socket_in(path) {
            return Ok(found);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "no registration socket at {} within {timeout:?}",
                path.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits up to `timeout` for a socket in the directory `dir` other than
/// `known`.
async fn another_socket(dir: &Path, known: &Path, timeout: Duration) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let found = std::fs::read_dir(dir).ok().and_then(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
                .map(|e| e.path())
                .find(|p| p != known && accepting(p))
        });
        if found.is_some() || tokio::time::Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether a socket file accepts connections yet: a server binds (making
/// the file) before it listens, and a connection in between is refused.
fn accepting(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

fn socket_in(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path).ok()?;
    if meta.file_type().is_socket() {
        return accepting(path).then(|| path.to_owned());
    }
    if !meta.is_dir() {
        return None;
    }
    let mut sockets: Vec<PathBuf> = std::fs::read_dir(path)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| accepting(p))
        .collect();
    sockets.sort();
    sockets.into_iter().next()
}

/// What the registration rules found: the plugin's info and the socket its
/// service is on, when the type's rules can go on.
pub(crate) struct Registered {
    pub(crate) info: PluginInfo,
    pub(crate) endpoint: PathBuf,
}

/// Runs the registration rules against `socket`.
pub(crate) async fn rules(report: &mut Report, socket: &Path) -> Option<Registered> {
    let mut info = None;
    report
        .run(&REG_GET_INFO, async {
            match get_info(socket).await {
                Ok(found) => {
                    let seen = format!(
                        "type {:?}, name {:?}, endpoint {:?}, versions {:?}",
                        found.r#type, found.name, found.endpoint, found.supported_versions
                    );
                    info = Some(found);
                    Verdict::Pass(seen)
                }
                Err(error) => Verdict::Fail(error),
            }
        })
        .await;
    let Some(info) = info else {
        report.skip_all(
            &[
                &REG_TYPE,
                &REG_NAME,
                &REG_VERSIONS,
                &REG_ENDPOINT,
                &REG_NOTIFY_FALSE,
            ],
            "GetInfo did not answer",
        );
        return None;
    };
    report.plugin_type = info.r#type.clone();
    let known = [plugin_type::CSI, plugin_type::DEVICE, plugin_type::DRA];
    let typed = known.contains(&info.r#type.as_str());
    report
        .run(&REG_TYPE, async {
            Verdict::check(typed, format!("{:?}", info.r#type))
        })
        .await;
    if !typed {
        report.skip_all(
            &[&REG_NAME, &REG_VERSIONS, &REG_ENDPOINT, &REG_NOTIFY_FALSE],
            "no handler for the type",
        );
        return None;
    }
    report
        .run(&REG_NAME, async { Verdict::from_result(check_name(&info)) })
        .await;
    report
        .run(&REG_VERSIONS, async {
            Verdict::from_result(check_versions(&info))
        })
        .await;
    let mut endpoint = None;
    report
        .run(&REG_ENDPOINT, async {
            match check_endpoint(socket, &info.endpoint).await {
                Ok((path, seen)) => {
                    endpoint = Some(path);
                    Verdict::Pass(seen)
                }
                Err(seen) => Verdict::Fail(seen),
            }
        })
        .await;
    report
        .run(&REG_NOTIFY_FALSE, survives_rejection(socket))
        .await;
    Some(Registered {
        endpoint: endpoint?,
        info,
    })
}

async fn check_endpoint(socket: &Path, endpoint: &str) -> Result<(PathBuf, String), String> {
    let path = if endpoint.is_empty() {
        socket.to_owned()
    } else {
        let path = PathBuf::from(endpoint);
        if !path.is_absolute() {
            return Err(format!("{endpoint:?} is not an absolute path"));
        }
        is_socket(&path)?;
        path
    };
    dial(&path, CALL_TIMEOUT)
        .await
        .map_err(|e| format!("{}: {}", path.display(), root_cause(&e)))?;
    Ok((
        path.clone(),
        format!("{} accepts connections", path.display()),
    ))
}

/// Tells the plugin its registration failed, checks it still answers, and
/// then tells it it is registered, as the kubelet does when a retry works.
async fn survives_rejection(socket: &Path) -> Verdict {
    let notify = |registered: bool| async move {
        let channel = dial(socket, CALL_TIMEOUT)
            .await
            .map_err(|e| format!("dial: {}", root_cause(&e)))?;
        let status = RegistrationStatus {
            plugin_registered: registered,
            error: if registered {
                String::new()
            } else {
                "nodeplugins conformance: registration refused on purpose".into()
            },
        };
        let mut client = RegistrationClient::new(channel);
        call::unary(CALL_TIMEOUT, client.notify_registration_status(status))
            .await
            .map_err(|e| format!("NotifyRegistrationStatus: {e}"))
    };
    // Its answer does not matter (the kubelet only logs an error, and the
    // Go helper answers one on purpose); what it does next does.
    let answered = match notify(false).await {
        Ok(_) => "answered".to_string(),
        Err(seen) => format!("answered {seen}"),
    };
    // The plugin may take a moment to act on it; it must still be there.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let verdict = match get_info(socket).await {
        Ok(_) => Verdict::Pass(format!("the rejection {answered}; GetInfo still answers")),
        Err(error) => Verdict::Fail(format!("after the rejection ({answered}): {error}")),
    };
    let _ = notify(true).await;
    verdict
}

/// The restart rules of every type: the socket goes when the plugin stops
/// and comes back when it starts again. Returns the new socket.
pub(crate) async fn restart_rules(
    report: &mut Report,
    plugin: &mut Plugin,
    socket: &Path,
    timeout: Duration,
) -> Option<PathBuf> {
    report
        .run(&REG_SOCKET_GONE, async {
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
        .run(&REG_SOCKET_BACK, async {
            if let Err(e) = plugin.start() {
                return Verdict::Fail(e);
            }
            // The same socket as before: the command line is the same.
            let back = match find_socket(socket, timeout).await {
                Ok(back) => back,
                Err(e) => return Verdict::Fail(e),
            };
            let verdict = match get_info(&back).await {
                Ok(_) => Verdict::Pass(format!("{} answers GetInfo", back.display())),
                Err(e) => Verdict::Fail(format!("{}: {e}", back.display())),
            };
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
            let verdict = match another_socket(watched, socket, timeout).await {
                None => Verdict::Fail(format!(
                    "no second registration socket in {} within {timeout:?}",
                    watched.display()
                )),
                Some(other) => {
                    let second_info = get_info(&other).await;
                    let first_serves = dial(&first.endpoint, CALL_TIMEOUT).await;
                    match (second_info, first_serves) {
                        (Err(e), _) => Verdict::Fail(format!("the second instance: {e}")),
                        (_, Err(e)) => Verdict::Fail(format!(
                            "the first instance's service, beside the second: {}",
                            root_cause(&e)
                        )),
                        (Ok(info), Ok(_)) if info.name != first.info.name => {
                            Verdict::Fail(format!(
                                "the second instance calls itself {:?}, the first {:?}",
                                info.name, first.info.name
                            ))
                        }
                        (Ok(info), Ok(_))
                            if !info.endpoint.is_empty()
                                && info.endpoint == first.info.endpoint =>
                        {
                            Verdict::Fail(format!("both instances serve at {:?}", info.endpoint))
                        }
                        (Ok(_), Ok(_)) => Verdict::Pass(format!(
                            "{} beside {}",
                            other.display(),
                            socket.display()
                        )),
                    }
                }
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
