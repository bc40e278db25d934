//! The properties the fuzz targets `device_checkpoint` and `names_and_paths`
//! check (fuzz/README.md), on seeded random input in every test run: a
//! checkpoint file damaged anyhow is an error and never a partial
//! checkpoint, and each validator of what plugins send holds its promise.
//! The coverage-guided runs of the same targets are `scripts/fuzz`'s.

#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use nodeplugins::device::DeviceCheckpoint;
use nodeplugins::dra::{ClaimRef, choose_service};
use nodeplugins_api::checkpoint::{decode, encode};
use nodeplugins_api::csi_version::highest_supported;
use nodeplugins_api::names::{is_dns_subdomain, is_extended_resource_name, is_plain_socket_name};
use nodeplugins_sdk::socket_name::{registration_socket_name, rolling_update_socket_name};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn sample_checkpoint() -> DeviceCheckpoint {
    DeviceCheckpoint {
        allocations: Vec::new(),
        registered_devices: BTreeMap::from([
            (
                "example.com/gpu".to_string(),
                vec!["gpu-0".into(), "gpu-1".into()],
            ),
            ("example.com/nic".to_string(), vec!["nic-0".into()]),
        ]),
    }
}

/// `bytes` with one random change: a byte flipped, bytes cut off, dropped or
/// put in.
fn damage(rng: &mut StdRng, bytes: &mut Vec<u8>) {
    match rng.random_range(0..4) {
        0 if !bytes.is_empty() => {
            let at = rng.random_range(0..bytes.len());
            bytes[at] ^= 1 << rng.random_range(0..8);
        }
        1 => bytes.truncate(rng.random_range(0..=bytes.len())),
        2 if !bytes.is_empty() => {
            let at = rng.random_range(0..bytes.len());
            bytes.remove(at);
        }
        _ => {
            let at = rng.random_range(0..=bytes.len());
            bytes.insert(at, rng.random_range(0x20..0x7f));
        }
    }
}

/// What the `device_checkpoint` fuzz target asserts of `bytes`.
fn check_checkpoint_bytes(bytes: &[u8]) -> Option<DeviceCheckpoint> {
    let checkpoint: DeviceCheckpoint = decode(bytes).ok()?;
    let again = encode(&checkpoint).expect("a decoded checkpoint encodes");
    assert_eq!(
        decode::<DeviceCheckpoint>(&again).expect("our own encoding decodes"),
        checkpoint
    );
    Some(checkpoint)
}

#[test]
fn a_damaged_device_checkpoint_is_refused_whole_and_whatever_decodes_encodes_back() {
    let original = sample_checkpoint();
    let bytes = encode(&original).expect("the sample encodes");
    assert_eq!(check_checkpoint_bytes(&bytes), Some(original.clone()));
    for seed in 0..2000u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut damaged = bytes.clone();
        for _ in 0..rng.random_range(1..4) {
            damage(&mut rng, &mut damaged);
        }
        if let Some(decoded) = check_checkpoint_bytes(&damaged) {
            // Only a change the checksum does not cover (the JSON's layout
            // around the data) may still decode, and then to the whole
            // checkpoint, never to a part of it.
            assert_eq!(decoded, original, "seed {seed}: {damaged:?}");
        }
    }
    for seed in 0..500u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let noise: Vec<u8> = (0..rng.random_range(0..200))
            .map(|_| rng.random())
            .collect();
        check_checkpoint_bytes(&noise);
    }
}

/// A random string of the characters names are made of, and some that
/// they must not hold.
fn random_name(rng: &mut StdRng) -> String {
    const CHARS: &[char] = &[
        'a', 'z', '0', '9', '-', '.', '_', '/', 'A', ' ', ':', '\u{e9}', '\u{0}', 'v', '1',
    ];
    (0..rng.random_range(0..80))
        .map(|_| CHARS[rng.random_range(0..CHARS.len())])
        .collect()
}

/// What the `names_and_paths` fuzz target asserts of `parts`.
fn check_names(parts: &[String]) {
    let first = parts[0].as_str();
    if is_plain_socket_name(first) {
        assert!(
            !first.contains('/') && first != "." && first != "..",
            "{first:?}"
        );
    }
    if is_dns_subdomain(first) {
        assert!(first.len() <= 253 && first.is_ascii(), "{first:?}");
    }
    if is_extended_resource_name(first) {
        assert_eq!(first.matches('/').count(), 1, "{first:?}");
    }
    if let Ok(claim) = first.parse::<ClaimRef>() {
        assert_eq!(claim.to_string(), first);
    }
    if let Ok(service) = choose_service(parts) {
        assert!(parts.iter().any(|v| v == service.as_str()), "{parts:?}");
    }
    let _ = highest_supported(parts);
    assert!(!registration_socket_name(first).contains('/'), "{first:?}");
    if let [dir, driver, uid, ..] = parts {
        let dir = Path::new("/").join(dir.trim_start_matches('/'));
        if let Ok(name) = rolling_update_socket_name(&dir, driver, uid) {
            assert!(!name.contains('/'), "{name:?}");
            assert!(dir.join(&name).as_os_str().len() <= 107, "{name:?}");
        }
    }
}

#[test]
fn every_validator_of_what_plugins_send_holds_its_promise_on_random_names() {
    let known = [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "1.0.0",
        "v1beta1",
        "example.com/gpu",
        "ns/claim",
        "csi.example.com",
    ];
    for seed in 0..3000u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let parts: Vec<String> = (0..rng.random_range(1..5))
            .map(|_| {
                if rng.random_bool(0.3) {
                    known[rng.random_range(0..known.len())].to_string()
                } else {
                    random_name(&mut rng)
                }
            })
            .collect();
        check_names(&parts);
    }
}
