//! The device plugin rules: its Register message, its device list, and
//! the calls the device manager makes.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use nodeplugins::device::resource_name::is_extended_resource_name;
use nodeplugins_api::call;
use nodeplugins_api::constants::device_plugin;
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::transport::{dial, root_cause};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use super::kubelet_socket::KubeletSocket;
use super::rule::{Report, Verdict};
use super::rules::*;

type Client = dp::device_plugin_client::DevicePluginClient<Channel>;

/// An id no plugin lists.
const UNKNOWN_ID: &str = "nodeplugins-conformance-no-such-device";
/// How many Allocate calls run at once.
const CONCURRENT: usize = 8;

/// The Register rule for a plugin that registered on the tool's
/// `kubelet.sock`; returns its service socket.
pub(crate) fn register_rule(
    report: &mut Report,
    dir: &Path,
    request: &dp::RegisterRequest,
) -> Option<std::path::PathBuf> {
    let endpoint = &request.endpoint;
    let mut problems = Vec::new();
    if request.version != device_plugin::VERSION {
        problems.push(format!(
            "version {:?} is not {}",
            request.version,
            device_plugin::VERSION
        ));
    }
    if endpoint.is_empty() || endpoint.contains('/') {
        problems.push(format!(
            "endpoint {endpoint:?} is not a file name in {}",
            dir.display()
        ));
    }
    if !is_extended_resource_name(&request.resource_name) {
        problems.push(format!(
            "{:?} is not an extended resource name",
            request.resource_name
        ));
    }
    report.plugin = request.resource_name.clone();
    report.plugin_type = "DevicePlugin".into();
    let verdict = if problems.is_empty() {
        Verdict::Pass(format!(
            "{} at {endpoint:?}, version {}",
            request.resource_name, request.version
        ))
    } else {
        Verdict::Fail(problems.join("; "))
    };
    report.record(&DP_REGISTER, verdict, Duration::ZERO);
    (!endpoint.is_empty() && !endpoint.contains('/')).then(|| dir.join(endpoint))
}

