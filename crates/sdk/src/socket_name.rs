//! Registration socket names, including per-instance names for rolling
//! updates (several instances of one driver registered side by side).

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use nodeplugins_api::transport::MAX_SOCKET_PATH_LEN;
use sha2::{Digest, Sha256};

/// The suffix of every registration socket name.
pub const SUFFIX: &str = "-reg.sock";

/// The default registration socket name, `<name>-reg.sock`, with any `/`
/// (device plugin names are `vendor/resource`) replaced by `_`.
pub fn registration_socket_name(name: &str) -> String {
    format!("{}{SUFFIX}", name.replace('/', "_"))
}

/// No candidate name fits in `sun_path` under the registry directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no registration socket name for driver {driver:?} fits the {MAX_SOCKET_PATH_LEN}-byte socket path limit under {dir:?}"
)]
pub struct NameTooLong {
    /// The driver name.
    pub driver: String,
    /// The registry directory.
    pub dir: String,
}

fn hash(parts: &[&[u8]], bytes: usize) -> String {
    let mut hasher = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hasher.update([0u8]);
        }
        hasher.update(part);
    }
    URL_SAFE_NO_PAD.encode(&hasher.finalize()[..bytes])
}

/// The registration socket name for instance `uid` (such as a pod UID) of
/// `driver`: the first of these whose full path under `registry_dir` fits in
/// 107 bytes:
///
/// 1. `<driver>-<uid>-reg.sock`
/// 2. `<driver>-<h8>-reg.sock`, with `h8` the base64url (unpadded) of the first
///    8 bytes of SHA-256(uid)
/// 3. `dra-<h16>-reg.sock`, with `h16` the base64url of the first 16 bytes of
///    SHA-256(driver, NUL, uid)
///
/// Deterministic, and distinct for distinct (driver, uid) pairs up to hash
/// collisions.
pub fn rolling_update_socket_name(
    registry_dir: &Path,
    driver: &str,
    uid: &str,
) -> Result<String, NameTooLong> {
    // Names come from plugins; a '/' would make the name a path.
    let (name, id) = (driver.replace('/', "_"), uid.replace('/', "_"));
    let candidates = [
        format!("{name}-{id}{SUFFIX}"),
        format!("{name}-{}{SUFFIX}", hash(&[uid.as_bytes()], 8)),
        format!(
            "dra-{}{SUFFIX}",
            hash(&[driver.as_bytes(), uid.as_bytes()], 16)
        ),
    ];
    candidates
        .into_iter()
        .find(|name| registry_dir.join(name).as_os_str().len() <= MAX_SOCKET_PATH_LEN)
        .ok_or_else(|| NameTooLong {
            driver: driver.into(),
            dir: registry_dir.display().to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = "/var/lib/kubelet/plugins_registry";
    const UID: &str = "6a3c8b5e-1f2d-4c9a-9e7b-0d1f2a3b4c5d";

    fn name(dir: &str, driver: &str, uid: &str) -> String {
        rolling_update_socket_name(Path::new(dir), driver, uid).unwrap()
    }

    #[test]
    fn default_names_never_contain_a_slash() {
        assert_eq!(
            registration_socket_name("gpu.example.com"),
            "gpu.example.com-reg.sock"
        );
        assert_eq!(
            registration_socket_name("example.com/device"),
            "example.com_device-reg.sock"
        );
    }

    #[test]
    fn length_bound() {
        for len in [1, 10, 40, 60, 80, 120, 250] {
            let driver = "d".repeat(len);
            let n = name(DIR, &driver, UID);
            assert!(
                Path::new(DIR).join(&n).as_os_str().len() <= MAX_SOCKET_PATH_LEN,
                "{n}"
            );
        }
    }

    #[test]
    fn prefers_full_uid() {
        assert_eq!(
            name(DIR, "gpu.example.com", UID),
            format!("gpu.example.com-{UID}-reg.sock")
        );
    }

    #[test]
    fn uses_hashed_uid_for_long_driver_name() {
        let driver = "a-rather-long-driver-name.example.com";
        let n = name(DIR, driver, UID);
        assert!(
            n.starts_with(&format!("{driver}-")) && !n.contains(UID),
            "{n}"
        );
        assert_eq!(n.len(), driver.len() + 1 + 11 + SUFFIX.len());
    }

    #[test]
    fn uses_shortest_form_for_very_long_driver_name() {
        let driver = format!("{}.example.com", "x".repeat(60));
        let n = name(DIR, &driver, UID);
        assert!(n.starts_with("dra-") && !n.contains(&driver), "{n}");
        assert_eq!(n.len(), 4 + 22 + SUFFIX.len());
    }

    #[test]
    fn respects_custom_registry_dir() {
        let short = name("/r", "gpu.example.com", UID);
        assert!(short.contains(UID));
        let long_dir = format!("/{}", "k".repeat(60));
        let n = name(&long_dir, "gpu.example.com", UID);
        assert!(!n.contains(UID), "{n}");
        assert!(Path::new(&long_dir).join(&n).as_os_str().len() <= MAX_SOCKET_PATH_LEN);
        let impossible = format!("/{}", "k".repeat(100));
        assert!(
            rolling_update_socket_name(Path::new(&impossible), "gpu.example.com", UID).is_err()
        );
    }

    #[test]
    fn deterministic() {
        let driver = "y".repeat(70);
        assert_eq!(name(DIR, &driver, UID), name(DIR, &driver, UID));
        assert_eq!(
            name(DIR, "gpu.example.com", UID),
            name(DIR, "gpu.example.com", UID)
        );
    }

    #[test]
    fn distinct_inputs() {
        for driver in [
            "gpu.example.com".to_string(),
            "z".repeat(45),
            "w".repeat(70),
        ] {
            let a = name(DIR, &driver, UID);
            let b = name(DIR, &driver, "another-uid-0000-0000-000000000000");
            assert_ne!(a, b, "{driver}");
        }
        let long = "v".repeat(70);
        assert_ne!(name(DIR, &long, UID), name(DIR, &format!("{long}x"), UID));
    }

    #[test]
    fn slashes_never_make_the_name_a_path() {
        // Found by the names_and_paths fuzz target.
        let got = rolling_update_socket_name(Path::new("/"), "/", "%").unwrap();
        assert_eq!(got, "_-%-reg.sock");
        let got = rolling_update_socket_name(Path::new(DIR), "a/b", "c/d").unwrap();
        assert!(!got.contains('/'), "{got}");
    }
}
