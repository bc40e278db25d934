//! Each rule a test case: a test target with `harness = false` whose
//! `main` hands its run to [`Conformance::test_main`], and `cargo test` or
//! nextest list, filter and report the rules as they do tests.

use std::process::ExitCode;

use libtest_mimic::{Arguments, Failed, Trial};

use super::{Conformance, Report, Verdict};

/// The name of the one test case of a run whose rules are unknown because
/// it could not be made.
const RUN_CASE: &str = "conformance";

impl Conformance {
    /// Runs the rules as the test cases of this test binary, reading the
    /// test harness's arguments (`--list`, a filter, `--skip`, `--exact`,
    /// `--ignored`), and returns its exit status: 101 when a rule failed.
    ///
    /// The plugin runs once for every case selected: a filter leaves the
    /// other rules out of the run (they do not run at all, except the
    /// rules the selected ones need, such as GetInfo), so that nextest,
    /// which runs each case in a process of its own, runs one rule per
    /// process. `--list` lists the rules without starting the plugin when
    /// they are known beforehand ([`Conformance::rule_ids`]); otherwise it
    /// runs the plugin to learn its type.
    ///
    /// A rule that passes is `ok`, a warning passes with `WARN` on
    /// standard error, a skipped rule is `ignored`, and a failure says
    /// what was seen and the kubelet behaviour the rule stands for. A run
    /// that could not be made fails every case with why.
    ///
    /// ```no_run
    /// // tests/conformance.rs, with `harness = false` in Cargo.toml
    /// fn main() -> std::process::ExitCode {
    ///     nodeplugins_conformance::Conformance::device_plugin("/tmp/my-plugin-test")
    ///         .exec("exec target/debug/my-device-plugin --dir /tmp/my-plugin-test")
    ///         .restarts(true)
    ///         .test_main()
    /// }
    /// ```
    pub fn test_main(self) -> ExitCode {
        self.test_main_with(&Arguments::from_args())
    }

    /// [`Conformance::test_main`] with the harness's arguments parsed.
    fn test_main_with(mut self, args: &Arguments) -> ExitCode {
        let known = self.rule_ids();
        if args.list
            && let Some(ids) = &known
        {
            let cases = ids.iter().map(|id| Trial::test(*id, || Ok(()))).collect();
            return libtest_mimic::run(args, cases).exit_code();
        }
        if let Some(ids) = &known {
            let selected: Vec<String> = ids
                .iter()
                .filter(|id| is_selected(args, id))
                .map(|id| id.to_string())
                .collect();
            if selected.is_empty() {
                // Nothing to run: the harness reports every case filtered out.
                let cases = ids.iter().map(|id| Trial::test(*id, || Ok(()))).collect();
                return libtest_mimic::run(args, cases).exit_code();
            }
            if selected.len() < ids.len() {
                self.options.selection.only = selected;
            }
        }
        let report = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime
                .block_on(self.run())
                .map_err(|error| error.to_string()),
            Err(error) => Err(format!("cannot start the async runtime: {error}")),
        };
        let cases = match report {
            Ok(report) => cases(report),
            Err(why) => known
                .unwrap_or_else(|| vec![RUN_CASE])
                .into_iter()
                .map(|id| {
                    let why = format!("the conformance run could not be made: {why}");
                    Trial::test(id, move || Err(Failed::from(why)))
                })
                .collect(),
        };
        libtest_mimic::run(args, cases).exit_code()
    }
}

/// Whether the harness's filter and `--skip` keep the case `id`, as the
/// harness decides it: a substring, or the whole name with `--exact`.
fn is_selected(args: &Arguments, id: &str) -> bool {
    let matches = |pattern: &str| {
        if args.exact {
            id == pattern
        } else {
            id.contains(pattern)
        }
    };
    args.filter.as_deref().is_none_or(matches) && !args.skip.iter().any(|p| matches(p))
}

/// One case per rule of `report`, in its order.
fn cases(report: Report) -> Vec<Trial> {
    let plugin = format!("{} ({})", report.plugin, report.plugin_type);
    report
        .outcomes
        .into_iter()
        .map(|outcome| {
            let id = outcome.id;
            let upstream = outcome.upstream;
            let plugin = plugin.clone();
            match outcome.verdict {
                Verdict::Pass(_) => Trial::test(id, || Ok(())),
                Verdict::Warn(seen) => Trial::test(id, move || {
                    eprintln!("WARN {id} ({plugin}): {seen}\n  ({upstream})");
                    Ok(())
                }),
                Verdict::Skip(why) => Trial::test(id, move || {
                    eprintln!("SKIP {id}: {why}");
                    Ok(())
                })
                .with_ignored_flag(true),
                Verdict::Fail(seen) => Trial::test(id, move || {
                    Err(Failed::from(format!(
                        "{plugin}: {seen}\n  (the kubelet: {upstream})"
                    )))
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(filter: Option<&str>, skip: &[&str], exact: bool) -> Arguments {
        Arguments {
            filter: filter.map(str::to_string),
            skip: skip.iter().map(|s| s.to_string()).collect(),
            exact,
            ..Arguments::default()
        }
    }

    #[test]
    fn cases_are_selected_as_the_test_harness_selects_them() {
        let id = "device.allocate.unknown-ids";
        assert!(is_selected(&args(None, &[], false), id));
        assert!(is_selected(&args(Some("allocate"), &[], false), id));
        assert!(!is_selected(
            &args(Some("allocate"), &["unknown"], false),
            id
        ));
        assert!(!is_selected(&args(Some("device.allocate"), &[], true), id));
        assert!(is_selected(&args(Some(id), &[], true), id));
        assert!(is_selected(&args(None, &["device.allocate"], true), id));
    }

    #[test]
    fn a_device_plugins_rules_are_known_before_it_starts() {
        let ids = Conformance::device_plugin("/nonexistent").rule_ids();
        let ids = ids.unwrap_or_default();
        assert!(ids.contains(&"device.allocate"), "{ids:?}");
        assert!(
            Conformance::registration("/nonexistent")
                .rule_ids()
                .is_none(),
            "a registration plugin's type is unknown until GetInfo"
        );
        let dra = Conformance::registration("/nonexistent")
            .expect(super::super::PluginKind::Dra)
            .rule_ids()
            .unwrap_or_default();
        assert!(dra.iter().any(|id| id.starts_with("dra.")), "{dra:?}");
    }
}
