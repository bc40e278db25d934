//! Printing the agent's events, one line each.

use std::io::Write;

use nodeplugins::event::{AgentEvent, EventSubject};

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
    event: &AgentEvent,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer(&mut *out, event)?;
        writeln!(out)?;
        return Ok(());
    }
    let (source, subject, detail) = match &event.subject {
        EventSubject::PluginManager {
            socket_path,
            plugin,
            error,
            ..
        } => {
            let subject = match plugin {
                Some(p) => format!("{} {}", p.plugin_type, p.name),
                None => socket_path.display().to_string(),
            };
            let mut detail = socket_path.display().to_string();
            if let Some(error) = error {
                detail = format!("{error} ({detail})");
            }
            ("registry", subject, detail)
        }
        EventSubject::Dra {
            driver,
            endpoint,
            detail,
        } => ("dra", driver.clone(), endpoint_and_detail(endpoint, detail)),
        EventSubject::Device {
            resource,
            endpoint,
            detail,
        } => (
            "device",
            resource.clone(),
            endpoint_and_detail(endpoint, detail),
        ),
        EventSubject::Kube { write, detail } => (
            "kube-api",
            write.to_string(),
            detail.clone().unwrap_or_default(),
        ),
        EventSubject::Pods {
            namespace,
            name,
            uid,
            detail,
        } => {
            let detail = match detail {
                Some(detail) => format!("{detail} (UID {uid})"),
                None => format!("UID {uid}"),
            };
            ("pods", format!("{namespace}/{name}"), detail)
        }
    };
    let at = event.at_unix_ms;
    let kind = serde_json::to_value(event.kind)?;
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
