//! Each app container's `allocatedResourcesStatus`: the health of what it
//! holds, as the kubelet v1.37 writes it (feature `ResourceHealthStatus`,
//! on by default):
//!
//! - one entry per device plugin resource the container holds, named by
//!   the resource, each device by its id, `Healthy` or `Unhealthy` as its
//!   plugin last listed it (`Healthy` for one it no longer lists);
//! - for a container naming DRA claims, one entry per claim it names
//!   (`claim:<entry>`, or `claim:<entry>/<request>` for one request), each
//!   device the claim got (of that request) by its first CDI id (else
//!   `driver/pool/device`), with the health its driver's health stream
//!   last gave (`Unknown` without one, or when the report is stale) and
//!   its message; a claim with no device is left out.
//!
//! Init containers get none (the kubelet writes it for app containers
//! only). Entries are in name order and devices in id order: the kubelet
//! walks maps, so its order is not fixed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::device::ResourceStatus;
use crate::dra::{DraDriverStatus, RecordedClaim};
use crate::pods::admit::claims::claim_names;
use crate::pods::admit::container::ContainerResources;

/// What the health is read from.
pub(crate) struct HealthSources<'a> {
    /// The device plugins' devices.
    pub(crate) devices: &'a [ResourceStatus],
    /// The claims the DRA manager prepared.
    pub(crate) claims: &'a [RecordedClaim],
    /// The DRA drivers, with their devices' health.
    pub(crate) drivers: &'a [DraDriverStatus],
}

/// Container name → its `allocatedResourcesStatus` (containers with none
/// left out), for the app containers of `pod`, whose containers got
/// `resources`.
pub(crate) fn allocated_resources_status(
    pod: &Pod,
    resources: &BTreeMap<String, ContainerResources>,
    sources: &HealthSources<'_>,
) -> BTreeMap<String, Value> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let entries = claim_names(pod).unwrap_or_default();
    let mut out = BTreeMap::new();
    for container in pod.spec.iter().flat_map(|s| &s.containers) {
        let mut statuses: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        if let Some(got) = resources.get(&container.name) {
            for (resource, ids) in &got.devices {
                let listed = sources.devices.iter().find(|r| &r.name == resource);
                let mut devices: Vec<Value> = ids
                    .iter()
                    .map(|id| {
                        let health = listed
                            .and_then(|r| r.devices.iter().find(|d| &d.id == id))
                            .map_or("Healthy", |d| {
                                if d.health == "Healthy" {
                                    "Healthy"
                                } else {
                                    "Unhealthy"
                                }
                            });
                        json!({"resourceID": id, "health": health})
                    })
                    .collect();
                devices.sort_by(|a, b| a["resourceID"].as_str().cmp(&b["resourceID"].as_str()));
                statuses.insert(resource.clone(), devices);
            }
        }
        let named = container
            .resources
            .as_ref()
            .and_then(|r| r.claims.as_deref())
            .unwrap_or_default();
        for reference in named {
            let Some(Some(claim)) = entries.get(&reference.name) else {
                continue;
            };
            let request = reference.request.as_deref().filter(|r| !r.is_empty());
            let name = match request {
                Some(request) => format!("claim:{}/{request}", reference.name),
                None => format!("claim:{}", reference.name),
            };
            let devices = claim_devices(sources, namespace, claim, request);
            if !devices.is_empty() {
                statuses.insert(name, devices);
            }
        }
        if !statuses.is_empty() {
            let list: Vec<Value> = statuses
                .into_iter()
                .map(|(name, resources)| json!({"name": name, "resources": resources}))
                .collect();
            out.insert(container.name.clone(), Value::Array(list));
        }
    }
    out
}

/// The health of each device claim `namespace/claim` got (of `request`,
/// when named), each id once.
fn claim_devices(
    sources: &HealthSources<'_>,
    namespace: &str,
    claim: &str,
    request: Option<&str>,
) -> Vec<Value> {
    // A request of a request (`gpu/small`) is its base request's.
    let base = request.map(|r| r.split('/').next().unwrap_or(r));
    let mut seen = Vec::new();
    let mut devices = Vec::new();
    let records = sources
        .claims
        .iter()
        .filter(|r| r.claim.namespace == namespace && r.claim.name == claim);
    for record in records {
        let reports = sources
            .drivers
            .iter()
            .find(|d| d.name == record.driver)
            .map(|d| d.devices.as_slice())
            .unwrap_or_default();
        for device in &record.devices {
            if let Some(base) = base
                && !device.request_names.is_empty()
                && !device.request_names.iter().any(|n| n == base)
            {
                continue;
            }
            let id =
                device.cdi_device_ids.first().cloned().unwrap_or_else(|| {
                    format!("{}/{}/{}", record.driver, device.pool, device.device)
                });
            if seen.contains(&id) {
                continue;
            }
            seen.push(id.clone());
            let report = reports
                .iter()
                .find(|h| h.pool == device.pool && h.device == device.device);
            let mut health = json!({
                "resourceID": id,
                "health": report.filter(|h| !h.stale).map_or("Unknown", |h| h.health.as_str()),
            });
            if let Some(report) = report.filter(|h| !h.stale && !h.message.is_empty()) {
                health["message"] = json!(report.message);
            }
            devices.push(health);
        }
    }
    devices
}

#[cfg(test)]
mod tests;
