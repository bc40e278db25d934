//! The claims the DRA rules prepare: from `--claims FILE`, or made up.
//! A driver that reads its claims from the API server needs real ones
//! (allocated to it); one that does not takes any.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use nodeplugins_api::dra::v1;

/// A claim to prepare.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct TestClaim {
    pub(crate) uid: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// The driver is expected to refuse it (`dra.prepare.per-claim-errors`).
    #[serde(default)]
    pub(crate) fails: bool,
    /// Made up by the tool: any UID will do, so concurrent batches get
    /// claims of their own.
    #[serde(skip)]
    pub(crate) made_up: bool,
}

/// A UID unique to this run, from the clock.
fn run_uid(suffix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "c0f0a000-{:04x}-4000-8000-{:012x}{suffix}",
        std::process::id() & 0xffff,
        nanos & 0xffff_ffff_ffff
    )
}

impl TestClaim {
    /// The claim as the wire carries it.
    pub(crate) fn wire(&self) -> v1::Claim {
        v1::Claim {
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            name: self.name.clone(),
        }
    }

    /// A claim no driver has seen.
    pub(crate) fn unknown() -> Self {
        Self {
            uid: run_uid("-unknown"),
            namespace: "default".into(),
            name: "nodeplugins-conformance-unknown".into(),
            fails: false,
            made_up: true,
        }
    }

    /// A made-up claim under another UID; a given claim stays itself (its
    /// driver may look it up), so concurrent batches share it.
    pub(crate) fn variant(&self, tag: &str) -> Self {
        if !self.made_up {
            return self.clone();
        }
        Self {
            uid: format!("{}-{tag}", self.uid),
            ..self.clone()
        }
    }
}

/// Two made-up claims in `default`.
pub(crate) fn made_up() -> Vec<TestClaim> {
    (0..2)
        .map(|i| TestClaim {
            uid: run_uid(&format!("-{i}")),
            namespace: "default".into(),
            name: format!("nodeplugins-conformance-{i}"),
            fails: false,
            made_up: true,
        })
        .collect()
}

/// The claims of `file`: a JSON list of `{"uid", "namespace", "name",
/// "fails"}`.
pub(crate) fn load(file: &Path) -> Result<Vec<TestClaim>, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("read {}: {e}", file.display()))?;
    let claims: Vec<TestClaim> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    if claims.iter().all(|c| c.fails) {
        return Err(format!(
            "{}: every claim is expected to fail; at least one must prepare",
            file.display()
        ));
    }
    Ok(claims)
}
