//! The agent's event stream under load: a client following `nodeplugins
//! events` while a thousand plugins register and deregister. A binary of
//! its own, so the burst shares the machine with no other agent's test.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

use std::time::Duration;

use nodeplugins_test_support::wait::{TIMEOUT, eventually};

#[tokio::test(flavor = "multi_thread")]
async fn a_client_following_the_events_misses_none_of_a_thousand_plugins_coming_and_going() {
    use nodeplugins_test_support::fake_plugin::FakePlugin;

    const PLUGINS: usize = 1000;
    let root = tempfile::tempdir().unwrap();
    // Quiet: a thousand unreachable DRA services would fill the log.
    let _agent = agent_with(root.path(), &["--log-level", "error"]);
    let registry = root.path().join("plugins_registry");
    let mut events = eventually("event stream", TIMEOUT, || async {
        nodeplugins::admin::events(root.path()).await.ok()
    })
    .await;
    // DRA drivers whose service is never up: each registration is a
    // registry event and a few DRA events.
    let mut plugins = Vec::with_capacity(PLUGINS);
    for i in 0..PLUGINS {
        let service = root.path().join(format!("absent-{i}.sock"));
        let plugin = FakePlugin::builder("DRAPlugin", &format!("burst-{i}.example.com"))
            .endpoint(service.display().to_string())
            .versions(&["v1.DRAPlugin"])
            .serve(registry.join(format!("burst-{i}.sock")))
            .await;
        plugins.push(plugin);
    }
    let (mut registered, mut deregistered) = (0, 0);
    let mut stopping = Some(plugins);
    while deregistered < PLUGINS {
        let event = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("an event in time")
            .expect("no event missed (the agent says when one is)")
            .expect("the stream goes on");
        let json = serde_json::to_value(&event).unwrap();
        if json["source"] != "registry" {
            continue;
        }
        match json["kind"].as_str() {
            Some("registered") => registered += 1,
            Some("deregistered") => deregistered += 1,
            _ => {}
        }
        if registered == PLUGINS
            && let Some(plugins) = stopping.take()
        {
            // Every socket removed at once: a thousand deregistrations in
            // a few milliseconds.
            for plugin in &plugins {
                std::fs::remove_file(plugin.socket()).unwrap();
            }
            drop(plugins);
        }
    }
    assert_eq!((registered, deregistered), (PLUGINS, PLUGINS));
}
