//! The output's primitives: the format asked for, durations and times
//! for people, and aligned tables.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Output format of inspection commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Aligned columns for people.
    Table,
    /// A JSON document for programs.
    Json,
}

/// How long ago a time (unix ms) was, for people.
pub(super) fn ago(unix_ms: u64) -> String {
    let then = UNIX_EPOCH + Duration::from_millis(unix_ms);
    let secs = SystemTime::now()
        .duration_since(then)
        .map_or(0, |d| d.as_secs());
    human(Duration::from_secs(secs)) + " ago"
}

/// A duration for people: seconds, minutes and seconds, or hours and
/// minutes.
pub(crate) fn human(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{}s", secs / 60, secs % 60),
        _ => format!("{}h{}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// Prints aligned columns; the last column is not padded.
pub(crate) fn table(
    headers: &[&str],
    rows: &[Vec<String>],
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[String]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            let w = *w;
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<w$}  "));
            }
        }
        text.trim_end().to_string()
    };
    let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    writeln!(out, "{}", line(&headers))?;
    for row in rows {
        writeln!(out, "{}", line(row))?;
    }
    Ok(())
}
