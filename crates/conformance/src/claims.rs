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

/// The claims the API server has allocated devices of `driver` to, read
/// through `client`, and one that does not exist, which the driver must
/// fail on its own.
#[cfg(feature = "kube")]
pub(crate) async fn from_api(
    client: &kube::Client,
    driver: &str,
) -> Result<Vec<TestClaim>, String> {
    use k8s_openapi::api::resource::v1::ResourceClaim;
    let claims: kube::Api<ResourceClaim> = kube::Api::all(client.clone());
    let listed = claims
        .list(&Default::default())
        .await
        .map_err(|e| format!("list ResourceClaims: {e}"))?;
    let mut found: Vec<TestClaim> = listed
        .items
        .into_iter()
        .filter(|claim| {
            claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .is_some_and(|d| d.results.iter().flatten().any(|r| r.driver == driver))
        })
        .filter_map(|claim| {
            Some(TestClaim {
                uid: claim.metadata.uid?,
                namespace: claim.metadata.namespace?,
                name: claim.metadata.name?,
                fails: false,
                made_up: false,
            })
        })
        .collect();
    if found.is_empty() {
        return Err(format!(
            "the API server has no ResourceClaim allocated to {driver}: make one for the DRA rules"
        ));
    }
    found.push(TestClaim {
        uid: run_uid("-missing"),
        namespace: "default".into(),
        name: "nodeplugins-conformance-missing".into(),
        fails: true,
        made_up: false,
    });
    Ok(found)
}
