//! Printing the pods the agent serves: a row per pod, or for one pod what
//! each container got, as a container runtime would be given it.

use std::io::Write;
use std::time::Duration;

use nodeplugins::admin::PodsReply;
use nodeplugins::pods::{ContainerKind, ContainerResources, PodStatus};

use super::format::{Format, ago, human, table};

/// Prints the pods: JSON, a table (one row per pod), or, with `detail`,
/// every container of each pod.
pub(crate) fn pods(
    reply: &PodsReply,
    detail: bool,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, reply)?;
        writeln!(out)?;
        return Ok(());
    }
    if !reply.serving {
        writeln!(
            out,
            "the agent does not serve the node's pods (no --kubeconfig, or --pods off)"
        )?;
        return Ok(());
    }
    if reply.pods.is_empty() {
        let listed = if reply.listed {
            "no pod is bound to the node"
        } else {
            "the node's pods are not listed yet"
        };
        writeln!(out, "{listed}")?;
        return Ok(());
    }
    if detail {
        for pod in &reply.pods {
            pod_detail(pod, out)?;
        }
        return Ok(());
    }
    let rows: Vec<Vec<String>> = reply.pods.iter().map(row).collect();
    table(
        &[
            "POD",
            "PHASE",
            "STATUS",
            "CONTAINERS",
            "DEVICES",
            "CDI",
            "SINCE",
            "NOTE",
        ],
        &rows,
        out,
    )
}

fn row(pod: &PodStatus) -> Vec<String> {
    let devices: usize = pod
        .containers
        .iter()
        .flat_map(|c| c.devices.values())
        .map(Vec::len)
        .sum();
    let cdi: usize = pod
        .containers
        .iter()
        .map(|c| c.all_cdi_devices().count())
        .sum();
    let since = pod
        .ready_at_unix_us
        .unwrap_or(pod.seen_at_unix_us)
        .div_ceil(1000);
    vec![
        format!("{}/{}", pod.pod.namespace, pod.pod.name),
        pod.phase.as_str().to_string(),
        pod.pod_phase.clone().unwrap_or_else(|| "-".into()),
        pod.containers.len().to_string(),
        devices.to_string(),
        cdi.to_string(),
        ago(since),
        note(pod),
    ]
}

/// Why a pod waits or failed, and when it is tried again.
fn note(pod: &PodStatus) -> String {
    let mut note = match (&pod.reason, &pod.message) {
        (Some(reason), Some(message)) => format!("{reason}: {message}"),
        (None, Some(message)) => message.clone(),
        _ => String::new(),
    };
    if let Some(at) = pod.retry_at_unix_ms {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let left = Duration::from_millis(at.saturating_sub(now));
        note += &format!(" (attempt {}, again in {})", pod.failures, human(left));
    }
    if !pod.in_api {
        note = format!("gone from the API; {note}");
    }
    note
}

fn pod_detail(pod: &PodStatus, out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "pod {}/{} (UID {}): {}",
        pod.pod.namespace,
        pod.pod.name,
        pod.pod.uid,
        pod.phase.as_str()
    )?;
    let note = note(pod);
    if !note.is_empty() {
        writeln!(out, "  {note}")?;
    }
    for container in &pod.containers {
        container_detail(container, out)?;
    }
    for volume in &pod.volumes {
        match &volume.error {
            None => writeln!(
                out,
                "  volume {} ({}): set up at {}",
                volume.name, volume.kind, volume.path
            )?,
            Some(error) => writeln!(
                out,
                "  volume {} ({}): not set up: {error}",
                volume.name, volume.kind
            )?,
        }
    }
    Ok(())
}

