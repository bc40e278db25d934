//! Printing a conformance report: a table for people, JSON for programs,
//! JUnit XML for CI systems.

use std::fmt::Write as _;
use std::io::Write;
use std::time::SystemTime;

use super::format::Format;
use nodeplugins_conformance::{Report, Verdict};

/// Prints each rule with its verdict and what was seen, then a summary.
pub(crate) fn report(report: &Report, format: Format, out: &mut impl Write) -> anyhow::Result<()> {
    if format == Format::Json {
        serde_json::to_writer_pretty(&mut *out, report)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "conformance of {} ({})",
        report.plugin, report.plugin_type
    )?;
    let width = report
        .outcomes
        .iter()
        .map(|o| o.id.len())
        .max()
        .unwrap_or(0);
    for outcome in &report.outcomes {
        writeln!(
            out,
            "{}  {:<width$}  {}",
            outcome.verdict.word(),
            outcome.id,
            outcome.verdict.detail()
        )?;
    }
    let count = |word: &str| {
        report
            .outcomes
            .iter()
            .filter(|o| o.verdict.word() == word)
            .count()
    };
    writeln!(
        out,
        "{} rules: {} passed, {} failed, {} warned, {} skipped",
        report.outcomes.len(),
        count("PASS"),
        count("FAIL"),
        count("WARN"),
        count("SKIP")
    )?;
    Ok(())
}

/// `text` with the five XML special characters escaped, and control
/// characters XML cannot carry dropped.
fn xml(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            '\t' | '\n' | '\r' => escaped.push(c),
            c if c.is_control() => {}
            c => escaped.push(c),
        }
    }
    escaped
}

/// Where and when a run took place, for the JUnit suite's `hostname` and
/// `timestamp`.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    /// When the run started.
    pub(crate) started: SystemTime,
    /// The machine it ran on.
    pub(crate) hostname: String,
}

impl RunInfo {
    /// A run starting now on this machine.
    pub(crate) fn now() -> Self {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".into());
        Self {
            started: SystemTime::now(),
            hostname,
        }
    }

    /// The start as JUnit's `timestamp` (ISO 8601, UTC, whole seconds).
    fn timestamp(&self) -> String {
        let seconds = self
            .started
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let at = i64::try_from(seconds)
            .ok()
            .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
        let format =
            time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
        at.format(&format).unwrap_or_default()
    }

    /// The attributes of a `testsuite` element for this run.
    fn attributes(&self) -> String {
        format!(
            "timestamp=\"{}\" hostname=\"{}\"",
            self.timestamp(),
            xml(&self.hostname)
        )
    }
}

/// A JUnit report of a run that stopped before any rule could run (the
/// plugin could not be met, a claims file could not be read): one test
/// case, `conformance`, in error with why, so a CI's report shows the run
/// rather than nothing.
pub(crate) fn junit_error(why: &str, run: &RunInfo) -> String {
    let mut doc = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    doc.push_str("<testsuites name=\"nodeplugins conformance\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0.000\">\n");
    let _ = writeln!(
        doc,
        "  <testsuite name=\"nodeplugins conformance\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0.000\" {}>",
        run.attributes()
    );
    let _ = writeln!(
        doc,
        "    <testcase classname=\"conformance\" name=\"conformance\" time=\"0.000\">\n      <error message=\"{}\" type=\"run\">{}</error>\n    </testcase>",
        xml(why),
        xml(why)
    );
    doc.push_str("  </testsuite>\n</testsuites>\n");
    doc
}

/// The report as JUnit XML: one test suite for the plugin, one test case per
/// rule (its id as the name, its statement and upstream behaviour in the
/// system output), failures and skips with what was seen.
pub(crate) fn junit(report: &Report, run: &RunInfo) -> String {
    let failures = report.failures();
    let skipped = report
        .outcomes
        .iter()
        .filter(|o| matches!(o.verdict, Verdict::Skip(_)))
        .count();
    let seconds: f64 = report
        .outcomes
        .iter()
        .map(|o| o.millis as f64 / 1000.0)
        .sum();
    let mut doc = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let suite = format!(
        "nodeplugins conformance: {} ({})",
        report.plugin, report.plugin_type
    );
    let _ = writeln!(
        doc,
        "<testsuites name=\"nodeplugins conformance\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{seconds:.3}\">",
        report.outcomes.len()
    );
    let _ = writeln!(
        doc,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" errors=\"0\" time=\"{seconds:.3}\" {}>",
        xml(&suite),
        report.outcomes.len(),
        run.attributes()
    );
    for outcome in &report.outcomes {
        let _ = write!(
            doc,
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\">",
            xml(&report.plugin_type),
            xml(outcome.id),
            outcome.millis as f64 / 1000.0
        );
        match &outcome.verdict {
            // A warning passes: JUnit has no verdict between; the system
            // output says it.
            Verdict::Pass(_) | Verdict::Warn(_) => {}
            Verdict::Fail(seen) => {
                let _ = write!(
                    doc,
                    "\n      <failure message=\"{}\" type=\"{}\">{}</failure>",
                    xml(seen),
                    xml(outcome.id),
                    xml(&format!(
                        "{}\nupstream: {}",
                        outcome.statement, outcome.upstream
                    ))
                );
            }
            Verdict::Skip(why) => {
                let _ = write!(doc, "\n      <skipped message=\"{}\"/>", xml(why));
            }
            // A verdict of a later version: its word says it.
            _ => {}
        }
        let _ = writeln!(
            doc,
            "\n      <system-out>{}</system-out>\n    </testcase>",
            xml(&format!(
                "{}{}\nupstream: {}\nseen: {}",
                match outcome.verdict {
                    Verdict::Warn(_) => "WARN: ",
                    _ => "",
                },
                outcome.statement,
                outcome.upstream,
                outcome.verdict.detail()
            ))
        );
    }
    doc.push_str("  </testsuite>\n</testsuites>\n");
    doc
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use nodeplugins_conformance::{Outcome, Verdict};

    #[test]
    fn junit_escapes_what_plugins_say_and_counts_each_verdict() {
        let mut report = Report::new("/tmp/<reg>.sock", "DRAPlugin");
        let outcome =
            |verdict, took| Outcome::new("a.rule", "does it", "the kubelet", verdict, took);
        let verdicts = [
            (Verdict::Pass("ok".into()), Duration::from_millis(5)),
            (
                Verdict::Fail("said \"<bad>\" & \u{1}left".into()),
                Duration::ZERO,
            ),
            (Verdict::Skip("why".into()), Duration::ZERO),
            (Verdict::Warn("copes".into()), Duration::ZERO),
        ];
        for (verdict, took) in verdicts {
            report.outcomes.push(outcome(verdict, took));
        }
        let run = RunInfo {
            started: SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_110_096),
            hostname: "node<1>".into(),
        };
        let doc = junit(&report, &run);
        assert!(
            doc.contains(r#"timestamp="2025-11-25T22:34:56" hostname="node&lt;1&gt;""#),
            "{doc}"
        );
        assert!(
            doc.contains(r#"tests="4" failures="1" skipped="1""#),
            "{doc}"
        );
        assert!(
            doc.contains("said &quot;&lt;bad&gt;&quot; &amp; left"),
            "{doc}"
        );
        assert!(doc.contains("/tmp/&lt;reg&gt;.sock"), "{doc}");
        assert!(doc.contains(r#"<skipped message="why"/>"#), "{doc}");
        assert!(doc.contains("WARN: "), "a warning passes, saying so: {doc}");
    }
}
