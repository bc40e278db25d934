//! The device plugin rules: its Register message, its device list, and
//! the calls the device manager makes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nodeplugins_api::call;
use nodeplugins_api::constants::device_plugin;
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::transport::{dial, root_cause};

use super::deadlines::Deadlines;
use super::device_allocation::{
    Client, allocate_request, allocate_rule, preferred_rule, response_rule,
};
use super::device_list::{health_rule, ids_rule, stays_open_rule, topology_rule};
use super::rule::{Report, Verdict};
use super::rules::*;

/// An id no plugin lists.
const UNKNOWN_ID: &str = "nodeplugins-conformance-no-such-device";
/// How many Allocate calls run at once.
const CONCURRENT: usize = 8;

/// Every device plugin rule that needs no restart, against the service at
/// `endpoint`. `registered` is the Register request, when it came through
/// the tool's `kubelet.sock`; the CDI devices an Allocate answer names must
/// resolve to specs in `cdi_dirs`, when there are any.
#[allow(clippy::too_many_lines)] // One rule after the other, in order.
pub(crate) async fn rules(
    report: &mut Report,
    endpoint: &Path,
    registered: Option<&dp::RegisterRequest>,
    cdi_dirs: &[PathBuf],
    deadlines: Deadlines,
) {
    let all = DEVICE_SERVICE_RULES;
    let timeout = deadlines.device_call();
    let channel = match dial(endpoint, deadlines.dial()).await {
        Ok(channel) => channel,
        Err(e) => {
            let why = format!("{}: {}", endpoint.display(), root_cause(&e));
            for rule in all {
                report.record(rule, Verdict::Fail(why.clone()), Duration::ZERO);
            }
            return;
        }
    };
    let mut client = Client::new(channel);

    let mut options = None;
    report
        .run_needed(&DP_OPTIONS, async {
            match call::unary(
                timeout,
                client.clone().get_device_plugin_options(dp::Empty {}),
            )
            .await
            {
                Err(e) => Verdict::Fail(e.to_string()),
                Ok(answer) => {
                    let seen = format!(
                        "pre_start_required {}, get_preferred_allocation_available {}",
                        answer.pre_start_required, answer.get_preferred_allocation_available
                    );
                    let sent = registered.and_then(|r| r.options);
                    let agrees = sent.is_none_or(|sent| sent == answer);
                    options = Some(answer);
                    // The kubelet reads only this answer (PluginConnected);
                    // Register's options mislead only other readers.
                    match agrees {
                        true => Verdict::Pass(seen),
                        false => Verdict::Warn(format!(
                            "{seen}; Register said {sent:?} (the kubelet uses this answer)"
                        )),
                    }
                }
            }
        })
        .await;
    let options = options.unwrap_or_default();

    let mut first = None;
    // The stream stays open for the rest of the rules, as the kubelet's does.
    let mut stream = None;
    report
        .run_needed(&DP_FIRST_LIST, async {
            let start = tokio::time::Instant::now();
            let opened = async {
                let mut s = client.list_and_watch(dp::Empty {}).await?.into_inner();
                let list = s.message().await?;
                Ok::<_, tonic::Status>((s, list))
            };
            match tokio::time::timeout(timeout, opened).await {
                Err(_) => Verdict::Fail(format!("no device list within {timeout:?}")),
                Ok(Err(s)) => Verdict::Fail(format!("{:?}: {}", s.code(), s.message())),
                Ok(Ok((_, None))) => {
                    Verdict::Fail("the stream ended before the first device list".into())
                }
                Ok(Ok((s, Some(list)))) => {
                    let seen =
                        format!("{} devices after {:?}", list.devices.len(), start.elapsed());
                    first = Some(list.devices);
                    stream = Some(s);
                    Verdict::Pass(seen)
                }
            }
        })
        .await;
    let Some(devices) = first else {
        report.skip_all(&all[2..], "no device list");
        return;
    };
    report.run(&DP_IDS, async { ids_rule(&devices) }).await;
    report
        .run(&DP_HEALTH, async { health_rule(&devices) })
        .await;
    report
        .run(&DP_TOPOLOGY, async { topology_rule(&devices) })
        .await;
    let healthy: Vec<String> = devices
        .iter()
        .filter(|d| d.health == device_plugin::HEALTHY && !d.id.is_empty())
        .map(|d| d.id.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    report
        .run(
            &DP_PREFERRED,
            preferred_rule(client.clone(), &options, &healthy, timeout),
        )
        .await;
    let ids = healthy;
    if ids.is_empty() {
        report.skip_all(
            &[
                &DP_ALLOCATE,
                &DP_ALLOCATE_RESPONSE,
                &DP_ALLOCATE_UNKNOWN,
                &DP_ALLOCATE_CONCURRENT,
                &DP_PRE_START,
            ],
            "the plugin lists no healthy device (the kubelet allocates only those)",
        );
    } else {
        allocation_rules(report, &client, &ids, &options, cdi_dirs, deadlines).await;
    }
    if let Some(stream) = &mut stream {
        report
            .run(&DP_STAYS_OPEN, async { stays_open_rule(stream) })
            .await;
    }
}

/// Allocate, as the kubelet calls it and as others may, and
/// PreStartContainer; `ids` are the healthy devices.
async fn allocation_rules(
    report: &mut Report,
    client: &Client,
    ids: &[String],
    options: &dp::DevicePluginOptions,
    cdi_dirs: &[PathBuf],
    deadlines: Deadlines,
) {
    let timeout = deadlines.device_call();
    let mut allocated = None;
    report
        .run_needed(&DP_ALLOCATE, async {
            let (verdict, answer) = allocate_rule(client.clone(), &ids[0], timeout).await;
            allocated = answer;
            verdict
        })
        .await;
    report
        .run(&DP_ALLOCATE_RESPONSE, async {
            match &allocated {
                Some(answer) => response_rule(answer, cdi_dirs),
                None => Verdict::Skip("Allocate did not answer (device.allocate)".into()),
            }
        })
        .await;
    report
        .run(&DP_ALLOCATE_UNKNOWN, async {
            let request = allocate_request(&[&[UNKNOWN_ID]]);
            // The kubelet sends only ids the plugin listed healthy, so
            // neither answer harms it: a refusal is right, anything else
            // hides a broken caller from the plugin's author.
            match call::unary(timeout, client.clone().allocate(request)).await {
                Err(call::CallError::Status(status)) => Verdict::Pass(format!(
                    "refused: {:?}: {}",
                    status.code(),
                    status.message()
                )),
                Err(e) => Verdict::Warn(format!("did not refuse {UNKNOWN_ID:?}: {e}")),
                Ok(_) => Verdict::Warn(format!("allocated {UNKNOWN_ID:?}, which it never listed")),
            }
        })
        .await;
    report
        .run(&DP_ALLOCATE_CONCURRENT, async {
            let calls =
                (0..CONCURRENT).map(|i| {
                    let mut client = client.clone();
                    let id = ids[i % ids.len()].clone();
                    async move {
                        call::unary(timeout, client.allocate(allocate_request(&[&[&id]]))).await
                    }
                });
            let answers = futures::future::join_all(calls).await;
            let failed: Vec<String> = answers
                .into_iter()
                .filter_map(|a| a.err().map(|e| e.to_string()))
                .collect();
            // The kubelet admits pods one at a time, so it never sends
            // these at once: failing them is a WARN.
            match failed.first() {
                None => Verdict::Pass(format!("{CONCURRENT} calls answered")),
                Some(first) => {
                    Verdict::Warn(format!("{} of {CONCURRENT} failed: {first}", failed.len()))
                }
            }
        })
        .await;
    report
        .run(&DP_PRE_START, async {
            if !options.pre_start_required {
                return Verdict::Skip("the plugin does not ask for PreStartContainer".into());
            }
            let request = dp::PreStartContainerRequest {
                devices_ids: vec![ids[0].clone()],
            };
            let mut client = client.clone();
            match call::unary(deadlines.pre_start(), client.pre_start_container(request)).await {
                Ok(_) => Verdict::Pass(format!("answered for {:?}", ids[0])),
                Err(e) => Verdict::Fail(format!("{e}: the kubelet does not start the container")),
            }
        })
        .await;
}
