//! Printing what the pod-resources API answers. JSON keeps the API's own
//! field names (those the kubelet's Go types carry).

use std::io::Write;

use nodeplugins_api::podresources::v1;
use serde_json::{Value, json};

use super::{Format, table};

fn topology(t: Option<&v1::TopologyInfo>) -> Value {
    match t {
        Some(t) => {
            json!({"nodes": t.nodes.iter().map(|n| json!({"ID": n.id})).collect::<Vec<_>>()})
        }
        None => Value::Null,
    }
}

fn devices_json(devices: &[v1::ContainerDevices]) -> Value {
    devices
        .iter()
        .map(|d| {
            json!({
                "resource_name": d.resource_name,
                "device_ids": d.device_ids,
                "topology": topology(d.topology.as_ref()),
            })
        })
        .collect()
}

fn pod_json(pod: &v1::PodResources) -> Value {
    let containers: Vec<Value> = pod
        .containers
        .iter()
        .map(|c| {
            let claims: Vec<Value> = c
                .dynamic_resources
                .iter()
                .map(|r| {
                    let resources: Vec<Value> = r
                        .claim_resources
                        .iter()
                        .map(|d| {
                            json!({
                                "cdi_devices": d.cdi_devices.iter().map(|c| json!({"name": c.name})).collect::<Vec<_>>(),
                                "driver_name": d.driver_name,
                                "pool_name": d.pool_name,
                                "device_name": d.device_name,
                                "share_id": d.share_id,
                            })
                        })
                        .collect();
                    json!({
                        "claim_name": r.claim_name,
                        "claim_namespace": r.claim_namespace,
                        "claim_resources": resources,
                    })
                })
                .collect();
            json!({
                "name": c.name,
                "devices": devices_json(&c.devices),
                "cpu_ids": c.cpu_ids,
                "dynamic_resources": claims,
            })
        })
        .collect();
    json!({"name": pod.name, "namespace": pod.namespace, "containers": containers})
}

fn numa(t: Option<&v1::TopologyInfo>) -> String {
    match t {
        Some(t) if !t.nodes.is_empty() => t
            .nodes
            .iter()
            .map(|n| n.id.to_string())
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".into(),
    }
}

/// Prints pods: a row per device and per claim device of each container.
pub(crate) fn pods(
    pods: &[v1::PodResources],
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        let pods: Vec<Value> = pods.iter().map(pod_json).collect();
        serde_json::to_writer_pretty(&mut *out, &json!({"pod_resources": pods}))?;
        writeln!(out)?;
        return Ok(());
    }
    let mut rows = Vec::new();
    for pod in pods {
        for c in &pod.containers {
            let row = |kind: &str, what: String, device: String, numa: String, cdi: String| {
                vec![
                    pod.namespace.clone(),
                    pod.name.clone(),
                    c.name.clone(),
                    kind.to_string(),
                    what,
                    device,
                    numa,
                    cdi,
                ]
            };
            for d in &c.devices {
                let numa = numa(d.topology.as_ref());
                rows.push(row(
                    "device",
                    d.resource_name.clone(),
                    d.device_ids.join(","),
                    numa,
                    "-".into(),
                ));
            }
            for r in &c.dynamic_resources {
                for d in &r.claim_resources {
                    let cdi: Vec<&str> = d.cdi_devices.iter().map(|c| c.name.as_str()).collect();
                    let cdi = if cdi.is_empty() {
                        "-".into()
                    } else {
                        cdi.join(",")
                    };
                    let what = format!("claim {} ({})", r.claim_name, d.driver_name);
                    rows.push(row(
                        "claim",
                        what,
                        format!("{}/{}", d.pool_name, d.device_name),
                        "-".into(),
                        cdi,
                    ));
                }
            }
            if c.devices.is_empty() && c.dynamic_resources.is_empty() {
                rows.push(row("-", "-".into(), "-".into(), "-".into(), "-".into()));
            }
        }
    }
    if rows.is_empty() {
        writeln!(out, "no pods hold devices or claims")?;
        return Ok(());
    }
    table(
        &[
            "NAMESPACE",
            "POD",
            "CONTAINER",
            "KIND",
            "RESOURCE",
            "DEVICE",
            "NUMA",
            "CDI",
        ],
        &rows,
        out,
    )
}

/// Prints the allocatable devices.
pub(crate) fn allocatable(
    reply: &v1::AllocatableResourcesResponse,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        let value = json!({"devices": devices_json(&reply.devices), "cpu_ids": reply.cpu_ids});
        serde_json::to_writer_pretty(&mut *out, &value)?;
        writeln!(out)?;
        return Ok(());
    }
    if reply.devices.is_empty() {
        writeln!(out, "no allocatable devices")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = reply
        .devices
        .iter()
        .map(|d| {
            vec![
                d.resource_name.clone(),
                d.device_ids.join(","),
                numa(d.topology.as_ref()),
            ]
        })
        .collect();
    table(&["RESOURCE", "DEVICE", "NUMA"], &rows, out)
}
