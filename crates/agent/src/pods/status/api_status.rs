//! A running pod's status as the kubelet writes it to the API: its phase,
//! its conditions (`PodReadyToStartContainers`, `Initialized`,
//! `ContainersReady`, `Ready`, `PodScheduled`, each with the time it last
//! changed), its addresses (the node's: pods run in the host's network),
//! its start time, and one status per container (init containers apart) with its runtime
//! id, state, last state, restart count, image, readiness and the health
//! of what it holds (`resource_health`). A container is started while it
//! runs and its startup probe succeeded, ready once started and its
//! readiness probe succeeded (at once for a probe it does not have). The
//! pod is Ready once its containers are and the condition of each of its
//! readiness gates (written by the gate's owner) is `True`.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use nodeplugins_api::quantity;
use serde_json::{Value, json};

use crate::pods::admit::container::ContainerKind;
use crate::pods::admit::spec::containers;
use crate::pods::run::pod_sync::{ApiPhase, ContainerView, SyncPlan};
use crate::runtime::{ContainerState, ContainerStatus};
use crate::volumes::recursive_read_only;

/// What the status is made from besides the plan.
pub(crate) struct StatusInputs<'a> {
    /// The runtime's name, the scheme of container ids (`containerd`).
    pub(crate) runtime: &'a str,
    /// Whether it makes mounts read-only all the way down.
    pub(crate) recursive_read_only: bool,
    /// The node's address, the pod's too.
    pub(crate) node_ip: Option<&'a str>,
    /// When the pod was first seen running here.
    pub(crate) start_time: SystemTime,
    /// The pod's `metadata.generation`.
    pub(crate) generation: Option<i64>,
    /// Each condition as last written: type → (status, time).
    pub(crate) conditions: &'a BTreeMap<String, (bool, SystemTime)>,
    /// The pod, whose containers' images and resources the status names.
    pub(crate) pod: &'a Pod,
    /// Each app container's `allocatedResourcesStatus`, where it has one.
    pub(crate) resource_health: &'a BTreeMap<String, Value>,
    /// The kubelet stopped the pod for good: (reason, message), shown as
    /// its `DisruptionTarget` condition, and as the pod's once it failed.
    pub(crate) disruption: Option<(&'a str, &'a str)>,
    pub(crate) now: SystemTime,
}

