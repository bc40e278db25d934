//! A conformance rule's outcome, and the report of a run.

use std::time::Duration;

/// What one rule found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "verdict", content = "detail", rename_all = "UPPERCASE")]
pub(crate) enum Verdict {
    /// The plugin does what the rule asks; what was seen.
    Pass(String),
    /// It does not; what was seen instead.
    Fail(String),
    /// The rule could not run; why.
    Skip(String),
}

impl Verdict {
    /// The verdict's word, as printed.
    pub(crate) fn word(&self) -> &'static str {
        match self {
            Self::Pass(_) => "PASS",
            Self::Fail(_) => "FAIL",
            Self::Skip(_) => "SKIP",
        }
    }

    /// What was seen, or why it was skipped.
    pub(crate) fn detail(&self) -> &str {
        match self {
            Self::Pass(d) | Self::Fail(d) | Self::Skip(d) => d,
        }
    }

    /// Pass when `ok`, else fail, with `detail` either way.
    pub(crate) fn check(ok: bool, detail: impl Into<String>) -> Self {
        if ok {
            Self::Pass(detail.into())
        } else {
            Self::Fail(detail.into())
        }
    }

    /// Pass with the `Ok` text, fail with the `Err` text.
    pub(crate) fn from_result(result: Result<String, String>) -> Self {
        match result {
            Ok(seen) => Self::Pass(seen),
            Err(seen) => Self::Fail(seen),
        }
    }
}

/// A rule of the kubelet's contract with a plugin.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rule {
    /// A stable id, such as `device.allocate.unknown-ids`.
    pub(crate) id: &'static str,
    /// What a plugin must do, in one line.
    pub(crate) statement: &'static str,
    /// The upstream behaviour the rule stands for.
    pub(crate) upstream: &'static str,
}

/// One rule's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Outcome {
    pub(crate) id: &'static str,
    pub(crate) statement: &'static str,
    pub(crate) upstream: &'static str,
    #[serde(flatten)]
    pub(crate) verdict: Verdict,
    /// How long the rule took.
    pub(crate) millis: u64,
}

/// Every rule's outcome against one plugin.
#[derive(Debug, Default, serde::Serialize)]
pub(crate) struct Report {
    /// The plugin, as the tool met it (its registration socket or resource).
    pub(crate) plugin: String,
    /// Its type: `CSIPlugin`, `DevicePlugin` or `DRAPlugin`.
    pub(crate) plugin_type: String,
    pub(crate) outcomes: Vec<Outcome>,
}

impl Report {
    /// Records `verdict` for `rule`, which took `took`.
    pub(crate) fn record(&mut self, rule: &Rule, verdict: Verdict, took: Duration) {
        self.outcomes.push(Outcome {
            id: rule.id,
            statement: rule.statement,
            upstream: rule.upstream,
            verdict,
            millis: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        });
    }

    /// Runs `check` as `rule` and records what it finds, with its duration.
    pub(crate) async fn run(&mut self, rule: &Rule, check: impl Future<Output = Verdict>) {
        let start = tokio::time::Instant::now();
        let verdict = check.await;
        self.record(rule, verdict, start.elapsed());
    }

    /// Records every rule in `rules` as skipped, for `why`.
    pub(crate) fn skip_all(&mut self, rules: &[&Rule], why: &str) {
        for rule in rules {
            self.record(rule, Verdict::Skip(why.to_string()), Duration::ZERO);
        }
    }

    /// How many rules failed.
    pub(crate) fn failures(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| matches!(o.verdict, Verdict::Fail(_)))
            .count()
    }
}
