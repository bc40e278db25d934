//! The device manager's allocation calls: GetPreferredAllocation and
//! Allocate, as the kubelet makes them when it admits a pod.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use nodeplugins_api::call;
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use tonic::transport::Channel;

use super::rule::Verdict;

/// A device plugin client.
pub(crate) type Client = dp::device_plugin_client::DevicePluginClient<Channel>;

/// An Allocate request, one container request per list of ids.
pub(crate) fn allocate_request(containers: &[&[&str]]) -> dp::AllocateRequest {
    dp::AllocateRequest {
        container_requests: containers
            .iter()
            .map(|ids| dp::ContainerAllocateRequest {
                devices_ids: ids.iter().map(|id| id.to_string()).collect(),
            })
            .collect(),
    }
}

/// GetPreferredAllocation for 2 of the healthy devices, one of them a
/// must-include. The device manager fails the pod's admission when the
/// call fails; what it answers is a hint (`devicesToAllocate` takes the
/// preferred ids that are available and fills the rest itself), so a poor
/// answer is a WARN.
pub(crate) async fn preferred_rule(
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
        Err(e) => return Verdict::Fail(format!("{e}: the kubelet refuses the pod")),
    };
    let Some(container) = answer.container_responses.first() else {
        return Verdict::Warn("no container response: the kubelet chooses alone".into());
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
        Some(problem) => Verdict::Warn(format!(
            "{problem}: the kubelet keeps what is available and chooses the rest"
        )),
        None => Verdict::Pass(format!("{chosen:?} from {} available", healthy.len())),
    }
}

/// Allocate as the device manager calls it: one container request, for a
/// device the plugin listed healthy. It reads the first container
/// response and fails the pod without one. Returns the verdict and the
/// answer.
pub(crate) async fn allocate_rule(
    mut client: Client,
    id: &str,
    timeout: Duration,
) -> (Verdict, Option<dp::AllocateResponse>) {
    let request = allocate_request(&[&[id]]);
    match call::unary(timeout, client.allocate(request)).await {
        Err(e) => (
            Verdict::Fail(format!("{e}: the kubelet refuses the pod")),
            None,
        ),
        Ok(answer) => {
            let verdict = match answer.container_responses.len() {
                0 => Verdict::Fail(
                    "no container response: the kubelet refuses the pod (\"no containers return in allocation response\")"
                        .into(),
                ),
                1 => Verdict::Pass(format!("one container response for {id:?}")),
                n => Verdict::Warn(format!(
                    "{n} container responses for one container request: the kubelet reads the first"
                )),
            };
            (verdict, Some(answer))
        }
    }
}

/// What the kubelet hands the container runtime from the first container
/// response: CDI devices by fully qualified name (and, with `cdi_dirs`,
/// named by a spec there), mounts and device nodes at absolute paths. The
/// kubelet checks none of it; the runtime refuses the container.
pub(crate) fn response_rule(answer: &dp::AllocateResponse, cdi_dirs: &[PathBuf]) -> Verdict {
    let Some(container) = answer.container_responses.first() else {
        return Verdict::Skip("no container response (device.allocate)".into());
    };
    // Read once the answer is in: a plugin writes its spec before it
    // answers.
    let specs = (!cdi_dirs.is_empty()).then(|| super::cdi_specs::CdiSpecs::load(cdi_dirs));
    let mut problems: Vec<String> = container
        .cdi_devices
        .iter()
        .filter_map(|d| match super::cdi_names::problem(&d.name) {
            Some(problem) => Some(problem),
            None => specs
                .as_ref()
                .filter(|specs| !specs.resolves(&d.name))
                .map(|_| format!("{:?} is named by no CDI spec in {cdi_dirs:?}", d.name)),
        })
        .collect();
    let paths = container
        .mounts
        .iter()
        .flat_map(|m| {
            [
                ("mount container path", &m.container_path),
                ("mount host path", &m.host_path),
            ]
        })
        .chain(container.devices.iter().flat_map(|d| {
            [
                ("device container path", &d.container_path),
                ("device host path", &d.host_path),
            ]
        }));
    for (what, path) in paths {
        if !path.starts_with('/') {
            problems.push(format!("{what} {path:?} is not absolute"));
        }
    }
    if problems.is_empty() {
        Verdict::Pass(format!(
            "{} CDI devices, {} mounts, {} device nodes, all well-formed",
            container.cdi_devices.len(),
            container.mounts.len(),
            container.devices.len()
        ))
    } else {
        Verdict::Fail(format!(
            "{}: the kubelet passes it to the container runtime, which refuses the container",
            problems.join("; ")
        ))
    }
}
