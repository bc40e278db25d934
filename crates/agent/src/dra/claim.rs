//! Claims to prepare or unprepare, and what came of it.

/// A claim to prepare or unprepare.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID; results are keyed by it.
    pub uid: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.name, self.uid)
    }
}

impl std::str::FromStr for ClaimRef {
    type Err = String;

    /// Parses `NAMESPACE/NAME/UID`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [namespace, name, uid]
                if !namespace.is_empty() && !name.is_empty() && !uid.is_empty() =>
            {
                Ok(Self {
                    namespace: (*namespace).into(),
                    name: (*name).into(),
                    uid: (*uid).into(),
                })
            }
            _ => Err(format!("{s:?} is not NAMESPACE/NAME/UID")),
        }
    }
}

/// A pod that uses prepared claims (in the claims' namespace), and which of
/// its containers do: what the pod-resources API reports per container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClaimPod {
    /// Pod UID.
    pub uid: String,
    /// Pod name.
    pub name: String,
    /// The containers that use the claims.
    pub containers: Vec<String>,
}

/// One device a prepared claim got.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedDevice {
    /// The claim's requests this device serves; empty means all.
    pub request_names: Vec<String>,
    /// Pool name.
    pub pool: String,
    /// Device name.
    pub device: String,
    /// CDI device ids for the container runtime.
    pub cdi_device_ids: Vec<String>,
    /// Share id (v1 only).
    pub share_id: Option<String>,
}

/// The outcome of preparing one claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedClaim {
    /// The claim.
    pub claim: ClaimRef,
    /// Its devices (empty on error).
    pub devices: Vec<PreparedDevice>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// The outcome of unpreparing one claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnpreparedClaim {
    /// The claim.
    pub claim: ClaimRef,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// A per-claim result.
pub(crate) trait ClaimResult {
    /// Whether this claim failed.
    fn failed(&self) -> bool;
}

impl ClaimResult for PreparedClaim {
    fn failed(&self) -> bool {
        self.error.is_some()
    }
}

impl ClaimResult for UnpreparedClaim {
    fn failed(&self) -> bool {
        self.error.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_refs_parse_three_non_empty_parts() {
        let claim: ClaimRef = "ns/claim/uid-1".parse().unwrap();
        assert_eq!(claim.to_string(), "ns/claim/uid-1");
        for bad in ["ns/claim", "ns//uid", "a/b/c/d", ""] {
            assert!(bad.parse::<ClaimRef>().is_err(), "{bad}");
        }
    }
}
