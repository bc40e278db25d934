//! Arbitrary names and paths through every validator the agent and the SDK
//! apply to what plugins send: no panic, and each accepted value has the
//! property the validator promises.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use nodeplugins::dra::{ClaimRef, choose_service};
use nodeplugins_api::csi_version::highest_supported;
use nodeplugins_api::names::{is_dns_subdomain, is_extended_resource_name, is_plain_socket_name};
use nodeplugins_sdk::socket_name::{registration_socket_name, rolling_update_socket_name};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parts: Vec<&str> = text.split('\u{0}').collect();
    let first = parts[0];

    if is_plain_socket_name(first) {
        assert!(!first.contains('/') && first != "." && first != "..");
    }
    if is_dns_subdomain(first) {
        assert!(first.len() <= 253 && first.is_ascii());
    }
    if is_extended_resource_name(first) {
        assert_eq!(first.matches('/').count(), 1);
    }
    if let Ok(claim) = first.parse::<ClaimRef>() {
        assert_eq!(claim.to_string(), first);
    }
    let versions: Vec<String> = parts.iter().map(|s| s.to_string()).collect();
    if let Ok(service) = choose_service(&versions) {
        assert!(versions.iter().any(|v| v == service.as_str()));
    }
    let _ = highest_supported(&versions);

    assert!(!registration_socket_name(first).contains('/'));
    if let [dir, driver, uid, ..] = parts.as_slice() {
        let dir = Path::new("/").join(dir.trim_start_matches('/'));
        if let Ok(name) = rolling_update_socket_name(&dir, driver, uid) {
            assert!(!name.contains('/'), "{name:?}");
            assert!(dir.join(&name).as_os_str().len() <= 107, "{name:?}");
        }
    }
});
