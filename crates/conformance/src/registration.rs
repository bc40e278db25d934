//! The registration rules every plugin type shares: the registration
//! socket as the kubelet's plugin watcher meets it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeplugins_api::pluginregistration::v1::RegistrationStatusResponse;

use nodeplugins_api::call;
use nodeplugins_api::constants::plugin_type;
use nodeplugins_api::pluginregistration::v1::registration_client::RegistrationClient;
use nodeplugins_api::pluginregistration::v1::{PluginInfo, RegistrationStatus};
use nodeplugins_api::transport::{dial, root_cause};

use super::deadlines::Deadlines;
use super::rule::{Report, Verdict};
use super::rules::*;
use crate::check::{check_name, check_versions, get_info_within, is_socket};

/// The plugin manager's first retry of a refused registration: its
/// reconciler runs every second, and the first backoff is 500 ms.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// How often the rejected plugin is asked again until then.
const RETRY_POLL: Duration = Duration::from_millis(50);

/// GetInfo through `socket` with the kubelet's deadlines.
pub(crate) async fn get_info(socket: &Path, deadlines: Deadlines) -> Result<PluginInfo, String> {
    get_info_within(socket, deadlines.dial(), deadlines.get_info()).await
}

/// What the registration rules found: the plugin's info and the socket its
/// service is on, when the type's rules can go on.
pub(crate) struct Registered {
    pub(crate) info: PluginInfo,
    pub(crate) endpoint: PathBuf,
}

/// Runs the registration rules against `socket`.
pub(crate) async fn rules(
    report: &mut Report,
    socket: &Path,
    deadlines: Deadlines,
) -> Option<Registered> {
    let mut info = None;
    report
        .run_needed(&REG_GET_INFO, async {
            match get_info(socket, deadlines).await {
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
        report.skip_all(&REGISTRATION_RULES[1..], "GetInfo did not answer");
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
        report.skip_all(&REGISTRATION_RULES[2..], "no handler for the type");
        return None;
    }
    report.run(&REG_NAME, async { name_rule(&info) }).await;
    report
        .run(&REG_VERSIONS, async {
            Verdict::from_result(check_versions(&info))
        })
        .await;
    let mut endpoint = None;
    report
        .run_needed(&REG_ENDPOINT, async {
            match check_endpoint(socket, &info.endpoint, deadlines).await {
                Ok((path, seen)) => {
                    endpoint = Some(path);
                    Verdict::Pass(seen)
                }
                Err(seen) => Verdict::Fail(seen),
            }
        })
        .await;
    report
        .run(&REG_NOTIFY, async {
            match notify(socket, true, deadlines).await {
                Ok(_) => Verdict::Pass("NotifyRegistrationStatus(registered=true) answered".into()),
                Err(e) => Verdict::Fail(format!(
                    "{e}: the kubelet deregisters the plugin and registers it again, over and over"
                )),
            }
        })
        .await;
    report
        .run(&REG_NOTIFY_FALSE, survives_rejection(socket, deadlines))
        .await;
    Some(Registered {
        endpoint: endpoint?,
        info,
    })
}

/// The name rule of the plugin's type. The kubelet checks a device
/// plugin's resource name itself; a CSI driver's name is checked by the
/// API server when the kubelet writes the node's CSINode, and a failed
/// write fails the registration; nothing in the kubelet checks a DRA
/// driver's, but no ResourceSlice or DeviceClass can name a driver whose
/// name is not a DNS subdomain.
fn name_rule(info: &PluginInfo) -> Verdict {
    match check_name(info) {
        Ok(seen) => Verdict::Pass(seen),
        Err(seen) if info.r#type == plugin_type::DRA => Verdict::Warn(format!(
            "{seen}: the kubelet registers it, but the API refuses a ResourceSlice or a DeviceClass naming it"
        )),
        Err(seen) => Verdict::Fail(seen),
    }
}

async fn check_endpoint(
    socket: &Path,
    endpoint: &str,
    deadlines: Deadlines,
) -> Result<(PathBuf, String), String> {
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
    dial(&path, deadlines.dial())
        .await
        .map_err(|e| format!("{}: {}", path.display(), root_cause(&e)))?;
    Ok((
        path.clone(),
        format!("{} accepts connections", path.display()),
    ))
}

/// Tells the plugin at `socket` whether it is registered, as the kubelet
/// does after each attempt.
async fn notify(
    socket: &Path,
    registered: bool,
    deadlines: Deadlines,
) -> Result<RegistrationStatusResponse, String> {
    let channel = dial(socket, deadlines.dial())
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
    call::unary(
        deadlines.notify(),
        client.notify_registration_status(status),
    )
    .await
    .map_err(|e| format!("NotifyRegistrationStatus: {e}"))
}

/// Tells the plugin its registration failed, and asks it again until the
/// plugin manager's first retry would; then tells it it is registered, as
/// the kubelet does when a retry works. A plugin that stops answering is a
/// WARN: the kubelet keeps retrying with backoff, and a plugin may exit
/// on rejection by design (node-driver-registrar does, for a restart by
/// its pod's policy).
async fn survives_rejection(socket: &Path, deadlines: Deadlines) -> Verdict {
    // Its answer does not matter (the kubelet only logs an error, and the
    // Go helper answers one on purpose); what it does next does.
    let answered = match notify(socket, false, deadlines).await {
        Ok(_) => "answered".to_string(),
        Err(seen) => format!("answered {seen}"),
    };
    let start = tokio::time::Instant::now();
    let verdict = loop {
        if let Err(error) = get_info(socket, deadlines).await {
            break Verdict::Warn(format!(
                "{:?} after the rejection ({answered}): {error}; the kubelet retries with backoff and finds no plugin",
                start.elapsed()
            ));
        }
        if start.elapsed() >= FIRST_RETRY {
            break Verdict::Pass(format!(
                "the rejection {answered}; GetInfo still answers {FIRST_RETRY:?} later, when the kubelet retries"
            ));
        }
        tokio::time::sleep(RETRY_POLL).await;
    };
    let _ = notify(socket, true, deadlines).await;
    verdict
}
