//! CSI version rules: pick the highest version a driver supports that this
//! node can use (major version 1), as the kubelet does.

use std::cmp::Ordering;
use std::fmt;

/// A version parsed leniently ("v1.2", "1.2.3", "1.2.3-rc1"): at least two
/// numeric components, an optional leading `v`, anything after the numbers ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(Vec<u64>);

impl Version {
    /// Parses `text`; `None` if it is not a version.
    pub fn parse_generic(text: &str) -> Option<Self> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let numeric_len = text
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(text.len());
        let numbers = text[..numeric_len].trim_end_matches('.');
        let mut components = Vec::new();
        for part in numbers.split('.') {
            if part.is_empty() || (part.len() > 1 && part.starts_with('0')) {
                return None;
            }
            components.push(part.parse().ok()?);
        }
        (components.len() >= 2).then_some(Self(components))
    }

    /// The major version.
    pub fn major(&self) -> u64 {
        self.0.first().copied().unwrap_or(0)
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let len = self.0.len().max(other.0.len());
        (0..len)
            .map(|i| {
                self.0
                    .get(i)
                    .unwrap_or(&0)
                    .cmp(other.0.get(i).unwrap_or(&0))
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        write!(f, "{}", parts.join("."))
    }
}

/// Why a driver's version list is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// The list is empty.
    #[error("plugin returned an empty list for supported versions")]
    Empty,
    /// No entry parses as a version of major 1 or lower.
    #[error("none of the versions reported by the driver ({0:?}) is a supported CSI version")]
    NoneSupported(Vec<String>),
    /// The highest usable version is 0.x, unsupported since Kubernetes 1.17.
    #[error(
        "highest supported version reported by the driver is {0}, but CSI versions below 1.0 are not supported"
    )]
    TooOld(String),
}

/// The highest version in `versions` with major version ≤ 1, which must be 1.x.
pub fn highest_supported(versions: &[String]) -> Result<Version, VersionError> {
    if versions.is_empty() {
        return Err(VersionError::Empty);
    }
    let highest = versions
        .iter()
        .filter_map(|v| Version::parse_generic(v))
        .filter(|v| v.major() <= 1)
        .max()
        .ok_or_else(|| VersionError::NoneSupported(versions.to_vec()))?;
    if highest.major() < 1 {
        return Err(VersionError::TooOld(highest.to_string()));
    }
    Ok(highest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn upstream_version_tables() {
        assert_eq!(
            highest_supported(&list(&["v1.2.3", "boo", "v0.3.0", "2.0.1"]))
                .unwrap()
                .to_string(),
            "1.2.3"
        );
        assert!(matches!(
            highest_supported(&list(&["4.9.12", "2.0.1"])),
            Err(VersionError::NoneSupported(_))
        ));
        assert_eq!(highest_supported(&[]), Err(VersionError::Empty));
        assert!(matches!(
            highest_supported(&list(&["var", "boo", "foo"])),
            Err(VersionError::NoneSupported(_))
        ));
        assert_eq!(
            highest_supported(&list(&["0.3.0", "v0.2"])),
            Err(VersionError::TooOld("0.3.0".into()))
        );
        assert_eq!(
            highest_supported(&list(&["1.0.0"])).unwrap().to_string(),
            "1.0.0"
        );
    }

    #[test]
    fn generic_parsing_is_lenient_but_not_sloppy() {
        assert_eq!(Version::parse_generic("v1.2").unwrap().to_string(), "1.2");
        assert_eq!(
            Version::parse_generic(" 1.10.0-rc.1 ").unwrap().to_string(),
            "1.10.0"
        );
        assert!(Version::parse_generic("1").is_none());
        assert!(Version::parse_generic("01.2").is_none());
        assert!(Version::parse_generic("x1.2").is_none());
        assert!(Version::parse_generic("1.10").unwrap() > Version::parse_generic("1.9.9").unwrap());
        assert_eq!(
            Version::parse_generic("1.2")
                .unwrap()
                .cmp(&Version::parse_generic("1.2.0").unwrap()),
            Ordering::Equal
        );
    }
}
