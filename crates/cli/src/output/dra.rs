//! Printing DRA drivers and prepare/unprepare results.

use std::io::Write;
use std::time::Duration;

use nodeplugins::admin::DraClaimsReply;
use nodeplugins::dra::{DraDriverStatus, PreparedClaim, PreparedDevice, UnpreparedClaim};
use nodeplugins::pods::{PreparedPod, UnpreparedPod};

use super::format::{Format, ago, human, table};

fn note(driver: &DraDriverStatus) -> String {
    if let Some(cleanup) = &driver.pending_cleanup {
        let mut note = format!(
            "no instance connected: cleanup in {}",
            human(Duration::from_millis(cleanup.in_ms))
        );
        if let Some(error) = &cleanup.last_error {
            note += &format!(" (failed {}x: {error})", cleanup.failures);
        }
        return note;
    }
    match driver.cleaned_up_at_unix_ms {
        Some(at) => format!("cleaned up {}", ago(at)),
        None => String::new(),
    }
}

/// A short summary of each driver, for `status`.
pub(crate) fn summary(drivers: &[DraDriverStatus], out: &mut impl Write) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = drivers
        .iter()
        .map(|d| {
            let connected = d.instances.iter().filter(|i| i.connected).count();
            let in_use = d
                .instances
                .iter()
                .find(|i| i.in_use)
                .map_or("-".to_string(), |i| i.endpoint.clone());
            vec![
                d.name.clone(),
                d.instances.len().to_string(),
                connected.to_string(),
                in_use,
                note(d),
            ]
        })
        .collect();
    table(
        &["DRA DRIVER", "INSTANCES", "CONNECTED", "IN USE", "NOTE"],
        &rows,
        out,
    )
}

/// Prints DRA drivers: one row per instance, then device health.
pub(crate) fn drivers(
    drivers: &[DraDriverStatus],
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, &serde_json::json!({ "drivers": drivers }))?;
        writeln!(out)?;
        return Ok(());
    }
    if drivers.is_empty() {
        writeln!(out, "no DRA drivers")?;
        return Ok(());
    }
    let mut rows = Vec::new();
    for d in drivers {
        if d.instances.is_empty() {
            rows.push(vec![
                d.name.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                String::new(),
                note(d),
            ]);
        }
        for (n, i) in d.instances.iter().enumerate() {
            let connected = if i.connected {
                format!("yes, {}", ago(i.connection_changed_at_unix_ms))
            } else {
                format!(
                    "no: {}",
                    i.last_error.as_deref().unwrap_or("not connected yet")
                )
            };
            rows.push(vec![
                d.name.clone(),
                i.endpoint.clone(),
                i.service.to_string(),
                connected,
                if i.in_use { "*".into() } else { String::new() },
                if n == 0 { note(d) } else { String::new() },
            ]);
        }
    }
    table(
        &[
            "DRIVER",
            "ENDPOINT",
            "SERVICE",
            "CONNECTED",
            "IN USE",
            "NOTE",
        ],
        &rows,
        out,
    )?;
    let health: Vec<Vec<String>> = drivers
        .iter()
        .flat_map(|d| {
            d.devices.iter().map(|h| {
                vec![
                    d.name.clone(),
                    h.pool.clone(),
                    h.device.clone(),
                    if h.stale {
                        format!("{} (stale)", h.health)
                    } else {
                        h.health.clone()
                    },
                    h.message.clone(),
                ]
            })
        })
        .collect();
    if !health.is_empty() {
        writeln!(out)?;
        table(
            &["DRIVER", "POOL", "DEVICE", "HEALTH", "MESSAGE"],
            &health,
            out,
        )?;
    }
    Ok(())
}

/// Prints the outcome of a prepare call.
pub(crate) fn prepared(
    claims: &[PreparedClaim],
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, &serde_json::json!({ "claims": claims }))?;
        writeln!(out)?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = claims
        .iter()
        .map(|c| {
            let (devices, cdi) = device_columns(&c.devices);
            vec![
                c.claim.to_string(),
                devices,
                cdi,
                c.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["CLAIM", "DEVICES", "CDI IDS", "ERROR"], &rows, out)
}

/// Prints the outcome of an unprepare call.
pub(crate) fn unprepared(
    claims: &[UnpreparedClaim],
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, &serde_json::json!({ "claims": claims }))?;
        writeln!(out)?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = claims
        .iter()
        .map(|c| {
            vec![
                c.claim.to_string(),
                match &c.error {
                    None => "unprepared".into(),
                    Some(_) => "failed".into(),
                },
                c.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["CLAIM", "RESULT", "ERROR"], &rows, out)
}

/// Prints the outcome of preparing a pod: each claim and driver, then each
/// container's CDI ids.
pub(crate) fn prepared_pod(
    reply: &PreparedPod,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, reply)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "pod {} ({})", reply.pod, reply.pod.uid)?;
    if reply.claims.is_empty() {
        writeln!(out, "no claims to prepare")?;
    } else {
        let rows: Vec<Vec<String>> = reply
            .claims
            .iter()
            .map(|c| {
                let (devices, cdi) = device_columns(&c.result.devices);
                vec![
                    c.result.claim.to_string(),
                    c.driver.clone(),
                    devices,
                    cdi,
                    c.result.error.clone().unwrap_or_default(),
                ]
            })
            .collect();
        table(
            &["CLAIM", "DRIVER", "DEVICES", "CDI IDS", "ERROR"],
            &rows,
            out,
        )?;
    }
    if !reply.containers.is_empty() {
        writeln!(out)?;
        let rows: Vec<Vec<String>> = reply
            .containers
            .iter()
            .map(|c| {
                let ids = if c.cdi_device_ids.is_empty() {
                    "-".to_string()
                } else {
                    c.cdi_device_ids.join(",")
                };
                vec![c.name.clone(), ids]
            })
            .collect();
        table(&["CONTAINER", "CDI IDS"], &rows, out)?;
    }
    Ok(())
}

