//! The part of the Node's status the kubelet writes, computed as its
//! status setters compute it (`pkg/kubelet/nodestatus`), in their order:
//! the addresses, the machine's capacity and allocatable (cpu, memory,
//! pods, ephemeral-storage, each huge page size), `nodeInfo`, the kubelet
//! endpoint's port, the runtime's handlers and features, and the
//! conditions MemoryPressure, DiskPressure, PIDPressure and Ready (last).
//!
//! - Allocatable is capacity less the default hard eviction thresholds
//!   that reserve (`memory.available<100Mi`, `nodefs.available<10%`), and
//!   memory less the huge pages too.
//! - The agent evicts nothing: the pressure conditions say there is none
//!   (the kubelet's words for no pressure).
//! - Ready is True ("kubelet is posting ready status") when the runtime
//!   and its network are ready, the node is not shutting down, and the
//!   capacity is complete; otherwise
//!   False with the kubelet's sentences, one, or several as `[a, b]`.
//! - A condition's `lastTransitionTime` is kept while its status stays;
//!   `lastHeartbeatTime` is now at every computation.
//!
//! The device plugins' resources (the agent's server-side apply) and the
//! volumes in use are not part of it: each is written by its own writer,
//! and neither write touches the other's keys.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::addresses::NodeAddress;
use super::machine::{MachineInfo, go_arch};
use super::runtime_state::RuntimeReport;

/// The version of the kubelet whose behaviour the agent gives its Node
/// (`nodeInfo.kubeletVersion`).
pub const KUBELET_VERSION: &str = "v1.37.2";
/// The default hard eviction threshold on memory that allocatable keeps
/// free (`memory.available<100Mi`).
const MEMORY_EVICTION_HARD: u64 = 100 * 1024 * 1024;
/// ...and on the root directory's filesystem (`nodefs.available<10%`),
/// a float32 in the kubelet.
const NODEFS_EVICTION_HARD: f32 = 0.1;

/// What the status is computed from, besides the Node seen.
pub(in crate::kube_api) struct StatusInputs<'a> {
    pub(in crate::kube_api) machine: &'a MachineInfo,
    /// `None`: none could be found.
    pub(in crate::kube_api) addresses: Option<&'a [NodeAddress]>,
    pub(in crate::kube_api) runtime: &'a RuntimeReport,
    pub(in crate::kube_api) max_pods: u32,
    pub(in crate::kube_api) kubelet_port: u16,
    /// The time of the computation, for the runtime's age.
    pub(in crate::kube_api) now: Instant,
    /// The time of the computation, as the API writes it.
    pub(in crate::kube_api) now_rfc3339: &'a str,
    /// The node is shutting down.
    pub(in crate::kube_api) shutting_down: bool,
}

/// `bytes` as a Kubernetes quantity in binary units, canonical as the API
/// server prints it (the largest suffix that keeps it whole; under 1024,
/// plain digits).
pub(in crate::kube_api) fn binary_si(bytes: u64) -> String {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut number = bytes;
    let mut exponent = 0;
    while exponent < SUFFIXES.len() - 1 && number.is_multiple_of(1024) {
        number /= 1024;
        exponent += 1;
    }
    format!("{number}{}", SUFFIXES[exponent])
}

/// `n` as a Kubernetes quantity in decimal units, canonical as the API
/// server prints it (the largest power of 1000 that keeps it whole).
pub(in crate::kube_api) fn decimal_si(n: u64) -> String {
    const SUFFIXES: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    let mut number = n;
    let mut exponent = 0;
    while number != 0 && exponent < SUFFIXES.len() - 1 && number.is_multiple_of(1000) {
        number /= 1000;
        exponent += 1;
    }
    format!("{number}{}", SUFFIXES[exponent])
}