fn container_detail(c: &ContainerResources, out: &mut impl Write) -> anyhow::Result<()> {
    let kind = match c.kind {
        ContainerKind::Init => " (init)",
        ContainerKind::Sidecar => " (sidecar)",
        ContainerKind::App => "",
    };
    writeln!(out, "  container {}{kind}", c.name)?;
    for (resource, ids) in &c.devices {
        let ids: Vec<String> = ids
            .iter()
            .map(|id| match c.numa.get(id) {
                Some(numa) => format!("{id} (NUMA {numa:?})"),
                None => id.clone(),
            })
            .collect();
        writeln!(out, "    devices {resource}: {}", ids.join(", "))?;
    }
    for spec in &c.device_specs {
        writeln!(
            out,
            "    device node {} -> {} ({})",
            spec.host_path, spec.container_path, spec.permissions
        )?;
    }
    for mount in &c.mounts {
        let ro = if mount.read_only { " (read-only)" } else { "" };
        writeln!(
            out,
            "    mount {} -> {}{ro}",
            mount.host_path, mount.container_path
        )?;
    }
    for (key, value) in &c.envs {
        writeln!(out, "    env {key}={value}")?;
    }
    for (key, value) in &c.annotations {
        writeln!(out, "    annotation {key}={value}")?;
    }
    for id in c.all_cdi_devices() {
        writeln!(out, "    CDI device {id}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeplugins::pods::{PodPhase, PodRef, VolumeStatus};
    use std::collections::BTreeMap;

    fn pod(phase: PodPhase) -> PodStatus {
        PodStatus {
            pod: PodRef {
                namespace: "ml".into(),
                name: "train".into(),
                uid: "u1".into(),
            },
            phase,
            reason: None,
            message: None,
            failures: 0,
            retry_at_unix_ms: None,
            seen_at_unix_us: 1,
            ready_at_unix_us: None,
            in_api: true,
            pod_phase: None,
            containers: vec![ContainerResources {
                name: "main".into(),
                devices: BTreeMap::from([("example.com/gpu".into(), vec!["gpu-0".into()])]),
                claim_cdi_devices: vec!["dra.example.com/gpu=gpu-1".into()],
                ..ContainerResources::default()
            }],
            volumes: vec![
                VolumeStatus {
                    name: "kube-api-access-x7k2p".into(),
                    kind: "projected".into(),
                    path: "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~projected/kube-api-access-x7k2p".into(),
                    error: None,
                },
                VolumeStatus {
                    name: "data".into(),
                    kind: "persistentVolumeClaim".into(),
                    path: String::new(),
                    error: Some("persistentVolumeClaim volumes are not set up by this node".into()),
                },
            ],
        }
    }

    #[test]
    fn a_row_counts_devices_and_cdi_and_one_pod_shows_its_containers_and_volumes() {
        let reply = PodsReply {
            serving: true,
            listed: true,
            pods: vec![pod(PodPhase::Admitted)],
        };
        let mut out = Vec::new();
        pods(&reply, false, Format::Table, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let row = text.lines().nth(1).unwrap();
        assert!(row.starts_with("ml/train"), "{text}");
        assert!(row.contains("admitted"), "{text}");

        let mut out = Vec::new();
        pods(&reply, true, Format::Table, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("devices example.com/gpu: gpu-0"), "{text}");
        assert!(
            text.contains("CDI device dra.example.com/gpu=gpu-1"),
            "{text}"
        );
        assert!(
            text.contains("volume kube-api-access-x7k2p (projected): set up at /var/lib/kubelet/pods/u1/volumes/kubernetes.io~projected/kube-api-access-x7k2p"),
            "{text}"
        );
        assert!(
            text.contains("volume data (persistentVolumeClaim): not set up: persistentVolumeClaim volumes are not set up by this node"),
            "{text}"
        );
    }

    #[test]
    fn a_failed_pod_shows_its_reason() {
        let mut failed = pod(PodPhase::Failed);
        failed.reason = Some("UnexpectedAdmissionError".into());
        failed.message = Some("Allocate failed".into());
        assert_eq!(note(&failed), "UnexpectedAdmissionError: Allocate failed");
    }
}
