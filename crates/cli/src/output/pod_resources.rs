//! Printing what the pod-resources API answers. JSON keeps the API's own
//! field names (those the kubelet's Go types carry).

use std::io::Write;

use nodeplugins_api::podresources::v1;
use serde_json::{Value, json};

use super::format::{Format, table};

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

/// Prints one pod (the answer to `Get`): as [`pods`] in a table; in JSON,
/// `GetPodResourcesResponse`, whose `pod_resources` is the pod itself.
pub(crate) fn pod(
    pod: &v1::PodResources,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, &json!({"pod_resources": pod_json(pod)}))?;
        writeln!(out)?;
        return Ok(());
    }
    pods(std::slice::from_ref(pod), format, out)
}

/// Prints pods (the answer to `List`): a row per device and per claim
/// device of each container; in JSON, `ListPodResourcesResponse`.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Pod ml/train: container main with a device on NUMA node 1 and a
    /// claim's device with its CDI id; container idle with nothing.
    fn train() -> v1::PodResources {
        v1::PodResources {
            name: "train".into(),
            namespace: "ml".into(),
            containers: vec![
                v1::ContainerResources {
                    name: "main".into(),
                    devices: vec![v1::ContainerDevices {
                        resource_name: "example.com/gpu".into(),
                        device_ids: vec!["gpu-0".into()],
                        topology: Some(v1::TopologyInfo {
                            nodes: vec![v1::NumaNode { id: 1 }],
                        }),
                    }],
                    dynamic_resources: vec![v1::DynamicResource {
                        claim_name: "nics".into(),
                        claim_namespace: "ml".into(),
                        claim_resources: vec![v1::ClaimResource {
                            cdi_devices: vec![v1::CdiDevice {
                                name: "nic.example.com/nic=nic-0".into(),
                            }],
                            driver_name: "nic.example.com".into(),
                            pool_name: "node-1".into(),
                            device_name: "nic-0".into(),
                            share_id: None,
                        }],
                    }],
                    ..Default::default()
                },
                v1::ContainerResources {
                    name: "idle".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    fn printed(print: impl FnOnce(&mut Vec<u8>) -> anyhow::Result<()>) -> String {
        let mut out = Vec::new();
        print(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_table_has_a_row_per_device_per_claim_device_and_per_empty_container() {
        let text = printed(|out| pods(&[train()], Format::Table, out));
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [
                vec![
                    "NAMESPACE",
                    "POD",
                    "CONTAINER",
                    "KIND",
                    "RESOURCE",
                    "DEVICE",
                    "NUMA",
                    "CDI"
                ],
                vec![
                    "ml",
                    "train",
                    "main",
                    "device",
                    "example.com/gpu",
                    "gpu-0",
                    "1",
                    "-"
                ],
                vec![
                    "ml",
                    "train",
                    "main",
                    "claim",
                    "claim",
                    "nics",
                    "(nic.example.com)",
                    "node-1/nic-0",
                    "-",
                    "nic.example.com/nic=nic-0"
                ],
                vec!["ml", "train", "idle", "-", "-", "-", "-", "-"],
            ],
            "{text}"
        );
        assert_eq!(
            printed(|out| pod(&train(), Format::Table, out)),
            text,
            "one pod prints as a list of it"
        );
        assert_eq!(
            printed(|out| pods(&[], Format::Table, out)),
            "no pods hold devices or claims\n"
        );
    }

    #[test]
    fn json_has_the_shape_of_list_and_of_get() {
        let list: Value =
            serde_json::from_str(&printed(|out| pods(&[train()], Format::Json, out))).unwrap();
        let got: Value =
            serde_json::from_str(&printed(|out| pod(&train(), Format::Json, out))).unwrap();
        assert!(list["pod_resources"].is_array(), "{list}");
        assert!(
            got["pod_resources"].is_object(),
            "Get answers one pod: {got}"
        );
        assert_eq!(got["pod_resources"], list["pod_resources"][0]);
        let main = &got["pod_resources"]["containers"][0];
        assert_eq!(got["pod_resources"]["namespace"], "ml");
        assert_eq!(
            main["devices"][0],
            json!({
                "resource_name": "example.com/gpu",
                "device_ids": ["gpu-0"],
                "topology": {"nodes": [{"ID": 1}]},
            })
        );
        assert_eq!(
            main["dynamic_resources"][0],
            json!({
                "claim_name": "nics",
                "claim_namespace": "ml",
                "claim_resources": [{
                    "cdi_devices": [{"name": "nic.example.com/nic=nic-0"}],
                    "driver_name": "nic.example.com",
                    "pool_name": "node-1",
                    "device_name": "nic-0",
                    "share_id": null,
                }],
            })
        );
    }
}