/// The machine's capacity and allocatable.
fn capacity_and_allocatable(
    machine: &MachineInfo,
    max_pods: u32,
) -> (Map<String, Value>, Map<String, Value>) {
    let mut capacity = Map::new();
    let mut allocatable = Map::new();
    let mut put = |name: String, cap: String, alloc: String| {
        capacity.insert(name.clone(), Value::String(cap));
        allocatable.insert(name, Value::String(alloc));
    };
    if machine.cpus > 0 {
        put(
            "cpu".into(),
            machine.cpus.to_string(),
            machine.cpus.to_string(),
        );
    }
    let huge_page_bytes: u64 = machine
        .huge_pages
        .iter()
        .map(|(size, pages)| size.saturating_mul(*pages))
        .sum();
    if machine.memory > 0 {
        let left = machine
            .memory
            .saturating_sub(MEMORY_EVICTION_HARD)
            .saturating_sub(huge_page_bytes);
        put("memory".into(), binary_si(machine.memory), binary_si(left));
    }
    put("pods".into(), max_pods.to_string(), max_pods.to_string());
    if machine.ephemeral_storage > 0 {
        // The kubelet's arithmetic: the float32 fraction, truncated; its
        // root filesystem's size is a decimal quantity.
        let reserved = (machine.ephemeral_storage as f64 * f64::from(NODEFS_EVICTION_HARD)) as u64;
        put(
            "ephemeral-storage".into(),
            decimal_si(machine.ephemeral_storage),
            decimal_si(machine.ephemeral_storage.saturating_sub(reserved)),
        );
    }
    for (size, pages) in &machine.huge_pages {
        let total = binary_si(size.saturating_mul(*pages));
        put(
            format!("hugepages-{}", binary_si(*size)),
            total.clone(),
            total,
        );
    }
    (capacity, allocatable)
}

