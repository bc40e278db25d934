//! The guide's examples build as a plugin author's own crate would build
//! them: a new crate outside the workspace whose dependencies are exactly
//! the `Cargo.toml` lines `docs/plugin-authors.md` gives, with the SDK and
//! the conformance crate taken from this checkout. A name the examples use
//! that only a crate outside those lines provides (such as `async_trait` or
//! `tonic` at the SDK's versions) fails the build. The crate on its own
//! Kubernetes version also runs the conformance rules as its own tests, with
//! the guide's test target.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The ```toml blocks of the plugin author's guide, in order.
fn documented_blocks() -> Vec<String> {
    let guide = std::fs::read_to_string(workspace().join("docs/plugin-authors.md")).unwrap();
    guide
        .split("```toml\n")
        .skip(1)
        .map(|rest| rest[..rest.find("```").unwrap()].to_string())
        .collect()
}

/// The first ```toml block of the plugin author's guide.
fn documented_dependencies() -> String {
    documented_blocks()
        .into_iter()
        .next()
        .expect("a toml block in the guide")
}

/// The workspace's profile settings, so that the crate's dependencies are
/// built as the workspace builds them and the build reuses its target
/// directory's work.
fn profiles() -> String {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let start = manifest
        .find("[profile.")
        .expect("profiles in the workspace");
    manifest[start..].to_string()
}

/// The guide's test file: its ```rust block that starts with `first_line`.
fn documented_rust(first_line: &str) -> String {
    let guide = std::fs::read_to_string(workspace().join("docs/plugin-authors.md")).unwrap();
    let start = format!("```rust,ignore\n{first_line}\n");
    let rest = &guide[guide.find(&start).expect("the guide's test file") + start.len()..];
    rest[..rest.find("```").unwrap()].to_string()
}

/// A new crate outside the workspace, in `dir`: its `manifest` lines after
/// `[package]`, and the SDK's `examples` as its binaries, each named as
/// given (`(example file, binary name)`).
fn write_outside(dir: &Path, manifest: &str, examples: &[(&str, &str)]) {
    assert!(manifest.starts_with("[dependencies]\n"), "{manifest}");
    let sdk = workspace().join("crates/sdk");
    let conformance = workspace().join("crates/conformance");
    let manifest = format!(
        "[package]\nname = \"my-plugins\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         {manifest}\n[patch.crates-io]\nnodeplugins-sdk = {{ path = {sdk:?} }}\n\
         nodeplugins-conformance = {{ path = {conformance:?} }}\n\n{}",
        profiles()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    let bins = dir.join("src/bin");
    std::fs::create_dir_all(&bins).unwrap();
    for (example, name) in examples {
        let file = format!("{name}.rs");
        std::fs::copy(sdk.join("examples").join(example), bins.join(file)).unwrap();
    }
    // The workspace's lock file: the same versions, nothing fetched.
    std::fs::copy(workspace().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
}

/// Cargo with `args` in the crate `dir`, on the workspace's target
/// directory (its dependencies' builds are shared).
fn cargo(dir: &Path, args: &[&str]) -> std::process::Output {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        // Before the subcommand: what follows `--` is the test binary's.
        .arg("--offline")
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        // Built as a plugin author builds it: scripts/test compiles the
        // workspace's own crates with clippy's driver, not this one.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .output()
        .unwrap()
}

/// Builds the SDK's `examples` as the binaries of a new crate outside the
/// workspace whose `[dependencies]` are `dependencies`.
fn build_outside(dependencies: &str, examples: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let named: Vec<(&str, &str)> = examples
        .iter()
        .map(|e| (*e, e.trim_end_matches(".rs")))
        .collect();
    write_outside(dir.path(), dependencies, &named);
    let out = cargo(dir.path(), &["build", "--quiet", "--bins"]);
    assert!(
        out.status.success(),
        "the examples do not build as a crate of their own:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_guides_examples_build_as_a_crate_of_their_own_with_the_documented_lines() {
    build_outside(
        &documented_dependencies(),
        &["minimal_dra_driver.rs", "minimal_device_plugin.rs"],
    );
}

/// A DRA driver in a cluster, a DRA driver and a device plugin, in a
/// program that picks its own Kubernetes version (not the workspace's
/// `v1_37`) and TLS stack with the guide's lines for `kube`: the SDK picks
/// neither, so they build on the program's. With the guide's lines for
/// the conformance crate and its test file, `cargo test` there runs each
/// rule as a test case of its own, and the DRA driver fails none (the
/// rules it cannot meet here, such as those on an API server's slices,
/// are ignored cases).
#[test]
fn a_crate_on_its_own_kubernetes_version_builds_and_runs_the_rules_as_its_tests() {
    let blocks = documented_blocks();
    let kube = blocks
        .iter()
        .find(|b| b.contains("k8s-openapi"))
        .expect("the guide's lines for the kube feature");
    assert!(
        !kube.contains("v1_37"),
        "the guide shows the workspace's own version: {kube}"
    );
    let tests = blocks
        .iter()
        .find(|b| b.contains("nodeplugins-conformance"))
        .expect("the guide's lines for the conformance tests");
    let plain: String = documented_dependencies()
        .lines()
        .filter(|l| !l.starts_with("nodeplugins-sdk"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    write_outside(
        dir.path(),
        &format!("{plain}{kube}\n{tests}"),
        &[
            ("cluster_dra_driver.rs", "cluster_dra_driver"),
            ("minimal_dra_driver.rs", "my-driver"),
            ("minimal_device_plugin.rs", "my-device-plugin"),
        ],
    );
    std::fs::create_dir_all(dir.path().join("tests")).unwrap();
    std::fs::write(
        dir.path().join("tests/conformance.rs"),
        documented_rust("// tests/conformance.rs"),
    )
    .unwrap();
    let build = cargo(dir.path(), &["build", "--quiet", "--bins", "--tests"]);
    assert!(
        build.status.success(),
        "the crate does not build:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );

    // Listed without starting the driver: its type is given.
    let list = cargo(
        dir.path(),
        &["test", "--test", "conformance", "--", "--list"],
    );
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(
        list.status.success(),
        "{listed}\n{}",
        String::from_utf8_lossy(&list.stderr)
    );
    for rule in [
        "registration.get-info",
        "dra.prepare.by-uid",
        "dra.restart.unprepare",
    ] {
        assert!(
            listed.contains(&format!("{rule}: test")),
            "{rule} not listed:\n{listed}"
        );
    }

    let run = cargo(dir.path(), &["test", "--test", "conformance"]);
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    let err = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "the rules failed:\n{out}\n{err}");
    // `test <rule> ... ok`, the names padded to one width.
    let verdict = |rule: &str| {
        out.lines()
            .filter_map(|l| l.strip_prefix("test "))
            .find(|l| l.split_whitespace().next() == Some(rule))
            .and_then(|l| l.rsplit(" ... ").next())
            .map(str::to_string)
    };
    for rule in listed.lines().filter_map(|l| l.strip_suffix(": test")) {
        let seen = verdict(rule);
        assert!(
            matches!(seen.as_deref(), Some("ok" | "ignored")),
            "{rule} is not a case of its own ({seen:?}):\n{out}\n{err}"
        );
    }
    assert_eq!(
        verdict("dra.prepare.by-uid").as_deref(),
        Some("ok"),
        "{out}"
    );
    assert_eq!(
        verdict("registration.restart-after-kill").as_deref(),
        Some("ok"),
        "{out}"
    );
    assert!(out.contains(" 0 failed;"), "{out}");
}
