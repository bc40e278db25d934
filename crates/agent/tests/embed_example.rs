//! The embedding guide's example (`examples/embed.rs`) runs and routes a
//! plugin of its own type to its own handler; the guide quotes it exactly.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nodeplugins_test_support::binaries::example;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::python::python_env;
use nodeplugins_test_support::wait::TIMEOUT;
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread")]
async fn the_embedding_example_routes_its_own_plugin_type() {
    let root = tempfile::tempdir().unwrap();
    let mut agent = Command::new(example("nodeplugins", "embed"));
    agent.arg(root.path()).env("NO_COLOR", "1");
    let mut agent = ChildProcess::spawn("embed example", agent);
    let registry = root.path().join("plugins_registry");
    nodeplugins_test_support::wait::eventually("plugins_registry", TIMEOUT, || async {
        registry.exists().then_some(())
    })
    .await;
    let mut plugin = python_env().script("registration_server.py");
    plugin.arg(registry.join("example.sock")).args([
        "--type",
        "ExamplePlugin",
        "--name",
        "mine",
        "--versions",
        "v1",
    ]);
    let mut plugin = ChildProcess::spawn("registration_server.py", plugin);
    plugin
        .wait_for_line(TIMEOUT, |l| l.contains("\"registered\": true"))
        .await;
    agent
        .wait_for_line(TIMEOUT, |l| l.contains("example plugin in use"))
        .await;
}

#[test]
fn the_guides_excerpt_is_in_the_example() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = std::fs::read_to_string(here.join("../../docs/embedding.md")).unwrap();
    let example = std::fs::read_to_string(here.join("examples/embed.rs")).unwrap();
    let excerpt = guide
        .split("```rust,ignore\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the guide has a rust block");
    let example_lines: Vec<&str> = example.lines().map(str::trim).collect();
    for line in excerpt.lines().map(str::trim).filter(|l| !l.is_empty()) {
        assert!(
            example_lines.contains(&line),
            "docs/embedding.md shows {line:?}, which examples/embed.rs does not have"
        );
    }
}
