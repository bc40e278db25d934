//! Printing results as tables or JSON.

pub(crate) mod check;
pub(crate) mod conformance;
pub(crate) mod dra;
pub(crate) mod events;
mod format;
pub(crate) mod pod_resources;
pub(crate) mod pods;

use format::ago;
pub(crate) use format::{Format, human, table};

use std::io::Write;
use std::time::Duration;

use nodeplugins::admin::AgentStatus;
use nodeplugins::device::{ContainerAllocation, ResourceStatus};
use nodeplugins::plugin_manager::PluginState;

/// Prints the agent status.
pub(crate) fn status(
    status: &AgentStatus,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, status)?;
        writeln!(out)?;
        return Ok(());
    }
    let count = |s: PluginState| status.plugins.iter().filter(|p| p.state == s).count();
    writeln!(
        out,
        "agent {} on {}, up {}: {} plugins ({} registered, {} pending, {} failed); \
         {} CSI drivers, {} device resources, {} DRA drivers",
        status.version,
        status.root_dir.display(),
        human(Duration::from_millis(status.uptime_ms)),
        status.plugins.len(),
        count(PluginState::Registered),
        count(PluginState::Pending),
        count(PluginState::Failed),
        status.csi_drivers.len(),
        status.resources.len(),
        status.dra_drivers.len(),
    )?;
    if let Some(api) = &status.kube_api {
        let pending = if api.pending.is_empty() {
            "nothing pending".to_string()
        } else {
            let kinds: Vec<String> = api.pending.iter().map(|k| k.to_string()).collect();
            format!("pending: {}", kinds.join(", "))
        };
        let written = api
            .last_success_unix_ms
            .map_or("no write yet".to_string(), |at| {
                format!("last write {}", ago(at))
            });
        writeln!(
            out,
            "kubernetes API {} as node {}: {written}, {pending}",
            api.server, api.node
        )?;
        if let Some(error) = &api.last_error {
            writeln!(
                out,
                "WARNING: kubernetes API writes failing ({}x): {error}",
                api.failures
            )?;
        }
    }
    for socket in &status.sockets {
        if !socket.present {
            writeln!(
                out,
                "WARNING: {} is not being served",
                socket.path.display()
            )?;
        } else if socket.recreated > 0 {
            writeln!(
                out,
                "note: {} was removed and served again {} time(s)",
                socket.path.display(),
                socket.recreated
            )?;
        }
    }
    if !status.plugins.is_empty() {
        plugin_table(status, out)?;
    }
    for error in [
        &status.device_checkpoint_error,
        &status.dra_checkpoint_error,
    ]
    .into_iter()
    .flatten()
    {
        writeln!(out, "WARNING: {error}")?;
    }
    if !status.resources.is_empty() {
        writeln!(out)?;
        let rows: Vec<Vec<String>> = status
            .resources
            .iter()
            .map(|r| {
                let removal = r.removal_in_ms.map_or(String::new(), |ms| {
                    format!(
                        "no plugin connected; removed in {}",
                        human(Duration::from_millis(ms))
                    )
                });
                vec![
                    r.name.clone(),
                    r.capacity.to_string(),
                    r.allocatable.to_string(),
                    r.instances.len().to_string(),
                    removal,
                ]
            })
            .collect();
        table(
            &["RESOURCE", "CAPACITY", "ALLOCATABLE", "PLUGINS", "NOTE"],
            &rows,
            out,
        )?;
    }
    if !status.csi_drivers.is_empty() {
        writeln!(out)?;
        let rows: Vec<Vec<String>> = status
            .csi_drivers
            .iter()
            .map(|d| {
                let topology: Vec<String> = d
                    .accessible_topology
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                vec![
                    d.name.clone(),
                    d.version.clone(),
                    if d.node_id.is_empty() {
                        "(pending NodeGetInfo)".into()
                    } else {
                        d.node_id.clone()
                    },
                    if d.max_volumes_per_node == 0 {
                        "-".into()
                    } else {
                        d.max_volumes_per_node.to_string()
                    },
                    topology.join(","),
                    d.endpoint.clone(),
                ]
            })
            .collect();
        table(
            &[
                "CSI DRIVER",
                "VERSION",
                "NODE ID",
                "MAX VOLUMES",
                "TOPOLOGY",
                "ENDPOINT",
            ],
            &rows,
            out,
        )?;
    }
    if !status.dra_drivers.is_empty() {
        writeln!(out)?;
        dra::summary(&status.dra_drivers, out)?;
    }
    Ok(())
}

