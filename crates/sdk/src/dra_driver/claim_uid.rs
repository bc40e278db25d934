//! A ResourceClaim's UID: what the driver's results are keyed by.

use std::borrow::Borrow;
use std::fmt;

/// The UID of a ResourceClaim (`metadata.uid`): a driver's results are
/// keyed by it. Looked up in a map by `&str` as well (it borrows as one).
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct ClaimUid(String);

impl ClaimUid {
    /// The UID `uid`.
    pub fn new(uid: impl Into<String>) -> Self {
        Self(uid.into())
    }

    /// The UID as the API writes it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The UID as a `String`.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for ClaimUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ClaimUid {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for ClaimUid {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<String> for ClaimUid {
    fn from(uid: String) -> Self {
        Self(uid)
    }
}

impl From<&str> for ClaimUid {
    fn from(uid: &str) -> Self {
        Self(uid.to_string())
    }
}

impl From<ClaimUid> for String {
    fn from(uid: ClaimUid) -> Self {
        uid.0
    }
}

impl PartialEq<str> for ClaimUid {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ClaimUid {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn a_map_keyed_by_uid_is_looked_up_by_str_and_serializes_as_a_plain_string() {
        let map = HashMap::from([(ClaimUid::new("4f1c"), 1)]);
        assert_eq!(map.get("4f1c"), Some(&1));
        let json = serde_json::to_string(&ClaimUid::new("4f1c")).unwrap();
        assert_eq!(json, "\"4f1c\"");
        let back: ClaimUid = serde_json::from_str(&json).unwrap();
        assert_eq!(back, "4f1c");
    }
}
