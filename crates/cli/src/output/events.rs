//! Printing the agent's events, one line each.

use std::io::Write;

use nodeplugins::admin::AdminEvent;

use super::format::Format;

/// `HH:MM:SS.mmmZ` of a Unix millisecond time.
fn clock(unix_ms: u64) -> String {
    let ms = unix_ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}Z",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// The column headers of [`event`] lines.
pub(crate) fn header(format: Format, out: &mut impl Write) -> anyhow::Result<()> {
    if format == Format::Table {
        writeln!(
            out,
            "{:<13} {:<8} {:<17} {:<40} DETAIL",
            "TIME", "SOURCE", "EVENT", "SUBJECT"
        )?;
    }
    Ok(())
}

/// `ENDPOINT: DETAIL`, either part when the other is missing.
fn endpoint_and_detail(endpoint: &Option<String>, detail: &Option<String>) -> String {
    [endpoint, detail]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(": ")
}

/// Prints one event: a JSON line, or a table row.
pub(crate) fn event(
    event: &AdminEvent,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer(&mut *out, event)?;
        writeln!(out)?;
        return Ok(());
    }
    let (at, source, kind, subject, detail) = match event {
        AdminEvent::PluginManager(e) => {
            let subject = match &e.plugin {
                Some(p) => format!("{} {}", p.plugin_type, p.name),
                None => e.socket_path.display().to_string(),
            };
            let mut detail = e.socket_path.display().to_string();
            if let Some(error) = &e.error {
                detail = format!("{error} ({detail})");
            }
            let kind = serde_json::to_value(e.kind)?;
            (e.at_unix_ms, "registry", kind, subject, detail)
        }
        AdminEvent::Dra(e) => {
            let detail = endpoint_and_detail(&e.endpoint, &e.detail);
            let kind = serde_json::to_value(e.kind)?;
            (e.at_unix_ms, "dra", kind, e.driver.clone(), detail)
        }
        AdminEvent::Device(e) => {
            let detail = endpoint_and_detail(&e.endpoint, &e.detail);
            let kind = serde_json::to_value(e.kind)?;
            (e.at_unix_ms, "device", kind, e.resource.clone(), detail)
        }
        AdminEvent::Kube(e) => {
            let kind = serde_json::to_value(e.kind)?;
            let detail = e.detail.clone().unwrap_or_default();
            (e.at_unix_ms, "kube-api", kind, e.write.to_string(), detail)
        }
    };
    let kind = kind.as_str().unwrap_or_default().to_string();
    writeln!(
        out,
        "{:<13} {:<8} {:<17} {:<40} {detail}",
        clock(at),
        source,
        kind,
        subject
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_shows_the_utc_time_of_day() {
        // 2026-11-22T08:00:00.123Z
        assert_eq!(clock(1_795_334_400_123), "08:00:00.123Z");
        assert_eq!(clock(59_999), "00:00:59.999Z");
    }
}