fn plugin_table(status: &AgentStatus, out: &mut impl Write) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = status
        .plugins
        .iter()
        .map(|p| {
            let state = match p.state {
                PluginState::Registered => p
                    .registered_at_unix_ms
                    .map_or("registered".into(), |t| format!("registered {}", ago(t))),
                PluginState::Failed => format!(
                    "failed x{}, retry in {}",
                    p.failures,
                    human(Duration::from_millis(p.retry_in_ms.unwrap_or(0)))
                ),
                PluginState::Pending => "pending".into(),
                PluginState::Deregistering => "deregistering".into(),
            };
            vec![
                p.plugin_type.clone().unwrap_or_else(|| "-".into()),
                p.name.clone().unwrap_or_else(|| "-".into()),
                state,
                p.versions.join(","),
                p.socket_path.display().to_string(),
                p.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &["TYPE", "NAME", "STATE", "VERSIONS", "SOCKET", "ERROR"],
        &rows,
        out,
    )
}

/// Prints device plugin resources.
pub(crate) fn resources(
    resources: &[ResourceStatus],
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, &serde_json::json!({ "resources": resources }))?;
        writeln!(out)?;
        return Ok(());
    }
    if resources.is_empty() {
        writeln!(out, "no device plugin resources")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = resources
        .iter()
        .map(|r| {
            let devices: Vec<String> = r
                .devices
                .iter()
                .map(|d| {
                    let numa: Vec<String> = d.numa_nodes.iter().map(i64::to_string).collect();
                    let health = if d.health == "Healthy" { "" } else { "!" };
                    if numa.is_empty() {
                        format!("{}{health}", d.id)
                    } else {
                        format!("{}{health}@{}", d.id, numa.join("+"))
                    }
                })
                .collect();
            let note = r.removal_in_ms.map_or(String::new(), |ms| {
                format!("no plugin; removed in {}", human(Duration::from_millis(ms)))
            });
            vec![
                r.name.clone(),
                r.capacity.to_string(),
                r.allocatable.to_string(),
                r.allocated.to_string(),
                r.instances.len().to_string(),
                devices.join(" "),
                note,
            ]
        })
        .collect();
    table(
        &[
            "RESOURCE",
            "CAPACITY",
            "ALLOCATABLE",
            "ALLOCATED",
            "PLUGINS",
            "DEVICES (id[!unhealthy]@numa)",
            "NOTE",
        ],
        &rows,
        out,
    )
}

/// Prints what a container was given.
pub(crate) fn allocations(
    allocations: &[ContainerAllocation],
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({ "allocations": allocations }),
        )?;
        writeln!(out)?;
        return Ok(());
    }
    for a in allocations {
        writeln!(
            out,
            "{} for pod {} container {}: {}",
            a.resource,
            a.pod_uid,
            a.container,
            a.devices.join(", ")
        )?;
        for (k, v) in &a.envs {
            writeln!(out, "  env        {k}={v}")?;
        }
        for m in &a.mounts {
            writeln!(
                out,
                "  mount      {} -> {}{}",
                m.host_path,
                m.container_path,
                if m.read_only { " (ro)" } else { "" }
            )?;
        }
        for d in &a.device_specs {
            writeln!(
                out,
                "  device     {} -> {} ({})",
                d.host_path, d.container_path, d.permissions
            )?;
        }
        for (k, v) in &a.annotations {
            writeln!(out, "  annotation {k}={v}")?;
        }
        for c in &a.cdi_devices {
            writeln!(out, "  cdi        {c}")?;
        }
    }
    Ok(())
}