/// The reason of the `DisruptionTarget` condition of a pod the kubelet
/// stopped itself.
pub(crate) const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// The status to write, with each condition's (status, time), to keep for
/// the next.
pub(crate) fn api_status(
    plan: &SyncPlan,
    inputs: &StatusInputs<'_>,
) -> (Value, BTreeMap<String, (bool, SystemTime)>) {
    let terminal = plan.phase.is_terminal();
    let unready: Vec<&str> = plan
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::Init && !c.ready())
        .map(|c| c.name.as_str())
        .collect();
    let uninitialized: Vec<&str> = plan
        .containers
        .iter()
        .filter(|c| c.kind != ContainerKind::App)
        .filter(|c| match c.kind {
            ContainerKind::Sidecar => !c.started(),
            _ => !c
                .current
                .as_ref()
                .is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == Some(0)),
        })
        .map(|c| c.name.as_str())
        .collect();
    let sandbox_ready = plan.sandbox.is_none() && !terminal;
    let mut times = BTreeMap::new();
    let mut condition =
        |kind: &str, status: bool, reason: Option<&str>, message: Option<String>| {
            let since = match inputs.conditions.get(kind) {
                Some((was, at)) if *was == status => *at,
                _ => inputs.now,
            };
            times.insert(kind.to_string(), (status, since));
            let mut c = json!({
                "type": kind,
                "status": if status { "True" } else { "False" },
                "lastProbeTime": null,
                "lastTransitionTime": rfc3339(since),
            });
            if let Some(generation) = inputs.generation {
                c["observedGeneration"] = json!(generation);
            }
            // Conditions are merged by type: a reason or message the
            // condition no longer has is removed by naming it null, as the
            // kubelet's patch from the old status to the new one does.
            c["reason"] = json!(reason);
            c["message"] = json!(message);
            c
        };
    let list = |names: &[&str]| format!("[{}]", names.join(" "));
    // Why a new sandbox is needed, in the kubelet's words: none yet (the
    // first attempt), or the last one is not ready (stopped, or stopping
    // with the ended pod).
    let sandbox_missing = match plan.sandbox {
        Some(0) => "no pod sandbox exists",
        _ => "pod sandbox is not ready",
    };
    let mut conditions = vec![if sandbox_ready {
        condition("PodReadyToStartContainers", true, None, None)
    } else {
        condition(
            "PodReadyToStartContainers",
            false,
            Some("PodSandboxNotReady"),
            Some(sandbox_missing.to_string()),
        )
    }];
    // An app container that ran says the pod was initialized, whatever its
    // sidecars do now (the kubelet's `HasAnyRegularContainerStarted`).
    let app_ran = plan.containers.iter().any(|c| {
        c.kind == ContainerKind::App
            && c.waiting.is_none()
            && c.current.as_ref().is_some_and(|s| {
                matches!(s.state, ContainerState::Running | ContainerState::Exited)
            })
    });
    conditions.push(if plan.phase == ApiPhase::Succeeded {
        condition("Initialized", true, Some("PodCompleted"), None)
    } else if (uninitialized.is_empty() && plan.initialized) || app_ran {
        condition("Initialized", true, None, None)
    } else {
        condition(
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: {}",
                list(&uninitialized)
            )),
        )
    });
    let gates = unready_gates(inputs.pod);
    for kind in ["Ready", "ContainersReady"] {
        conditions.push(if terminal {
            let reason = if plan.phase == ApiPhase::Failed {
                "PodFailed"
            } else {
                "PodCompleted"
            };
            condition(kind, false, Some(reason), None)
        } else if unready.is_empty() && kind == "Ready" && !gates.is_empty() {
            condition(
                kind,
                false,
                Some("ReadinessGatesNotReady"),
                Some(gates.join(", ")),
            )
        } else if unready.is_empty() {
            condition(kind, true, None, None)
        } else {
            condition(
                kind,
                false,
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: {}",
                    list(&unready)
                )),
            )
        });
    }
    // A pod the node runs is scheduled to it, whoever placed it there
    // (the scheduler, its creator naming the node, or the node's own
    // files for a static pod).
    conditions.push(condition("PodScheduled", true, None, None));
    if let Some((_, message)) = inputs.disruption {
        conditions.push(condition(
            "DisruptionTarget",
            true,
            Some(TERMINATION_BY_KUBELET),
            Some(message.to_string()),
        ));
    }

    let specs: BTreeMap<&str, &Container> = containers(inputs.pod)
        .into_iter()
        .map(|(c, _)| (c.name.as_str(), c))
        .collect();
    let statuses = |kinds: &[ContainerKind]| -> Vec<Value> {
        plan.containers
            .iter()
            .filter(|c| kinds.contains(&c.kind))
            .map(|c| container_status(c, specs.get(c.name.as_str()).copied(), inputs))
            .collect()
    };
    // The app containers by name, the init containers in the spec's order,
    // as the kubelet lists them.
    let mut apps = statuses(&[ContainerKind::App]);
    apps.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut status = json!({
        "phase": plan.phase.as_str(),
        "conditions": conditions,
        "startTime": rfc3339(inputs.start_time),
        "containerStatuses": apps,
    });
    if let Some((reason, message)) = inputs.disruption
        && plan.phase == ApiPhase::Failed
    {
        status["reason"] = json!(reason);
        status["message"] = json!(message);
    }
    let init = statuses(&[ContainerKind::Init, ContainerKind::Sidecar]);
    if !init.is_empty() {
        status["initContainerStatuses"] = json!(init);
    }
    if let Some(generation) = inputs.generation {
        status["observedGeneration"] = json!(generation);
    }
    let requests = pod_totals(inputs.pod, |r| r.requests.as_ref());
    let limits = pod_totals(inputs.pod, |r| r.limits.as_ref());
    if !requests.is_empty() {
        status["allocatedResources"] = json!(requests);
    }
    // The pod's resources, even none: the kubelet writes them always.
    let mut resources = json!({});
    if !limits.is_empty() {
        resources["limits"] = json!(limits);
    }
    if !requests.is_empty() {
        resources["requests"] = json!(requests);
    }
    status["resources"] = resources;
    if let Some(ip) = inputs.node_ip {
        status["hostIP"] = json!(ip);
        status["hostIPs"] = json!([{"ip": ip}]);
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    (status, times)
}

