//! A container's cgroup resources, as the kubelet v1.37 asks the runtime
//! for them (`generateLinuxContainerResources`, its QoS policy's
//! `GetContainerOOMScoreAdjust`), with the kubelet's defaults (CFS quota
//! on, the 100 ms period, no memory QoS, swap `NoSwap`):
//!
//! - **CPU**: shares from the request (the limit when there is no
//!   request; 2 for none), `1024` per CPU, between 2 and 262144; the
//!   period 100000 µs; the quota from the limit (0 for none, at least
//!   1000 µs);
//! - **memory**: the limit in bytes; with the pod-level resources of the
//!   pod spec, a container without its own limits takes the pod's;
//! - **OOM score**: -997 for a Guaranteed pod and a node-critical one,
//!   1000 for BestEffort, for Burstable `1000 - 1000 × request / node
//!   memory` (a sidecar no higher than the pod's smallest app container,
//!   within 3 and 999);
//! - **huge pages**: each size the node has, limited to the container's
//!   limit of it (0 when it asks for none);
//! - **swap**: none beyond the memory limit (cgroup v1 with a swap
//!   controller: memory+swap equals the memory limit; cgroup v2:
//!   `memory.swap.max` 0), and on cgroup v2 `memory.oom.group` 1 (the
//!   whole container killed on OOM) and `memory.high` `max`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};

use crate::runtime::LinuxResources;
use nodeplugins_api::quantity;

/// The kubelet's CFS period, in microseconds.
const QUOTA_PERIOD: i64 = 100_000;
/// The smallest CFS quota, in microseconds.
const MIN_QUOTA: i64 = 1000;
const MIN_SHARES: i64 = 2;
const MAX_SHARES: i64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;
/// The priority from which a pod is critical.
const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// What of the node the resources depend on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Host {
    /// The node's memory in bytes (`MemTotal`).
    pub(crate) memory_capacity: i64,
    /// The huge page sizes it has (`2MB`, `1GB`), in its directory order.
    pub(crate) hugepage_sizes: Vec<String>,
    /// cgroup v2 (the unified hierarchy) rather than v1.
    pub(crate) cgroup_v2: bool,
    /// The memory controller accounts swap.
    pub(crate) swap_controller: bool,
}

impl Host {
    /// This machine, read once.
    pub(crate) fn this_machine() -> &'static Host {
        static HOST: OnceLock<Host> = OnceLock::new();
        HOST.get_or_init(Host::read)
    }

    fn read() -> Host {
        let memory_capacity = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|kib| kib.parse::<i64>().ok())
            })
            .map_or(0, |kib| kib.saturating_mul(1024));
        let hugepage_sizes = std::fs::read_dir("/sys/kernel/mm/hugepages")
            .map(|dir| {
                dir.flatten()
                    .filter_map(|entry| hugepage_size(&entry.file_name().to_string_lossy()))
                    .collect()
            })
            .unwrap_or_default();
        let cgroup_v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let swap_controller = if cgroup_v2 {
            // `memory.swap.max` is in every cgroup but the root: this
            // process's.
            std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|c| {
                    c.lines()
                        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
                })
                .is_some_and(|own| {
                    std::path::Path::new("/sys/fs/cgroup")
                        .join(own.trim_start_matches('/'))
                        .join("memory.swap.max")
                        .exists()
                })
        } else {
            std::path::Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists()
        };
        Host {
            memory_capacity,
            hugepage_sizes,
            cgroup_v2,
            swap_controller,
        }
    }
}

/// The page size of a `/sys/kernel/mm/hugepages` entry
/// (`hugepages-2048kB` is `2MB`).
fn hugepage_size(entry: &str) -> Option<String> {
    let kib: u64 = entry
        .strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse()
        .ok()?;
    unit_size(kib.checked_mul(1024)?)
}

/// A byte count as the kubelet names a huge page size: `2MB`, `1GB`.
fn unit_size(mut bytes: u64) -> Option<String> {
    let mut units = ["B", "KB", "MB", "GB", "TB", "PB"].iter();
    let mut unit = units.next()?;
    while bytes >= 1024 && bytes.is_multiple_of(1024) {
        unit = units.next()?;
        bytes /= 1024;
    }
    Some(format!("{bytes}{unit}"))
}

