//! What a check of one socket found: each check and its outcome.

/// One check and its outcome.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct Check {
    /// What was checked: `socket`, `GetInfo`, `type`, `name`, `versions`,
    /// `endpoint`, or a call of the plugin's own service.
    pub name: String,
    /// Whether the plugin passed it.
    pub passed: bool,
    /// What was seen.
    pub detail: String,
}

/// Every check run against one socket.
#[derive(Debug, Default, serde::Serialize)]
#[non_exhaustive]
pub struct Report {
    /// The registration socket checked.
    pub socket: String,
    /// Each check, in the order run.
    pub checks: Vec<Check>,
}

impl Report {
    pub(crate) fn pass(&mut self, name: &str, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.into(),
            passed: true,
            detail: detail.into(),
        });
    }

    pub(crate) fn fail(&mut self, name: &str, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.into(),
            passed: false,
            detail: detail.into(),
        });
    }

    pub(super) fn record(&mut self, name: &str, result: Result<String, String>) -> bool {
        match result {
            Ok(detail) => {
                self.pass(name, detail);
                true
            }
            Err(detail) => {
                self.fail(name, detail);
                false
            }
        }
    }

    /// How many checks failed.
    pub fn failures(&self) -> usize {
        self.checks.iter().filter(|c| !c.passed).count()
    }
}
