//! The DRA driver rules: the services it lists, NodePrepareResources and
//! NodeUnprepareResources as the kubelet's DRA manager calls them, device
//! health, and a claim unprepared after the driver restarts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use nodeplugins_api::call::{self, CallError};
use nodeplugins_api::call_layer::CallLayer;
use nodeplugins_api::dra::v1;
use nodeplugins_api::dra_client::{self, DraService, choose_health_service, watch_health};
use nodeplugins_api::dra_health::v1 as health_v1;
use nodeplugins_api::pluginregistration::v1::PluginInfo;
use nodeplugins_api::transport::{dial, root_cause};
use tonic::transport::Channel;

use super::claims::TestClaim;
use super::deadlines::Deadlines;
use super::dra_answers::{by_uid, cdi_ids, per_claim_errors, same_devices, unprepared_by_uid};
use super::dra_client::DraClient;
use super::rule::{Report, Verdict};
use super::rules::*;

/// How many batches run at once.
const CONCURRENT: usize = 4;

/// A connection to the driver's service at `endpoint`, or why not.
pub(crate) async fn connect(
    info: &PluginInfo,
    endpoint: &Path,
    deadlines: Deadlines,
) -> Result<DraClient, String> {
    let channel = dial(endpoint, deadlines.dial())
        .await
        .map_err(|e| format!("{}: {}", endpoint.display(), root_cause(&e)))?;
    DraClient::new(info, channel).ok_or_else(|| "no DRAPlugin service listed".to_string())
}

/// Every DRA rule that needs no restart. Returns the client and the claims
/// left prepared for the restart rule.
pub(crate) async fn rules(
    report: &mut Report,
    info: &PluginInfo,
    endpoint: &Path,
    claims: &[TestClaim],
    cdi_dirs: &[PathBuf],
    deadlines: Deadlines,
) {
    let timeout = deadlines.dra_call();
    let channel = match dial(endpoint, deadlines.dial()).await {
        Ok(channel) => channel,
        Err(e) => {
            let why = format!("{}: {}", endpoint.display(), root_cause(&e));
            report.record(&DRA_SERVICES, Verdict::Fail(why), Duration::ZERO);
            return;
        }
    };
    report
        .run_needed(&DRA_SERVICES, services_rule(info, channel.clone(), timeout))
        .await;
    let unserved = report
        .outcomes
        .last()
        .is_some_and(|o| matches!(o.verdict, Verdict::Fail(_)));
    match DraClient::new(info, channel.clone()) {
        None => report.skip_all(DRA_CLAIM_RULES, "no DRAPlugin service listed"),
        Some(_) if unserved => report.skip_all(
            DRA_CLAIM_RULES,
            "not run: dra.services failed before it (every call the kubelet makes fails)",
        ),
        Some(client) => claim_rules(report, &client, claims, cdi_dirs, timeout).await,
    }
    report
        .run(&DRA_HEALTH, health_rule(info, channel, timeout))
        .await;
}

