//! Printing a conformance check report.

use std::io::Write;

use super::format::Format;
use nodeplugins_conformance::check::Report;

/// Prints each check with PASS or FAIL and why, then a summary line.
pub(crate) fn report(report: &Report, format: Format, out: &mut impl Write) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, report)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "checking {}", report.socket)?;
    let width = report
        .checks
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    for check in &report.checks {
        let verdict = if check.passed { "PASS" } else { "FAIL" };
        writeln!(out, "{verdict}  {:<width$}  {}", check.name, check.detail)?;
    }
    writeln!(
        out,
        "{} checks, {} failed",
        report.checks.len(),
        report.failures()
    )?;
    Ok(())
}
