//! Claims to prepare or unprepare, and what came of it.

use std::collections::BTreeMap;

/// A claim to prepare or unprepare.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ClaimRef {
    /// The ResourceClaim's namespace (its pod's).
    pub namespace: String,
    /// The ResourceClaim's name.
    pub name: String,
    /// The ResourceClaim's UID; results are keyed by it.
    pub uid: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.name, self.uid)
    }
}

/// A claim reference that is not `NAMESPACE/NAME/UID`; holds the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not NAMESPACE/NAME/UID")]
pub struct ClaimRefParseError(pub String);

impl std::str::FromStr for ClaimRef {
    type Err = ClaimRefParseError;

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
            _ => Err(ClaimRefParseError(s.to_string())),
        }
    }
}

/// A pod that uses prepared claims (in the claims' namespace), and which of
/// its containers do: what the pod-resources API reports per container.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClaimPod {
    /// The pod's UID, which the records key it by.
    pub uid: String,
    /// The pod's name, as the pod-resources API lists it.
    pub name: String,
    /// The containers that use the claims.
    pub containers: Vec<String>,
    /// The containers that use only some of a claim's requests, with those
    /// requests (a container's `resources.claims[].request`). A container
    /// of `containers` not named here uses the whole claim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Vec<String>>,
}

impl ClaimPod {
    /// A pod whose `containers` each use the whole claim.
    pub fn new(uid: impl Into<String>, name: impl Into<String>, containers: Vec<String>) -> Self {
        Self {
            uid: uid.into(),
            name: name.into(),
            containers,
            requests: BTreeMap::new(),
        }
    }

    /// Whether `container` gets `device` of the claim: it names the claim,
    /// and either uses it whole, or asks for a request the device serves.
    /// A device that names no request serves them all; one that serves a
    /// subrequest (`req/sub`, as `firstAvailable` allocates) also serves
    /// `req`, so a driver that hands back subrequest names still reaches
    /// the container that asked for the request.
    pub fn serves(&self, container: &str, device: &PreparedDevice) -> bool {
        if !self.containers.iter().any(|c| c == container) {
            return false;
        }
        let Some(requests) = self.requests.get(container) else {
            return true;
        };
        device.request_names.is_empty()
            || requests.iter().any(|wanted| {
                device.request_names.iter().any(|served| {
                    served == wanted
                        || served
                            .strip_prefix(wanted.as_str())
                            .is_some_and(|rest| rest.starts_with('/'))
                })
            })
    }

    /// Adds `other`'s containers (and their requests) to this pod's; says
    /// whether anything changed. A container using the whole claim in
    /// either stays whole.
    pub(crate) fn merge(&mut self, other: &ClaimPod) -> bool {
        let mut changed = false;
        for container in &other.containers {
            let known = self.containers.contains(container);
            let whole_here = known && !self.requests.contains_key(container);
            match other.requests.get(container) {
                None if known && !whole_here => {
                    self.requests.remove(container);
                    changed = true;
                }
                None => {}
                Some(_) if whole_here => {}
                Some(requests) => {
                    let mine = self.requests.entry(container.clone()).or_default();
                    for request in requests {
                        if !mine.contains(request) {
                            mine.push(request.clone());
                            changed = true;
                        }
                    }
                }
            }
            if !known {
                self.containers.push(container.clone());
                changed = true;
            }
        }
        changed
    }
}

/// One device a prepared claim got.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedDevice {
    /// The claim's requests this device serves; empty means all.
    pub request_names: Vec<String>,
    /// The pool of the ResourceSlice that lists the device.
    pub pool: String,
    /// The device's name in its pool.
    pub device: String,
    /// CDI device ids for the container runtime.
    pub cdi_device_ids: Vec<String>,
    /// Share id (v1 only).
    pub share_id: Option<String>,
}

/// The outcome of preparing one claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedClaim {
    /// The claim asked for.
    pub claim: ClaimRef,
    /// Its devices (empty on error).
    pub devices: Vec<PreparedDevice>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// The outcome of unpreparing one claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnpreparedClaim {
    /// The claim asked for.
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

    #[test]
    fn merging_containers_keeps_whole_claims_whole() {
        let mut pod = ClaimPod::new("pod-1", "train", vec!["a".into()]);
        let mut narrow = ClaimPod::new("pod-1", "train", vec!["a".into(), "b".into()]);
        narrow.requests.insert("a".into(), vec!["gpu".into()]);
        narrow.requests.insert("b".into(), vec!["gpu".into()]);
        assert!(pod.merge(&narrow));
        assert_eq!(pod.containers, ["a", "b"]);
        assert!(!pod.requests.contains_key("a"), "a uses the whole claim");
        assert_eq!(pod.requests["b"], ["gpu"]);
        assert!(!pod.merge(&narrow), "nothing new");
        let whole_b = ClaimPod::new("pod-1", "train", vec!["b".into()]);
        assert!(pod.merge(&whole_b));
        assert!(pod.requests.is_empty());
    }
}