/// The rules on claims: prepare and unprepare as the DRA manager calls
/// them.
#[allow(clippy::too_many_lines)] // One rule after the other, in order.
async fn claim_rules(
    report: &mut Report,
    client: &DraClient,
    claims: &[TestClaim],
    cdi_dirs: &[PathBuf],
    timeout: Duration,
) {
    let good: Vec<TestClaim> = claims.iter().filter(|c| !c.fails).cloned().collect();
    let mut first = None;
    report
        .run_needed(&DRA_PREPARE, async {
            match client.prepare(&good, timeout).await {
                Err(e) => Verdict::Fail(e),
                Ok(answer) => {
                    let verdict = by_uid(&good, &answer);
                    first = Some(answer);
                    verdict
                }
            }
        })
        .await;
    report
        .run(&DRA_CDI_IDS, async {
            match &first {
                Some(answer) => cdi_ids(answer, cdi_dirs),
                None => Verdict::Skip("the first prepare failed (dra.prepare.by-uid)".into()),
            }
        })
        .await;
    report
        .run(&DRA_PER_CLAIM_ERRORS, async {
            if claims.iter().all(|c| !c.fails) {
                return Verdict::Skip(
                    "no claim expected to fail: mark one `\"fails\": true` in --claims".into(),
                );
            }
            let answer = client.prepare(claims, timeout).await;
            per_claim_errors(claims, answer)
        })
        .await;
    report
        .run(&DRA_PREPARE_AGAIN, async {
            let Some(first) = &first else {
                return Verdict::Skip("the first prepare failed".into());
            };
            match client.prepare(&good, timeout).await {
                Err(e) => Verdict::Fail(e),
                Ok(again) => same_devices(&good, first, &again),
            }
        })
        .await;
    report
        .run(&DRA_UNPREPARE_UNKNOWN, async {
            let unknown = [TestClaim::unknown()];
            match client.unprepare(&unknown, timeout).await {
                Err(e) => Verdict::Fail(e),
                Ok(answer) => match answer.get(&unknown[0].uid) {
                    Some(Ok(())) => Verdict::Pass("unprepared a claim never prepared".into()),
                    Some(Err(e)) => Verdict::Fail(format!("the claim's error: {e}")),
                    None => Verdict::Fail("the response does not name the claim".into()),
                },
            }
        })
        .await;
    report
        .run(&DRA_UNPREPARE_BY_UID, async {
            match client.unprepare(&good, timeout).await {
                Err(e) => Verdict::Fail(e),
                Ok(answer) => {
                    let answered: Vec<String> = answer.keys().cloned().collect();
                    unprepared_by_uid(&good, &answered)
                }
            }
        })
        .await;
    report
        .run(&DRA_UNPREPARE_AGAIN, async {
            for round in ["first", "second"] {
                match client.unprepare(&good, timeout).await {
                    Err(e) => return Verdict::Fail(format!("{round} unprepare: {e}")),
                    Ok(answer) => {
                        if let Some((uid, error)) = answer
                            .iter()
                            .find_map(|(uid, r)| r.as_ref().err().map(|e| (uid.clone(), e.clone())))
                        {
                            return Verdict::Fail(format!("{round} unprepare of {uid}: {error}"));
                        }
                    }
                }
            }
            Verdict::Pass(format!("{} claims unprepared twice", good.len()))
        })
        .await;
    report
        .run(&DRA_CONCURRENT, async {
            let batches = (0..CONCURRENT).map(|i| {
                let client = client.clone();
                let batch: Vec<TestClaim> =
                    good.iter().map(|c| c.variant(&format!("c{i}"))).collect();
                async move {
                    let prepared = client.prepare(&batch, timeout).await;
                    let _ = client.unprepare(&batch, timeout).await;
                    prepared.and_then(|answer| {
                        let missing = batch
                            .iter()
                            .filter(|c| !matches!(answer.get(&c.uid), Some(Ok(_))))
                            .count();
                        if missing == 0 {
                            Ok(())
                        } else {
                            Err(format!("{missing} claims not prepared"))
                        }
                    })
                }
            });
            let failed: Vec<String> = futures::future::join_all(batches)
                .await
                .into_iter()
                .filter_map(Result::err)
                .collect();
            match failed.first() {
                None => Verdict::Pass(format!(
                    "{CONCURRENT} batches of {} claims answered",
                    good.len()
                )),
                // The kubelet tries a failed prepare again: its pods start
                // late, not never.
                Some(first) => Verdict::Warn(format!(
                    "{} of {CONCURRENT} batches failed: {first} (the kubelet prepares those pods again later)",
                    failed.len()
                )),
            }
        })
        .await;
}

async fn services_rule(info: &PluginInfo, channel: Channel, timeout: Duration) -> Verdict {
    let listed = |name: &str| info.supported_versions.iter().any(|v| v == name);
    // The kubelet calls this one alone.
    let Ok(chosen) = dra_client::choose_service(&info.supported_versions) else {
        return Verdict::Skip("no DRAPlugin service listed (registration.versions)".into());
    };
    let mut served = Vec::new();
    let mut chosen_problem = None;
    let mut other_problems = Vec::new();
    for service in [DraService::V1, DraService::V1beta1] {
        if !listed(service.as_str()) {
            continue;
        }
        let policy = CallLayer::new("DRA driver", service).deadline(timeout);
        let client = dra_client::DraClient::new(policy.service(channel.clone()), service);
        let request = v1::NodeUnprepareResourcesRequest::default();
        match client.unprepare(request).await {
            Ok(_) => served.push(service.as_str()),
            Err(e) if service == chosen => chosen_problem = Some(format!("{service}: {e}")),
            Err(e) => other_problems.push(format!("{service}: {e}")),
        }
    }
    match (chosen_problem, other_problems.is_empty()) {
        (Some(problem), _) => Verdict::Fail(format!(
            "{problem}: the kubelet uses {chosen}, the first listed it knows, and every prepare fails"
        )),
        (None, false) => Verdict::Warn(format!(
            "{} (the kubelet uses {chosen}, which answers)",
            other_problems.join("; ")
        )),
        (None, true) => Verdict::Pass(format!("{served:?} answer; the kubelet uses {chosen}")),
    }
}