/// Prints the outcome of unpreparing a pod.
pub(crate) fn unprepared_pod(
    reply: &UnpreparedPod,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, reply)?;
        writeln!(out)?;
        return Ok(());
    }
    if reply.claims.is_empty() {
        writeln!(out, "nothing prepared for this pod")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = reply
        .claims
        .iter()
        .map(|c| {
            let result = match (&c.error, c.unprepared) {
                (Some(_), _) => "failed",
                (None, true) => "unprepared",
                (None, false) => "released (other pods use it)",
            };
            vec![
                c.claim.to_string(),
                c.drivers.join(","),
                result.to_string(),
                c.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["CLAIM", "DRIVERS", "RESULT", "ERROR"], &rows, out)
}

/// Prints the prepared claims: driver, claim, devices and CDI ids, and any
/// problem with their checkpoint.
pub(crate) fn claims(
    reply: &DraClaimsReply,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, reply)?;
        writeln!(out)?;
        return Ok(());
    }
    if let Some(error) = &reply.checkpoint_error {
        writeln!(out, "WARNING: {error}")?;
    }
    if reply.claims.is_empty() {
        writeln!(out, "no prepared DRA claims")?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = reply
        .claims
        .iter()
        .map(|c| {
            let (devices, cdi) = device_columns(&c.devices);
            vec![
                c.driver.clone(),
                c.claim.to_string(),
                devices,
                cdi,
                if c.prepared {
                    ago(c.prepared_at_unix_ms)
                } else {
                    // Recorded before its driver was called; the driver has
                    // not prepared it (yet).
                    format!("pending since {}", ago(c.prepared_at_unix_ms))
                },
            ]
        })
        .collect();
    table(
        &["DRIVER", "CLAIM", "DEVICES", "CDI IDS", "PREPARED"],
        &rows,
        out,
    )
}

/// The DEVICES (`pool/device`) and CDI IDS columns of a claim's devices.
fn device_columns(devices: &[PreparedDevice]) -> (String, String) {
    let names: Vec<String> = devices
        .iter()
        .map(|d| format!("{}/{}", d.pool, d.device))
        .collect();
    let cdi: Vec<&str> = devices
        .iter()
        .flat_map(|d| d.cdi_device_ids.iter().map(String::as_str))
        .collect();
    (names.join(","), cdi.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeplugins::dra::{ClaimRef, RecordedClaim};

    fn record(driver: &str, device: &str) -> RecordedClaim {
        RecordedClaim {
            driver: driver.into(),
            claim: ClaimRef {
                namespace: "ml".into(),
                name: "mixed".into(),
                uid: "uid-1".into(),
            },
            devices: vec![PreparedDevice {
                request_names: vec!["req".into()],
                pool: "node-1".into(),
                device: device.into(),
                cdi_device_ids: vec![format!("{driver}/dev={device}")],
                share_id: None,
            }],
            prepared_at_unix_ms: 0,
            prepared: true,
            pods: Vec::new(),
        }
    }

    #[test]
    fn claims_show_a_row_per_claim_and_driver() {
        let reply = DraClaimsReply {
            claims: vec![
                record("gpu.example.com", "gpu-0"),
                record("nic.example.com", "nic-0"),
            ],
            checkpoint_error: None,
        };
        let mut out = Vec::new();
        claims(&reply, Format::Table, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().take(4).collect())
            .collect();
        assert_eq!(
            rows,
            [
                [
                    "gpu.example.com",
                    "ml/mixed/uid-1",
                    "node-1/gpu-0",
                    "gpu.example.com/dev=gpu-0"
                ],
                [
                    "nic.example.com",
                    "ml/mixed/uid-1",
                    "node-1/nic-0",
                    "nic.example.com/dev=nic-0"
                ],
            ],
            "{text}"
        );
    }
}
