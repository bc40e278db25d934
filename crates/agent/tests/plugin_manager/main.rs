//! The plugin manager against real plugins on real sockets: upstream's
//! acceptance scenarios (spec §3.7, §9 items 1-6) and misbehaving plugins.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod concurrency;
mod discovery;
mod handshake;
mod misbehaving;

use common::{Harness, TYPE};
use nodeplugins_test_support::fake_plugin::FakePlugin;

async fn plugin(h: &Harness, file: &str, name: &str) -> FakePlugin {
    FakePlugin::builder(TYPE, name).serve(h.sock(file)).await
}