/// The cgroup resources of `container` of `pod` on `host`.
pub(crate) fn container_resources(pod: &Pod, container: &Container, host: &Host) -> LinuxResources {
    let own = container.resources.as_ref();
    let pod_level = pod_level_resources(pod);
    // A container without its own limit of a kind takes the pod's.
    let limit = |name: &str, read: fn(&str) -> Option<i64>| {
        let own = amount(own.and_then(|r| r.limits.as_ref()), name, read);
        match pod_level {
            Some(level) if own == 0 => amount(level.limits.as_ref(), name, read),
            _ => own,
        }
    };
    let cpu_limit = limit("cpu", quantity::milli_value);
    let memory_limit = limit("memory", quantity::value);
    let cpu_request = match own
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("cpu"))
    {
        Some(request) => quantity::milli_value(&request.0).unwrap_or(0),
        None => cpu_limit,
    };
    let mut resources = LinuxResources {
        cpu_shares: shares(cpu_request),
        cpu_period: QUOTA_PERIOD,
        cpu_quota: quota(cpu_limit),
        memory_limit_in_bytes: memory_limit,
        oom_score_adj: oom_score_adj(pod, container, host.memory_capacity),
        hugepage_limits: hugepage_limits(pod_level, own, &host.hugepage_sizes),
        ..Default::default()
    };
    if host.cgroup_v2 {
        resources
            .unified
            .insert("memory.oom.group".into(), "1".into());
        resources.unified.insert("memory.high".into(), "max".into());
        if host.swap_controller {
            resources
                .unified
                .insert("memory.swap.max".into(), "0".into());
        }
    } else if host.swap_controller {
        resources.memory_swap_limit_in_bytes = resources.memory_limit_in_bytes;
    }
    resources
}

/// The pod-level resources of the pod spec, when it sets CPU or memory.
fn pod_level_resources(pod: &Pod) -> Option<&ResourceRequirements> {
    let resources = pod.spec.as_ref()?.resources.as_ref()?;
    let sets = |list: Option<&BTreeMap<String, _>>| {
        list.is_some_and(|l| l.contains_key("cpu") || l.contains_key("memory"))
    };
    (sets(resources.requests.as_ref()) || sets(resources.limits.as_ref())).then_some(resources)
}

/// Resource `name` of `list`, read with `read`; 0 when absent.
fn amount(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    name: &str,
    read: fn(&str) -> Option<i64>,
) -> i64 {
    list.and_then(|l| l.get(name))
        .and_then(|q| read(&q.0))
        .unwrap_or(0)
}