/// Every device plugin rule that needs no restart, against the service at
/// `endpoint`. `registered` is the Register request, when it came through
/// the tool's `kubelet.sock`.
pub(crate) async fn rules(
    report: &mut Report,
    endpoint: &Path,
    registered: Option<&dp::RegisterRequest>,
    timeout: Duration,
) {
    let all = DEVICE_SERVICE_RULES;
    let channel = match dial(endpoint, timeout).await {
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
        .run(&DP_OPTIONS, async {
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
        .run(&DP_FIRST_LIST, async {
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
    let ids: Vec<String> = unique_ids(&devices);
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
    if ids.is_empty() {
        report.skip_all(
            &[
                &DP_ALLOCATE,
                &DP_ALLOCATE_UNKNOWN,
                &DP_ALLOCATE_CONCURRENT,
                &DP_PRE_START,
            ],
            "the plugin lists no device",
        );
        drop(stream);
        return;
    }
    report
        .run(&DP_ALLOCATE, allocate_rule(client.clone(), &ids, timeout))
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
            match call::unary(timeout, client.pre_start_container(request)).await {
                Ok(_) => Verdict::Pass(format!("answered for {:?}", ids[0])),
                Err(e) => Verdict::Fail(e.to_string()),
            }
        })
        .await;
    drop(stream);
}

fn unique_ids(devices: &[dp::Device]) -> Vec<String> {
    devices
        .iter()
        .filter(|d| !d.id.is_empty())
        .map(|d| d.id.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

fn ids_rule(devices: &[dp::Device]) -> Verdict {
    let mut seen = BTreeSet::new();
    let repeated: BTreeSet<&str> = devices
        .iter()
        .filter(|d| !seen.insert(d.id.as_str()))
        .map(|d| d.id.as_str())
        .collect();
    let empty = devices.iter().filter(|d| d.id.is_empty()).count();
    if !repeated.is_empty() {
        Verdict::Fail(format!("ids listed more than once: {repeated:?}"))
    } else if empty > 0 {
        Verdict::Fail(format!("{empty} devices without an id"))
    } else {
        Verdict::Pass(format!("{} distinct ids", devices.len()))
    }
}

fn health_rule(devices: &[dp::Device]) -> Verdict {
    let bad: Vec<String> = devices
        .iter()
        .filter(|d| d.health != device_plugin::HEALTHY && d.health != device_plugin::UNHEALTHY)
        .map(|d| format!("{}={:?}", d.id, d.health))
        .collect();
    Verdict::check(
        bad.is_empty(),
        if bad.is_empty() {
            "every health is Healthy or Unhealthy".to_string()
        } else {
            format!("other health values: {}", bad.join(", "))
        },
    )
}

fn topology_rule(devices: &[dp::Device]) -> Verdict {
    let mut with = 0;
    for device in devices {
        let Some(topology) = &device.topology else {
            continue;
        };
        with += 1;
        let ids: Vec<i64> = topology.nodes.iter().map(|n| n.id).collect();
        let unique: BTreeSet<i64> = ids.iter().copied().collect();
        if ids.iter().any(|id| *id < 0) || unique.len() != ids.len() {
            return Verdict::Fail(format!(
                "device {:?} has NUMA nodes {ids:?}: ids must be non-negative and unique",
                device.id
            ));
        }
    }
    if with == 0 {
        Verdict::Pass("no device reports a topology".into())
    } else {
        Verdict::Pass(format!("{with} devices with well-formed NUMA nodes"))
    }
}

fn allocate_request(containers: &[&[&str]]) -> dp::AllocateRequest {
    dp::AllocateRequest {
        container_requests: containers
            .iter()
            .map(|ids| dp::ContainerAllocateRequest {
                devices_ids: ids.iter().map(|id| id.to_string()).collect(),
            })
            .collect(),
    }
}

async fn preferred_rule(
    mut client: Client,
    options: &dp::DevicePluginOptions,
    healthy: &[String],
    timeout: Duration,
) -> Verdict {
    if !options.get_preferred_allocation_available {
        return Verdict::Skip("the plugin does not offer GetPreferredAllocation".into());
    }
    if healthy.len() < 2 {
        return Verdict::Skip("fewer than 2 healthy devices to choose from".into());
    }
    let must = healthy[healthy.len() - 1].clone();
    let size = 2;
    let request = dp::PreferredAllocationRequest {
        container_requests: vec![dp::ContainerPreferredAllocationRequest {
            available_device_i_ds: healthy.to_vec(),
            must_include_device_i_ds: vec![must.clone()],
            allocation_size: size,
        }],
    };
    let answer = match call::unary(timeout, client.get_preferred_allocation(request)).await {
        Ok(answer) => answer,
        Err(e) => return Verdict::Fail(e.to_string()),
    };
    let [container] = answer.container_responses.as_slice() else {
        return Verdict::Fail(format!(
            "{} container responses for 1 request",
            answer.container_responses.len()
        ));
    };
    let chosen = &container.device_i_ds;
    let distinct: BTreeSet<&String> = chosen.iter().collect();
    let problem = if chosen.len() != size as usize || distinct.len() != chosen.len() {
        Some(format!("{chosen:?} is not {size} distinct ids"))
    } else if let Some(other) = chosen.iter().find(|id| !healthy.contains(id)) {
        Some(format!("{other:?} was not available"))
    } else if !chosen.contains(&must) {
        Some(format!("{chosen:?} lacks the must-include {must:?}"))
    } else {
        None
    };
    match problem {
        Some(problem) => Verdict::Fail(problem),
        None => Verdict::Pass(format!("{chosen:?} from {} available", healthy.len())),
    }
}

async fn allocate_rule(mut client: Client, ids: &[String], timeout: Duration) -> Verdict {
    let second = &ids[ids.len() - 1];
    let request = allocate_request(&[&[ids[0].as_str()], &[second.as_str()]]);
    match call::unary(timeout, client.allocate(request)).await {
        Err(e) => Verdict::Fail(e.to_string()),
        Ok(answer) => Verdict::check(
            answer.container_responses.len() == 2,
            format!(
                "{} container responses for 2 container requests",
                answer.container_responses.len()
            ),
        ),
    }
}

/// The kubelet restart rule: `kubelet.sock` made again, and the plugin's
/// next Register awaited.
pub(crate) async fn reregister_rule(
    report: &mut Report,
    socket: &mut KubeletSocket,
    requests: &mut mpsc::UnboundedReceiver<dp::RegisterRequest>,
    timeout: Duration,
) {
    report
        .run(&DP_REREGISTER, async {
            while requests.try_recv().is_ok() {}
            let start = tokio::time::Instant::now();
            if let Err(e) = socket.restart().await {
                return Verdict::Skip(e);
            }
            match tokio::time::timeout(timeout, requests.recv()).await {
                Ok(Some(request)) => Verdict::Pass(format!(
                    "{} registered again after {:?}",
                    request.resource_name,
                    start.elapsed()
                )),
                _ => Verdict::Fail(format!(
                    "no Register within {timeout:?} of kubelet.sock made again"
                )),
            }
        })
        .await;
}