async fn health_rule(info: &PluginInfo, channel: Channel, timeout: Duration) -> Verdict {
    let Some(service) = choose_health_service(&info.supported_versions) else {
        return Verdict::Skip("the driver lists no DRAResourceHealth service".into());
    };
    let first = call::within(timeout, async {
        let mut stream = watch_health(channel, service).await?;
        stream.next().await.transpose()
    })
    .await;
    // The kubelet sets no deadline on the first message and opens an ended
    // stream again: a driver that is silent until a change works with it,
    // though nothing shows its devices' health until then.
    let message = match first {
        Err(CallError::Timeout(_)) => {
            return Verdict::Warn(format!(
                "no first message within {timeout:?}: the devices' health is unknown until one comes"
            ));
        }
        Err(e) => return Verdict::Fail(e.to_string()),
        Ok(None) => {
            return Verdict::Warn(
                "the stream ended before its first message (the kubelet opens it again)".into(),
            );
        }
        Ok(Some(message)) => message,
    };
    for device in &message.devices {
        let named = device
            .device
            .as_ref()
            .is_some_and(|d| !d.pool_name.is_empty() && !d.device_name.is_empty());
        if !named {
            return Verdict::Fail(format!("a device without pool and device name: {device:?}"));
        }
        if health_v1::HealthStatus::try_from(device.health).is_err() {
            return Verdict::Fail(format!(
                "unknown health value {} for {:?}",
                device.health, device.device
            ));
        }
    }
    Verdict::Pass(format!("first message: {} devices", message.devices.len()))
}

/// Prepares the good claims before a restart.
pub(crate) async fn prepare_before_restart(
    client: &DraClient,
    claims: &[TestClaim],
    timeout: Duration,
) -> Result<(), String> {
    let good: Vec<TestClaim> = claims.iter().filter(|c| !c.fails).cloned().collect();
    let answer = client.prepare(&good, timeout).await?;
    match answer
        .into_iter()
        .find_map(|(uid, r)| r.err().map(|e| (uid, e)))
    {
        Some((uid, e)) => Err(format!("claim {uid}: {e}")),
        None => Ok(()),
    }
}

/// The restart rule: the claims prepared before the restart
/// (`prepared`), unprepared through the new instance (`after`; `None` when
/// it did not come back, which another rule reports).
pub(crate) async fn restart_rule(
    report: &mut Report,
    prepared: Result<(), String>,
    after: Result<Option<DraClient>, String>,
    claims: &[TestClaim],
    timeout: Duration,
) {
    let good: Vec<TestClaim> = claims.iter().filter(|c| !c.fails).cloned().collect();
    report
        .run(&DRA_RESTART, async {
            if let Err(e) = prepared {
                return Verdict::Skip(format!("prepare before the restart failed: {e}"));
            }
            let client = match after {
                Ok(Some(client)) => client,
                Ok(None) => {
                    return Verdict::Skip(
                        "the driver did not come back (registration.socket-back-on-restart)".into(),
                    );
                }
                Err(e) => return Verdict::Fail(format!("after the restart: {e}")),
            };
            match client.unprepare(&good, timeout).await {
                Err(e) => Verdict::Fail(e),
                Ok(answer) => match answer
                    .iter()
                    .find_map(|(uid, r)| r.as_ref().err().map(|e| (uid, e)))
                {
                    Some((uid, e)) => Verdict::Fail(format!("claim {uid}: {e}")),
                    None => Verdict::Pass(format!(
                        "{} claims prepared before the restart unprepared after it",
                        good.len()
                    )),
                },
            }
        })
        .await;
}
