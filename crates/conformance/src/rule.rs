//! A conformance rule's outcome, and the report of a run.

use std::time::Duration;

/// What one rule found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "verdict", content = "detail", rename_all = "UPPERCASE")]
#[non_exhaustive]
pub enum Verdict {
    /// The plugin does what the rule asks; what was seen.
    Pass(String),
    /// It does not, and the kubelet mishandles such a plugin; what was
    /// seen instead.
    Fail(String),
    /// It does not, but the kubelet copes: poor practice, never a failed
    /// run; what was seen.
    Warn(String),
    /// The rule could not run; why.
    Skip(String),
}

impl Verdict {
    /// The verdict's word, as printed: `PASS`, `FAIL`, `WARN` or `SKIP`.
    pub fn word(&self) -> &'static str {
        match self {
            Self::Pass(_) => "PASS",
            Self::Fail(_) => "FAIL",
            Self::Warn(_) => "WARN",
            Self::Skip(_) => "SKIP",
        }
    }

    /// What was seen, or why it was skipped.
    pub fn detail(&self) -> &str {
        match self {
            Self::Pass(d) | Self::Fail(d) | Self::Warn(d) | Self::Skip(d) => d,
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
#[non_exhaustive]
pub struct Outcome {
    /// The rule's stable id, such as `device.allocate`.
    pub id: &'static str,
    /// What the rule asks of a plugin, in one line.
    pub statement: &'static str,
    /// The kubelet behaviour the rule stands for.
    pub upstream: &'static str,
    /// What it found.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// How long the rule took.
    pub millis: u64,
}

/// Every rule's outcome against one plugin.
#[derive(Debug, Default, serde::Serialize)]
#[non_exhaustive]
pub struct Report {
    /// The plugin, as the tool met it (its registration socket or resource).
    pub plugin: String,
    /// Its type: `CSIPlugin`, `DevicePlugin` or `DRAPlugin`.
    pub plugin_type: String,
    /// Every rule of its type, in a fixed order.
    pub outcomes: Vec<Outcome>,
    /// The rules to run: one left out is recorded as skipped, not run.
    #[serde(skip)]
    pub(crate) selection: Selection,
}

impl Outcome {
    /// The outcome of rule `id` (which asks `statement` of a plugin and
    /// stands for the kubelet behaviour `upstream`): `verdict`, found in
    /// `took`. For tools that render reports of their own.
    pub fn new(
        id: &'static str,
        statement: &'static str,
        upstream: &'static str,
        verdict: Verdict,
        took: Duration,
    ) -> Self {
        Self {
            id,
            statement,
            upstream,
            verdict,
            millis: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl Report {
    /// A report of no outcome yet, about `plugin` of type `plugin_type`.
    pub fn new(plugin: impl Into<String>, plugin_type: impl Into<String>) -> Self {
        Self {
            plugin: plugin.into(),
            plugin_type: plugin_type.into(),
            ..Self::default()
        }
    }

    /// Records `verdict` for `rule`, which took `took`.
    pub(crate) fn record(&mut self, rule: &Rule, verdict: Verdict, took: Duration) {
        let outcome = Outcome::new(rule.id, rule.statement, rule.upstream, verdict, took);
        self.outcomes.push(outcome);
    }

    /// Runs `check` as `rule` and records what it finds, with its duration;
    /// a rule the selection leaves out is recorded as skipped, and `check`
    /// never runs (a rule that would hang or wait out a deadline costs
    /// nothing).
    pub(crate) async fn run(&mut self, rule: &Rule, check: impl Future<Output = Verdict>) {
        if let Some(why) = self.selection.leaves_out(rule.id) {
            self.record(rule, Verdict::Skip(why), Duration::ZERO);
            return;
        }
        self.run_needed(rule, check).await;
    }

    /// Runs `check` as `rule` whether or not the selection leaves it out:
    /// what it finds (GetInfo's answer, the first device list, a prepare's
    /// answer, the plugin stopped or started) is what the rules after it
    /// need. A left-out rule's verdict is then reported as skipped.
    pub(crate) async fn run_needed(&mut self, rule: &Rule, check: impl Future<Output = Verdict>) {
        let start = tokio::time::Instant::now();
        let verdict = check.await;
        self.record(rule, verdict, start.elapsed());
    }

    /// Whether the selection leaves out every rule of `rules`, which are
    /// then recorded as skipped (none of them needs to run).
    pub(crate) fn left_out(&mut self, rules: &[&Rule]) -> bool {
        let whys: Option<Vec<String>> = rules
            .iter()
            .map(|rule| self.selection.leaves_out(rule.id))
            .collect();
        let Some(whys) = whys else {
            return false;
        };
        for (rule, why) in rules.iter().zip(whys) {
            self.record(rule, Verdict::Skip(why), Duration::ZERO);
        }
        true
    }

    /// Records every rule in `rules` as skipped, for `why`.
    pub(crate) fn skip_all(&mut self, rules: &[&Rule], why: &str) {
        for rule in rules {
            self.record(rule, Verdict::Skip(why.to_string()), Duration::ZERO);
        }
    }

    /// Reports every rule of `every` that did not run as skipped, saying
    /// which failed rule kept it from running, and puts the outcomes in
    /// `every`'s order: the same plugin gives the same cases every run.
    pub(crate) fn complete(&mut self, every: &[&'static Rule]) {
        let first_failure = self
            .outcomes
            .iter()
            .find(|o| matches!(o.verdict, Verdict::Fail(_)))
            .map(|o| o.id);
        for rule in every {
            if self.outcomes.iter().any(|o| o.id == rule.id) {
                continue;
            }
            let why = match first_failure {
                Some(id) => format!("not run: {id} failed before it"),
                None => "not run".to_string(),
            };
            self.record(rule, Verdict::Skip(why), Duration::ZERO);
        }
        let place = |id: &str| every.iter().position(|r| r.id == id).unwrap_or(every.len());
        self.outcomes.sort_by_key(|o| place(o.id));
    }

    /// Reports the rules `selection` leaves out as skipped, whatever they
    /// found: they neither fail the run nor show a verdict.
    pub(crate) fn select(&mut self, selection: &Selection) {
        for outcome in &mut self.outcomes {
            if let Some(why) = selection.leaves_out(outcome.id) {
                outcome.verdict = Verdict::Skip(why);
            }
        }
    }

    /// Whether `rule` ran and failed.
    pub(crate) fn failed(&self, rule: &Rule) -> bool {
        self.outcomes
            .iter()
            .any(|o| o.id == rule.id && matches!(o.verdict, Verdict::Fail(_)))
    }

    /// How many rules failed.
    pub fn failures(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| matches!(o.verdict, Verdict::Fail(_)))
            .count()
    }

    /// The outcome of rule `id`.
    pub fn outcome(&self, id: &str) -> Option<&Outcome> {
        self.outcomes.iter().find(|o| o.id == id)
    }

    /// Checks that no rule failed, for `cargo test`.
    ///
    /// # Panics
    ///
    /// When a rule failed, listing every failed rule with what was seen and
    /// the kubelet behaviour it stands for.
    pub fn assert_conformant(&self) {
        let failed: Vec<String> = self
            .outcomes
            .iter()
            .filter(|o| matches!(o.verdict, Verdict::Fail(_)))
            .map(|o| format!("  {}: {}\n    ({})", o.id, o.verdict.detail(), o.upstream))
            .collect();
        assert!(
            failed.is_empty(),
            "{} of {} rules failed for {} ({}):\n{}",
            failed.len(),
            self.outcomes.len(),
            self.plugin,
            self.plugin_type,
            failed.join("\n")
        );
    }
}

/// Which rules a run reports (`--rules`, `--skip`): ids, or prefixes of
/// ids ending at a dot (`device.allocate` is `device.allocate` and every
/// `device.allocate.*`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Selection {
    /// Only these, when any.
    pub(crate) only: Vec<String>,
    /// Never these.
    pub(crate) skip: Vec<String>,
}

impl Selection {
    /// Why rule `id` is left out, if it is.
    fn leaves_out(&self, id: &str) -> Option<String> {
        let matches = |pattern: &String| {
            let pattern = pattern.trim_end_matches('.');
            id == pattern
                || id
                    .strip_prefix(pattern)
                    .is_some_and(|rest| rest.starts_with('.'))
        };
        if let Some(pattern) = self.skip.iter().find(|p| matches(p)) {
            return Some(format!("left out by --skip {pattern}"));
        }
        if !self.only.is_empty() && !self.only.iter().any(matches) {
            return Some("not among --rules".to_string());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_rule_left_out_is_recorded_as_skipped_and_never_run() {
        let rule = Rule {
            id: "device.allocate.concurrent",
            statement: "answers concurrent Allocate calls",
            upstream: "a test rule",
        };
        let mut report = Report {
            selection: Selection {
                only: Vec::new(),
                skip: vec![rule.id.into()],
            },
            ..Report::default()
        };
        let mut ran = false;
        report
            .run(&rule, async {
                ran = true;
                Verdict::Fail("ran".into())
            })
            .await;
        assert!(!ran, "the check of a left-out rule runs");
        assert!(matches!(
            &report.outcome(rule.id).map(|o| &o.verdict),
            Some(Verdict::Skip(why)) if why.contains("--skip")
        ));
    }

    #[test]
    fn rules_are_selected_by_id_or_by_prefix_at_a_dot() {
        let selection = Selection {
            only: vec!["device.allocate".into(), "registration.".into()],
            skip: vec!["device.allocate.concurrent".into()],
        };
        assert_eq!(selection.leaves_out("device.allocate"), None);
        assert_eq!(selection.leaves_out("device.allocate.unknown-ids"), None);
        assert_eq!(selection.leaves_out("registration.get-info"), None);
        assert!(
            selection
                .leaves_out("device.allocate.concurrent")
                .is_some_and(|why| why.contains("--skip"))
        );
        // A prefix ends at a dot: `device.allocate` is not `device.allocates`.
        assert!(selection.leaves_out("device.allocates").is_some());
        assert!(selection.leaves_out("device.options").is_some());
        assert_eq!(Selection::default().leaves_out("dra.prepare"), None);
    }
}