/// The kubelet's `MilliCPUToShares`.
fn shares(milli_cpu: i64) -> i64 {
    if milli_cpu == 0 {
        return MIN_SHARES;
    }
    (milli_cpu.saturating_mul(SHARES_PER_CPU) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// The kubelet's `MilliCPUToQuota` for its period.
fn quota(milli_cpu: i64) -> i64 {
    if milli_cpu == 0 {
        return 0;
    }
    (milli_cpu.saturating_mul(QUOTA_PERIOD) / 1000).max(MIN_QUOTA)
}

/// The pod's QoS class: the API server's (`status.qosClass`), else worked
/// out as the API server does.
fn qos_class(pod: &Pod) -> &str {
    if let Some(class) = pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        return class;
    }
    let spec = pod.spec.as_ref();
    let all = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers));
    let (mut requests, mut limits) = (BTreeMap::new(), BTreeMap::new());
    let mut every_limit_set = true;
    let mut containers = 0;
    for container in all {
        containers += 1;
        let resources = container.resources.as_ref();
        for (list, into) in [
            (resources.and_then(|r| r.requests.as_ref()), &mut requests),
            (resources.and_then(|r| r.limits.as_ref()), &mut limits),
        ] {
            for name in ["cpu", "memory"] {
                let milli = amount(list, name, quantity::milli_value);
                if milli != 0 {
                    *into.entry(name).or_insert(0i64) += milli;
                }
            }
        }
        let own_limits = resources.and_then(|r| r.limits.as_ref());
        if amount(own_limits, "cpu", quantity::milli_value) == 0
            || amount(own_limits, "memory", quantity::milli_value) == 0
        {
            every_limit_set = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if containers > 0 && every_limit_set && requests == limits {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// The kubelet's `GetContainerOOMScoreAdjust`.
fn oom_score_adj(pod: &Pod, container: &Container, memory_capacity: i64) -> i64 {
    let spec = pod.spec.as_ref();
    let critical = spec.and_then(|s| s.priority).unwrap_or(0) >= SYSTEM_CRITICAL_PRIORITY;
    let node_critical = critical
        && spec.and_then(|s| s.priority_class_name.as_deref()) == Some("system-node-critical");
    if node_critical {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match qos_class(pod) {
        "Guaranteed" => return GUARANTEED_OOM_SCORE_ADJ,
        "BestEffort" => return BEST_EFFORT_OOM_SCORE_ADJ,
        _ => {}
    }
    let capacity = memory_capacity.max(1);
    let request = |c: &Container| {
        amount(
            c.resources.as_ref().and_then(|r| r.requests.as_ref()),
            "memory",
            quantity::value,
        )
    };
    let remaining = remaining_pod_memory_per_container(pod);
    let score =
        |memory: i64| 1000 - 1000i64.saturating_mul(memory.saturating_add(remaining)) / capacity;
    let mut adjust = score(request(container));
    let sidecar = container.restart_policy.as_deref() == Some("Always")
        && spec.is_some_and(|s| {
            s.init_containers
                .iter()
                .flatten()
                .any(|c| c.name == container.name)
        });
    if sidecar && let Some(smallest) = spec.and_then(|s| s.containers.iter().map(request).min()) {
        adjust = adjust.min(score(smallest));
    }
    if adjust < 1000 + GUARANTEED_OOM_SCORE_ADJ {
        return 1000 + GUARANTEED_OOM_SCORE_ADJ;
    }
    if adjust == BEST_EFFORT_OOM_SCORE_ADJ {
        return adjust - 1;
    }
    adjust
}

/// With pod-level requests, the pod's memory request its containers do
/// not request, shared among them (0 otherwise).
fn remaining_pod_memory_per_container(pod: &Pod) -> i64 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let pod_request = amount(
        spec.resources.as_ref().and_then(|r| r.requests.as_ref()),
        "memory",
        quantity::value,
    );
    let requests_set = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|r| r.contains_key("cpu") || r.contains_key("memory"));
    if !requests_set || pod_request == 0 {
        return 0;
    }
    let request = |c: &Container| {
        amount(
            c.resources.as_ref().and_then(|r| r.requests.as_ref()),
            "memory",
            quantity::value,
        )
    };
    // The containers' effective request: the app containers and sidecars
    // together, or an init container with the sidecars started before it,
    // whichever is more.
    let mut total: i64 = spec
        .containers
        .iter()
        .map(request)
        .fold(0, i64::saturating_add);
    let (mut sidecars, mut init_peak) = (0i64, 0i64);
    for init in spec.init_containers.iter().flatten() {
        let during = if init.restart_policy.as_deref() == Some("Always") {
            total = total.saturating_add(request(init));
            sidecars = sidecars.saturating_add(request(init));
            sidecars
        } else {
            request(init).saturating_add(sidecars)
        };
        init_peak = init_peak.max(during);
    }
    let containers = spec.containers.len() + spec.init_containers.as_ref().map_or(0, Vec::len);
    let remaining = pod_request.saturating_sub(total.max(init_peak)).max(0);
    remaining / i64::try_from(containers.max(1)).unwrap_or(1)
}

/// Each huge page size of the node, limited to what the container (else
/// the pod, with pod-level resources) asks of it, 0 otherwise.
fn hugepage_limits(
    pod_level: Option<&ResourceRequirements>,
    own: Option<&ResourceRequirements>,
    sizes: &[String],
) -> Vec<(String, u64)> {
    let mut asked: BTreeMap<String, u64> = BTreeMap::new();
    let lists = [
        pod_level.and_then(|r| r.limits.as_ref()),
        own.and_then(|r| r.limits.as_ref()),
    ];
    for list in lists.into_iter().flatten() {
        for (name, limit) in list {
            let Some(size) = name.strip_prefix("hugepages-") else {
                continue;
            };
            let (Some(page), Some(bytes)) = (quantity::value(size), quantity::value(&limit.0))
            else {
                continue;
            };
            let (Ok(page), Ok(bytes)) = (u64::try_from(page), u64::try_from(bytes)) else {
                continue;
            };
            if let Some(unit) = unit_size(page) {
                asked.insert(unit, bytes);
            }
        }
    }
    sizes
        .iter()
        .map(|size| (size.clone(), asked.get(size).copied().unwrap_or(0)))
        .collect()
}

#[cfg(test)]
mod tests;