/// The kubelet's word for a condition that does not hold (the pressure
/// conditions), and its sentence.
fn no_pressure(kind: &str) -> (&'static str, &'static str) {
    match kind {
        "MemoryPressure" => (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        "DiskPressure" => ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        _ => (
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
    }
}

/// The pressure conditions, in the setters' order.
const PRESSURE: [&str; 3] = ["MemoryPressure", "DiskPressure", "PIDPressure"];

/// Why the node is not ready, as one message (one error: its text;
/// several, each once: `[a, b]`), or `None` when it is.
fn not_ready_message(errors: Vec<String>) -> Option<String> {
    let mut seen: Vec<String> = Vec::new();
    for error in errors {
        if !seen.contains(&error) {
            seen.push(error);
        }
    }
    match seen.len() {
        0 => None,
        1 => seen.pop(),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// The conditions `seen` should get.
fn conditions(
    inputs: &StatusInputs<'_>,
    capacity: &Map<String, Value>,
    seen: Option<&Node>,
) -> Vec<Value> {
    let old = |kind: &str| -> Option<Value> {
        seen?
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == kind)
            .and_then(|c| serde_json::to_value(c).ok())
    };
    let now = inputs.now_rfc3339;
    let mut written = Vec::new();
    for kind in PRESSURE {
        let (reason, message) = no_pressure(kind);
        // A condition whose status stays keeps its reason, message and
        // transition time; a new one starts Unknown and turns False now.
        let condition = match old(kind) {
            Some(mut c) if c["status"] == "False" => {
                c["lastHeartbeatTime"] = json!(now);
                c
            }
            _ => json!({
                "type": kind, "status": "False", "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }),
        };
        written.push(condition);
    }
    // The runtime's errors, its network's, then the shutdown manager's.
    let mut errors = inputs.runtime.errors(inputs.now);
    if inputs.shutting_down {
        errors.push("node is shutting down".into());
    }
    let missing: Vec<&str> = ["cpu", "memory", "pods", "ephemeral-storage"]
        .into_iter()
        .filter(|r| !capacity.contains_key(*r))
        .collect();
    if !missing.is_empty() {
        errors.push(format!(
            "missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    let (status, reason, message) = match not_ready_message(errors) {
        None => (
            "True",
            "KubeletReady",
            "kubelet is posting ready status".to_string(),
        ),
        Some(message) => ("False", "KubeletNotReady", message),
    };
    let transition = old("Ready")
        .filter(|c| c["status"] == status)
        .map_or_else(|| json!(now), |c| c["lastTransitionTime"].clone());
    written.push(json!({
        "type": "Ready", "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now, "lastTransitionTime": transition,
    }));
    written
}

/// The kubelet's part of Node `seen`'s status.
pub(in crate::kube_api) fn desired(inputs: &StatusInputs<'_>, seen: Option<&Node>) -> Value {
    let machine = inputs.machine;
    let (capacity, allocatable) = capacity_and_allocatable(machine, inputs.max_pods);
    let conditions = conditions(inputs, &capacity, seen);
    let mut status = Map::new();
    if let Some(addresses) = inputs.addresses {
        let list: Vec<Value> = addresses
            .iter()
            .map(|(kind, address)| json!({"type": kind, "address": address}))
            .collect();
        status.insert("addresses".into(), Value::Array(list));
    }
    status.insert("capacity".into(), Value::Object(capacity));
    status.insert("allocatable".into(), Value::Object(allocatable));
    let mut node_info = json!({
        "machineID": machine.machine_id,
        "systemUUID": machine.system_uuid,
        "bootID": machine.boot_id,
        "kernelVersion": machine.kernel_version,
        "osImage": machine.os_image,
        "containerRuntimeVersion": inputs.runtime.version.as_deref().unwrap_or("Unknown"),
        "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": go_arch(),
    });
    node_info["runningInUserNamespace"] = json!(machine.in_user_namespace);
    if machine.swap > 0 {
        node_info["swap"] = json!({"capacity": machine.swap});
    }
    status.insert("nodeInfo".into(), node_info);
    status.insert(
        "daemonEndpoints".into(),
        json!({"kubeletEndpoint": {"Port": inputs.kubelet_port}}),
    );
    if inputs.runtime.version.is_some() {
        let handlers: Vec<Value> = inputs
            .runtime
            .handlers
            .iter()
            .map(|h| {
                // The default handler's name is written empty, as the
                // API server shows it: left out, the Node would never
                // show the status and each sync would write it.
                json!({
                    "name": h.name,
                    "features": {
                        "recursiveReadOnlyMounts": h.recursive_read_only_mounts,
                        "userNamespaces": h.user_namespaces,
                    },
                })
            })
            .collect();
        status.insert("runtimeHandlers".into(), Value::Array(handlers));
        status.insert(
            "features".into(),
            json!({"supplementalGroupsPolicy": inputs.runtime.supplemental_groups_policy}),
        );
    }
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// The first field of `desired` that `seen` does not show (heartbeat
/// times aside), `None` when it shows them all: then nothing need be
/// written until the report period is out.
pub(in crate::kube_api) fn unshown(seen: Option<&Node>, desired: &Value) -> Option<String> {
    let Some(status) = seen
        .and_then(|n| n.status.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
    else {
        return Some("status".into());
    };
    let Some(fields) = desired.as_object() else {
        return Some("status".into());
    };
    fields.iter().find_map(|(field, want)| {
        let shown = match field.as_str() {
            "capacity" | "allocatable" => want
                .as_object()
                .is_some_and(|keys| keys.iter().all(|(key, value)| &status[field][key] == value)),
            "conditions" => want.as_array().is_some_and(|wanted| {
                wanted.iter().all(|c| {
                    let shown = status["conditions"]
                        .as_array()
                        .and_then(|all| all.iter().find(|s| s["type"] == c["type"]));
                    shown.is_some_and(|s| {
                        ["status", "reason", "message", "lastTransitionTime"]
                            .iter()
                            .all(|k| s[*k] == c[*k])
                    })
                })
            }),
            _ => &status[field] == want,
        };
        (!shown).then(|| format!("{field}: {want} over {}", status[field]))
    })
}

/// The strategic merge patch of the status that writes `desired` over
/// `seen`: conditions merge by type, the capacity keys are set one by one;
/// the addresses replace the list whole when they changed (their type is
/// not a unique key).
pub(in crate::kube_api) fn patch(seen: Option<&Node>, desired: &Value) -> Value {
    let mut status = desired.clone();
    let shown = seen
        .and_then(|n| n.status.as_ref())
        .and_then(|s| serde_json::to_value(&s.addresses).ok())
        .unwrap_or(Value::Null);
    if let Some(list) = status.get_mut("addresses").and_then(Value::as_array_mut)
        && shown != Value::Array(list.clone())
    {
        list.push(json!({"$patch": "replace"}));
    }
    json!({"status": status})
}

/// The labels the kubelet gives a Node it registers (before
/// `--node-labels`, which may overwrite them).
pub(in crate::kube_api) fn default_labels(hostname: &str) -> BTreeMap<String, String> {
    let arch = go_arch();
    BTreeMap::from([
        ("beta.kubernetes.io/arch".to_string(), arch.to_string()),
        ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), arch.to_string()),
        ("kubernetes.io/hostname".to_string(), hostname.to_string()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
    ])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;
    use crate::runtime::{RuntimeCondition, RuntimeHandler};

    fn machine() -> MachineInfo {
        MachineInfo {
            cpus: 2,
            memory: 24_684_396 * 1024,
            huge_pages: BTreeMap::from([(2 * 1024 * 1024, 0), (1024 * 1024 * 1024, 0)]),
            ephemeral_storage: 100 * 1024 * 1024 * 1024,
            machine_id: "m".into(),
            system_uuid: "u".into(),
            boot_id: "b".into(),
            kernel_version: "6.1.0".into(),
            os_image: "Debian".into(),
            swap: 0,
            in_user_namespace: false,
        }
    }

    fn ready_runtime(now: Instant) -> RuntimeReport {
        let mut report = RuntimeReport::default();
        let ready = |kind: &str| RuntimeCondition {
            kind: kind.into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
        let handler = |name: &str| RuntimeHandler {
            name: name.into(),
            recursive_read_only_mounts: true,
            user_namespaces: false,
        };
        report.answered(
            &[ready("RuntimeReady"), ready("NetworkReady")],
            vec![handler(""), handler("runc")],
            false,
            now,
        );
        report.version = Some("containerd://2.4.2".into());
        report
    }

    fn inputs<'a>(
        machine: &'a MachineInfo,
        runtime: &'a RuntimeReport,
        now: Instant,
        stamp: &'a str,
    ) -> StatusInputs<'a> {
        StatusInputs {
            machine,
            addresses: None,
            runtime,
            max_pods: 110,
            kubelet_port: 10250,
            now,
            now_rfc3339: stamp,
            shutting_down: false,
        }
    }

    #[test]
    fn quantities_are_canonical_binary() {
        assert_eq!(binary_si(0), "0");
        assert_eq!(binary_si(1000), "1000");
        assert_eq!(binary_si(2048), "2Ki");
        assert_eq!(binary_si(1536 * 1024), "1536Ki");
        assert_eq!(binary_si(2 * 1024 * 1024), "2Mi");
        assert_eq!(binary_si(1024 * 1024 * 1024), "1Gi");
        assert_eq!(binary_si(1025), "1025");
        assert_eq!(decimal_si(0), "0");
        assert_eq!(decimal_si(270_553_174_016), "270553174016");
        assert_eq!(decimal_si(100_000_000_000), "100G");
        assert_eq!(decimal_si(1_500), "1500");
    }

    #[test]
    fn allocatable_keeps_the_hard_eviction_thresholds_free() {
        let (capacity, allocatable) = capacity_and_allocatable(&machine(), 110);
        assert_eq!(capacity["cpu"], "2");
        assert_eq!(capacity["memory"], "24684396Ki");
        assert_eq!(allocatable["memory"], "24581996Ki");
        assert_eq!(capacity["pods"], "110");
        assert_eq!(capacity["ephemeral-storage"], "107374182400");
        // 10% as the float32 0.1, truncated.
        let total = 100u64 * 1024 * 1024 * 1024;
        let reserved = (total as f64 * f64::from(0.1f32)) as u64;
        assert_eq!(
            allocatable["ephemeral-storage"],
            decimal_si(total - reserved)
        );
        assert_eq!(capacity["hugepages-2Mi"], "0");
        assert_eq!(capacity["hugepages-1Gi"], "0");
    }

    #[test]
    fn a_ready_runtime_makes_the_node_ready_and_pressure_is_none() {
        let now = Instant::now();
        let machine = machine();
        let runtime = ready_runtime(now);
        let status = desired(
            &inputs(&machine, &runtime, now, "2026-12-03T10:00:00Z"),
            None,
        );
        let conditions = status["conditions"].as_array().unwrap();
        let kinds: Vec<&str> = conditions
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        assert_eq!(conditions[0]["reason"], "KubeletHasSufficientMemory");
        assert_eq!(conditions[3]["status"], "True");
        assert_eq!(conditions[3]["message"], "kubelet is posting ready status");
        assert_eq!(
            status["nodeInfo"]["containerRuntimeVersion"],
            "containerd://2.4.2"
        );
        assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
    }

    #[test]
    fn the_reasons_not_to_be_ready_are_listed_once_each() {
        let now = Instant::now();
        let mut machine = machine();
        machine.cpus = 0;
        let runtime = RuntimeReport::default();
        let status = desired(&inputs(&machine, &runtime, now, "t"), None);
        assert_eq!(
            status["conditions"][3]["message"],
            "[container runtime status check may not have completed yet, network state unknown, missing node capacity for resources: cpu]"
        );
        assert_eq!(status["conditions"][3]["reason"], "KubeletNotReady");
        assert_eq!(status["nodeInfo"]["containerRuntimeVersion"], "Unknown");
    }

    #[test]
    fn a_node_shutting_down_is_not_ready_in_the_kubelets_words() {
        let now = Instant::now();
        let machine = machine();
        let runtime = ready_runtime(now);
        let mut shutting = inputs(&machine, &runtime, now, "t");
        shutting.shutting_down = true;
        let status = desired(&shutting, None);
        assert_eq!(status["conditions"][3]["status"], "False");
        assert_eq!(status["conditions"][3]["reason"], "KubeletNotReady");
        assert_eq!(status["conditions"][3]["message"], "node is shutting down");
        // After the runtime's own errors, as the kubelet aggregates them.
        let runtime = RuntimeReport::default();
        let mut shutting = inputs(&machine, &runtime, now, "t");
        shutting.shutting_down = true;
        let status = desired(&shutting, None);
        assert_eq!(
            status["conditions"][3]["message"],
            "[container runtime status check may not have completed yet, network state unknown, node is shutting down]"
        );
    }

    #[test]
    fn a_status_shown_needs_no_write_and_keeps_its_transition_times() {
        let now = Instant::now();
        let machine = machine();
        let runtime = ready_runtime(now);
        let first = desired(
            &inputs(&machine, &runtime, now, "2026-12-03T10:00:00Z"),
            None,
        );
        // The Node as the API server answers it: the default runtime
        // handler's name shown empty.
        let mut shown = first.clone();
        shown["runtimeHandlers"] = json!([
            {"name": "", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}},
            {"name": "runc", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}},
        ]);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"}, "status": shown,
        }))
        .unwrap();
        let later = now + Duration::from_secs(10);
        let runtime = ready_runtime(later);
        let second = desired(
            &inputs(&machine, &runtime, later, "2026-12-03T10:00:10Z"),
            Some(&node),
        );
        assert_eq!(
            second["conditions"][3]["lastTransitionTime"],
            "2026-12-03T10:00:00Z"
        );
        assert_eq!(
            second["conditions"][3]["lastHeartbeatTime"],
            "2026-12-03T10:00:10Z"
        );
        assert_eq!(unshown(Some(&node), &second), None);
        let not_ready = RuntimeReport::default();
        let third = desired(
            &inputs(&machine, &not_ready, later, "2026-12-03T10:00:10Z"),
            Some(&node),
        );
        assert_eq!(
            third["conditions"][3]["lastTransitionTime"],
            "2026-12-03T10:00:10Z"
        );
        assert!(unshown(Some(&node), &third).is_some());
    }

    #[test]
    fn changed_addresses_replace_the_list() {
        let desired = json!({"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]});
        let patch = patch(None, &desired);
        assert_eq!(
            patch["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.1"}, {"$patch": "replace"}])
        );
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"}, "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
        }))
        .unwrap();
        assert_eq!(
            super::patch(Some(&node), &desired)["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.1"}])
        );
    }
}
