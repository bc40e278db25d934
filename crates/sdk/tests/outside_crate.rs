//! The guide's examples build as a plugin author's own crate would build
//! them: a new crate outside the workspace whose dependencies are exactly
//! the `Cargo.toml` lines `docs/plugin-authors.md` gives, with the SDK
//! taken from this checkout. A name the examples use that only a crate
//! outside those lines provides (such as `async_trait` or `tonic` at the
//! SDK's versions) fails the build.

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

/// Builds `examples` (of the SDK) as the binaries of a new crate outside
/// the workspace whose `[dependencies]` are `dependencies`.
fn build_outside(dependencies: &str, examples: &[&str]) {
    assert!(
        dependencies.starts_with("[dependencies]\n"),
        "{dependencies}"
    );
    let dir = tempfile::tempdir().unwrap();
    let sdk = workspace().join("crates/sdk");
    let manifest = format!(
        "[package]\nname = \"my-plugins\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         {dependencies}\n[patch.crates-io]\nnodeplugins-sdk = {{ path = {sdk:?} }}\n\n{}",
        profiles()
    );
    std::fs::write(dir.path().join("Cargo.toml"), manifest).unwrap();
    let bins = dir.path().join("src/bin");
    std::fs::create_dir_all(&bins).unwrap();
    for example in examples {
        std::fs::copy(sdk.join("examples").join(example), bins.join(example)).unwrap();
    }
    // The workspace's lock file: the same versions, nothing fetched.
    std::fs::copy(
        workspace().join("Cargo.lock"),
        dir.path().join("Cargo.lock"),
    )
    .unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--offline", "--quiet", "--bins"])
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
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

/// A DRA driver in a cluster, in a program that picks its own Kubernetes
/// version (not the workspace's `v1_37`) and TLS stack with the guide's
/// lines for `kube`: the SDK picks neither, so it builds on the program's.
#[test]
fn the_cluster_example_builds_on_the_kubernetes_version_its_program_picks() {
    let blocks = documented_blocks();
    let kube = blocks
        .iter()
        .find(|b| b.contains("k8s-openapi"))
        .expect("the guide's lines for the kube feature");
    assert!(
        !kube.contains("v1_37"),
        "the guide shows the workspace's own version: {kube}"
    );
    let plain: String = documented_dependencies()
        .lines()
        .filter(|l| !l.starts_with("nodeplugins-sdk"))
        .map(|l| format!("{l}\n"))
        .collect();
    build_outside(&format!("{plain}{kube}"), &["cluster_dra_driver.rs"]);
}