/// Why the pod's readiness gates hold it back, in the kubelet's words:
/// each gate whose condition (written by whoever owns it) is missing or
/// not `True`.
fn unready_gates(pod: &Pod) -> Vec<String> {
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|gate| {
            let kind = &gate.condition_type;
            match conditions.iter().find(|c| &c.type_ == kind) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {kind:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {kind:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect()
}

/// One container's status (`spec`: the container in the pod).
fn container_status(
    view: &ContainerView,
    spec: Option<&Container>,
    inputs: &StatusInputs<'_>,
) -> Value {
    let image = spec.and_then(|c| c.image.clone()).unwrap_or_default();
    let mut status = json!({
        "name": view.name,
        "image": image,
        "imageID": "",
        "ready": view.ready(),
        "started": view.started(),
        "restartCount": view.restart_count(),
        "lastState": {},
    });
    let shown = if view.waiting.is_some() {
        None
    } else {
        view.current.as_ref()
    };
    match (&view.waiting, shown) {
        (Some((reason, message)), _) => {
            let mut waiting = json!({"reason": reason});
            if !message.is_empty() {
                waiting["message"] = json!(message);
            }
            status["state"] = json!({"waiting": waiting});
        }
        (None, Some(c)) => {
            status["state"] = state(c, inputs.runtime);
        }
        (None, None) => status["state"] = json!({"waiting": {"reason": "ContainerCreating"}}),
    }
    // The container shown, or the one that last ran.
    let latest = shown.or(view.current.as_ref());
    if let Some(c) = latest {
        status["containerID"] = json!(format!("{}://{}", inputs.runtime, c.id));
        status["imageID"] = json!(c.image_ref);
        // The image as the runtime names it, once it runs one.
        if !c.image.is_empty() {
            status["image"] = json!(c.image);
        }
    }
    let previous = if view.waiting.is_some() {
        view.previous.as_ref().or(view.current.as_ref())
    } else {
        view.previous.as_ref()
    };
    if let Some(p) = previous.filter(|p| p.state == ContainerState::Exited) {
        status["lastState"] = state(p, inputs.runtime);
    }
    // What it was given, once the runtime has it (the kubelet's in-place
    // resize accounting: its requests allocated, its resources as asked,
    // even none).
    if latest.is_some() {
        let resources = spec.and_then(|c| c.resources.clone()).unwrap_or_default();
        if let Some(requests) = resources.requests.as_ref().filter(|r| !r.is_empty()) {
            status["allocatedResources"] = json!(requests);
        }
        status["resources"] = serde_json::to_value(&resources).unwrap_or_else(|_| json!({}));
    }
    // Its volume mounts as its spec names them, the read-only ones with
    // whether they are read-only all the way down (the kubelet's
    // RecursiveReadOnlyMounts, resolved as for the container's mounts).
    let mounts: Vec<Value> = spec
        .into_iter()
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .map(|m| {
            let mut mount = json!({"name": m.name, "mountPath": m.mount_path});
            if m.read_only == Some(true) {
                mount["readOnly"] = json!(true);
                let recursive = match recursive_read_only(m, inputs.recursive_read_only) {
                    Ok(true) => "Enabled",
                    _ => "Disabled",
                };
                mount["recursiveReadOnly"] = json!(recursive);
            }
            mount
        })
        .collect();
    if !mounts.is_empty() {
        status["volumeMounts"] = json!(mounts);
    }
    if let Some(user) = shown
        .or(view.current.as_ref())
        .and_then(|c| c.user.as_ref())
    {
        status["user"] = json!({"linux": {
            "uid": user.uid,
            "gid": user.gid,
            "supplementalGroups": user.supplemental_groups,
        }});
    }
    if let Some(health) = inputs.resource_health.get(&view.name)
        && view.kind == ContainerKind::App
    {
        status["allocatedResourcesStatus"] = health.clone();
    }
    if view.kind == ContainerKind::Init {
        // An init container that finished well stays ready.
        let done = view.waiting.is_none()
            && view
                .current
                .as_ref()
                .is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == Some(0));
        status["ready"] = json!(done);
        status["started"] = json!(view.running());
    }
    status
}

/// A container's state, as the API shows it.
fn state(c: &ContainerStatus, runtime: &str) -> Value {
    match c.state {
        ContainerState::Running => json!({"running": {
            "startedAt": c.started_at.map(rfc3339),
        }}),
        ContainerState::Exited | ContainerState::Unknown => {
            let mut terminated = json!({
                "exitCode": c.exit_code.unwrap_or(0),
                "reason": if c.reason.is_empty() {
                    if c.exit_code == Some(0) { "Completed" } else { "Error" }
                } else {
                    c.reason.as_str()
                },
                "startedAt": c.started_at.map(rfc3339),
                "finishedAt": c.finished_at.map(rfc3339),
                "containerID": format!("{runtime}://{}", c.id),
            });
            if !c.message.is_empty() {
                terminated["message"] = json!(c.message);
            }
            json!({"terminated": terminated})
        }
        ContainerState::Created => json!({"waiting": {"reason": "ContainerCreating"}}),
    }
}

/// The pod's effective requests (or limits, as `of` picks), as the
/// kubelet totals them: the app containers' and sidecars' sum, or more
/// when an init container (with the sidecars started before it) asks for
/// more. Only whole-number quantities (extended resources, whole CPUs,
/// bytes) are totalled; a resource with another quantity is left out.
fn pod_totals(
    pod: &Pod,
    of: impl Fn(&ResourceRequirements) -> Option<&BTreeMap<String, Quantity>>,
) -> BTreeMap<String, String> {
    // Each amount in billionths, with whether it is written in binary
    // suffixes (a sum is written as its first term).
    type Amounts = BTreeMap<String, Option<(i128, bool)>>;
    let amounts = |c: &Container| -> Amounts {
        c.resources
            .as_ref()
            .and_then(&of)
            .into_iter()
            .flatten()
            .map(|(name, q)| {
                let amount = quantity::nano_units(&q.0).map(|n| (n, quantity::is_binary(&q.0)));
                (name.clone(), amount)
            })
            .collect()
    };
    // A sum: a name first met takes the amount; one that could not be
    // read stays unreadable.
    let add = |into: &mut Amounts, from: &Amounts| {
        for (name, amount) in from {
            match into.get_mut(name) {
                None => {
                    into.insert(name.clone(), *amount);
                }
                Some(entry) => {
                    *entry = match (*entry, amount) {
                        (Some((a, binary)), Some((b, _))) => Some((a + b, binary)),
                        _ => None,
                    };
                }
            }
        }
    };
    // The larger of the two, likewise.
    let raise =
        |into: &mut Amounts, name: &str, amount: Option<(i128, bool)>| match into.get_mut(name) {
            None => {
                into.insert(name.to_string(), amount);
            }
            Some(entry) => {
                *entry = match (*entry, amount) {
                    (Some(x), Some(y)) => Some(if y.0 > x.0 { y } else { x }),
                    _ => None,
                };
            }
        };
    let mut totals = Amounts::new();
    let mut sidecars = Amounts::new();
    let mut init_peak = Amounts::new();
    for (c, kind) in containers(pod) {
        match kind {
            ContainerKind::App => add(&mut totals, &amounts(c)),
            ContainerKind::Sidecar => {
                add(&mut sidecars, &amounts(c));
                for (name, amount) in &sidecars {
                    raise(&mut init_peak, name, *amount);
                }
            }
            ContainerKind::Init => {
                let mut during = sidecars.clone();
                add(&mut during, &amounts(c));
                for (name, amount) in during {
                    raise(&mut init_peak, &name, amount);
                }
            }
        }
    }
    add(&mut totals, &sidecars);
    for (name, peak) in init_peak {
        raise(&mut totals, &name, peak);
    }
    totals
        .into_iter()
        .filter_map(|(name, amount)| {
            let (nano, binary) = amount?;
            Some((name, quantity::canonical(nano, binary)))
        })
        .collect()
}

/// A time as the API writes it: RFC 3339, whole seconds, UTC.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    let seconds = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
