//! Operations in parallel: one socket at a time, sockets side by side,
//! registration slots, a hundred flapping sockets.

use std::sync::Arc;
use std::time::Duration;

use nodeplugins::plugin_manager::PluginState;
use nodeplugins_test_support::fake_plugin::{FakePlugin, GetInfoBehaviour};
use nodeplugins_test_support::wait::watch_until;
use tokio::sync::Semaphore;

use super::common::{Harness, TIMEOUT, TYPE, row};
use super::plugin;

#[tokio::test]
async fn operations_on_one_socket_never_overlap_and_different_sockets_run_in_parallel() {
    let h = Harness::start().await;
    let gate = Arc::new(Semaphore::new(0));
    *h.handler.gate.lock().unwrap() = Some(gate.clone());
    let a = plugin(&h, "a.sock", "a.example.com").await;
    let b = plugin(&h, "b.sock", "b.example.com").await;
    h.wait_for_calls("both registering", |c| {
        c.iter().filter(|c| c.starts_with("register")).count() == 2
    })
    .await;
    assert_eq!(
        *h.handler.max_in_flight_total.lock().unwrap(),
        2,
        "different sockets run concurrently"
    );

    // Replace a.sock while its registration is held: the new instance must wait.
    a.stop().await;
    let a2 = plugin(&h, "a.sock", "a2.example.com").await;
    let pending = h
        .wait_for("a2 seen", |t| row(t, a2.socket()).is_some())
        .await;
    assert_ne!(
        row(&pending, a2.socket()).unwrap().state,
        PluginState::Registered
    );
    assert!(
        !h.handler
            .snapshot()
            .iter()
            .any(|c| c.contains("a2.example.com"))
    );

    gate.add_permits(100);
    h.wait_registered(a2.socket()).await;
    h.wait_registered(b.socket()).await;
    assert_eq!(*h.handler.max_in_flight_per_endpoint.lock().unwrap(), 1);
    let calls = h.handler.snapshot();
    let dereg = calls
        .iter()
        .position(|c| c.starts_with("deregister a.example.com"))
        .unwrap();
    let reval = calls
        .iter()
        .position(|c| c == "validate a2.example.com")
        .unwrap();
    assert!(
        dereg < reval,
        "old instance deregistered before the new one registers: {calls:?}"
    );
}

/// A manager with `slots` registration slots, held at most `slow`, and
/// `count` plugins hanging in GetInfo (until `get_info_timeout`), each
/// already called; then one more, well-behaved plugin. Returns the table
/// once that one is registered, and the hanging plugins.
async fn slots_scenario(
    slots: usize,
    slow: Duration,
    get_info_timeout: Duration,
    count: usize,
) -> (
    Harness,
    Vec<FakePlugin>,
    Vec<nodeplugins::plugin_manager::PluginStatus>,
) {
    let h = Harness::start_with(
        |c| {
            c.registrations_at_once = slots;
            c.slow_registration = slow;
            c.get_info_timeout = get_info_timeout;
        },
        |_| {},
    )
    .await;
    let mut stuck = Vec::new();
    for i in 0..count {
        let p = FakePlugin::builder(TYPE, &format!("stuck-{i}.example.com"))
            .get_info(GetInfoBehaviour::Hang)
            .serve(h.sock(&format!("stuck-{i}.sock")))
            .await;
        let mut calls = p.get_info_calls();
        watch_until("the stuck plugin's GetInfo", &mut calls, TIMEOUT, |n| {
            *n == 1
        })
        .await;
        stuck.push(p);
    }
    let ok = plugin(&h, "ok.sock", "ok.example.com").await;
    let table = h
        .wait_for("the other plugin registered", |t| {
            row(t, ok.socket()).is_some_and(|r| r.state == PluginState::Registered)
        })
        .await;
    (h, stuck, table)
}

#[tokio::test]
async fn registrations_beyond_the_slots_wait_for_one() {
    // One slot, never given up early: the second plugin registers only once
    // the first (hanging in GetInfo) has failed.
    // Once failed it is retried after its backoff (20 ms here), so by the time
    // the other plugin shows registered the stuck one may be pending again:
    // what it keeps is the failure it counted.
    let (_h, stuck, table) =
        slots_scenario(1, Duration::from_secs(60), Duration::from_millis(300), 1).await;
    let stuck_row = row(&table, stuck[0].socket());
    assert!(
        stuck_row.is_some_and(|r| r.failures >= 1 && r.state != PluginState::Registered),
        "the slot was taken until the stuck registration failed: {stuck_row:?}"
    );
}

#[tokio::test]
async fn plugins_slow_to_answer_give_up_their_slots() {
    // Two slots and five plugins hanging in GetInfo for far longer than a
    // registration may hold a slot: another plugin still registers while all
    // five are pending.
    let (_h, stuck, table) =
        slots_scenario(2, Duration::from_millis(20), Duration::from_secs(60), 5).await;
    for p in &stuck {
        assert_eq!(
            row(&table, p.socket()).map(|r| r.state),
            Some(PluginState::Pending)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_sockets_flapping_end_in_exactly_the_right_state() {
    let h = Harness::start().await;
    let mut alive = Vec::new();
    for i in 0..100 {
        let file = format!("flap-{i}.sock");
        let rounds = 1 + i % 4;
        for round in 0..rounds {
            let p = plugin(&h, &file, &format!("p{i}-r{round}.example.com")).await;
            p.stop().await;
        }
        if i % 2 == 0 {
            alive.push(plugin(&h, &file, &format!("p{i}-final.example.com")).await);
        }
    }
    let table = h
        .wait_for("the final fleet", |t| {
            t.len() == 50
                && t.iter().all(|r| {
                    r.state == PluginState::Registered
                        && r.name
                            .as_deref()
                            .is_some_and(|n| n.ends_with("-final.example.com"))
                })
        })
        .await;
    assert_eq!(table.len(), alive.len());
    // Every instance the handler registered was deregistered, except the finals.
    let calls = h.handler.snapshot();
    let mut live = std::collections::HashMap::<String, i32>::new();
    for call in &calls {
        let mut parts = call.split(' ');
        match (parts.next(), parts.next()) {
            (Some("register"), Some(name)) => *live.entry(name.to_string()).or_default() += 1,
            (Some("deregister"), Some(name)) => *live.entry(name.to_string()).or_default() -= 1,
            _ => {}
        }
    }
    for (name, count) in &live {
        let expected = i32::from(name.ends_with("-final.example.com"));
        assert_eq!(*count, expected, "{name}: {calls:?}");
    }
    assert_eq!(live.values().sum::<i32>(), 50);
}
