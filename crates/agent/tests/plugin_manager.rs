//! The plugin manager against real plugins on real sockets: upstream's
//! acceptance scenarios (spec §3.7, §9 items 1-6) and misbehaving plugins.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Harness, TIMEOUT, TYPE, row};
use nodeplugins::plugin_manager::PluginState;
use nodeplugins_test_support::fake_plugin::{FakePlugin, GetInfoBehaviour};
use nodeplugins_test_support::wait::watch_until;
use tokio::sync::Semaphore;

async fn plugin(h: &Harness, file: &str, name: &str) -> FakePlugin {
    FakePlugin::builder(TYPE, name).serve(h.sock(file)).await
}

#[tokio::test]
async fn running_plugins_present_at_start_are_registered() {
    // Plugins already serving before the manager starts.
    let dir = tempfile::tempdir().unwrap();
    let registry = dir.path().join("plugins_registry");
    std::fs::create_dir_all(registry.join("x/y")).unwrap();
    let mut servers = Vec::new();
    for (i, sub) in ["", "x", "x/y"].iter().enumerate() {
        let path = registry.join(sub).join(format!("early{i}.sock"));
        servers.push(
            FakePlugin::builder(TYPE, &format!("early{i}.example.com"))
                .serve(path)
                .await,
        );
    }
    let h = Harness::start_with(
        |_| {},
        |d| {
            for entry in std::fs::read_dir(&registry).unwrap() {
                let entry = entry.unwrap();
                std::fs::rename(entry.path(), d.join(entry.file_name())).unwrap();
            }
        },
    )
    .await;
    let calls = h
        .wait_for_calls("three registers", |c| {
            c.iter().filter(|c| c.starts_with("register")).count() == 3
        })
        .await;
    for i in 0..3 {
        let name = format!("early{i}.example.com");
        let validate = calls
            .iter()
            .position(|c| *c == format!("validate {name}"))
            .unwrap();
        let register = calls
            .iter()
            .position(|c| *c == format!("register {name}"))
            .unwrap();
        assert!(validate < register);
    }
    for server in &servers {
        let mut n = server.notifications();
        watch_until("notify", &mut n, TIMEOUT, |n| n.len() == 1).await;
    }
}

#[tokio::test]
async fn sockets_created_later_in_new_nested_directories_are_registered() {
    let h = Harness::start().await;
    std::fs::create_dir_all(h.sock("late/deeper/still")).unwrap();
    let p = plugin(&h, "late/deeper/still/x.sock", "late.example.com").await;
    let status = h.wait_registered(p.socket()).await;
    assert_eq!(status.name.as_deref(), Some("late.example.com"));
}

#[tokio::test]
async fn handshake_is_validate_then_register_then_notify_true() {
    let h = Harness::start().await;
    let p = plugin(&h, "order.sock", "order.example.com").await;
    let notifications = p.notifications();
    *h.handler.on_register.lock().unwrap() = Some(Box::new(move |_| {
        format!("notified-before={}", notifications.borrow().len())
    }));
    // The hook is installed after serving, so register a second instance to observe it.
    p.stop().await;
    let p = plugin(&h, "order2.sock", "order.example.com").await;
    let mut n = p.notifications();
    let notified = watch_until("notification", &mut n, TIMEOUT, |n| !n.is_empty()).await;
    assert_eq!(notified.len(), 1);
    assert!(notified[0].plugin_registered);
    assert_eq!(notified[0].error, "");
    let calls = h.handler.snapshot();
    let tail: Vec<&String> = calls.iter().rev().take(2).collect();
    assert_eq!(
        tail,
        [
            &"register order.example.com notified-before=0".to_string(),
            &"validate order.example.com".to_string()
        ]
    );
}

#[tokio::test]
async fn empty_endpoint_defaults_to_the_registration_socket() {
    let h = Harness::start().await;
    let implicit = plugin(&h, "implicit.sock", "implicit.example.com").await;
    let explicit = FakePlugin::builder(TYPE, "explicit.example.com")
        .endpoint("/run/explicit/service.sock")
        .serve(h.sock("explicit.sock"))
        .await;
    let a = h.wait_registered(implicit.socket()).await;
    let b = h.wait_registered(explicit.socket()).await;
    assert_eq!(
        a.endpoint.as_deref(),
        Some(implicit.socket().to_str().unwrap())
    );
    assert_eq!(b.endpoint.as_deref(), Some("/run/explicit/service.sock"));
    implicit.stop().await;
    let calls = h
        .wait_for_calls("deregister", |c| {
            c.iter().any(|c| c.starts_with("deregister implicit"))
        })
        .await;
    assert!(calls.contains(&format!(
        "deregister implicit.example.com {}",
        h.sock("implicit.sock").display()
    )));
}

#[tokio::test]
async fn unknown_type_is_told_no_handler_and_backed_off() {
    let h = Harness::start().await;
    let p = FakePlugin::builder("NoSuchType", "x.example.com")
        .serve(h.sock("unknown.sock"))
        .await;
    let mut n = p.notifications();
    let got = watch_until("two rejections", &mut n, TIMEOUT, |n| n.len() >= 2).await;
    let expected = format!(
        "RegisterPlugin error -- no handler registered for plugin type: NoSuchType at socket {}",
        p.socket().display()
    );
    assert!(!got[0].plugin_registered);
    assert_eq!(got[0].error, expected);
    let table = h
        .wait_for("failed state", |t| {
            row(t, p.socket()).is_some_and(|r| r.state == PluginState::Failed)
        })
        .await;
    let r = row(&table, p.socket()).unwrap();
    assert_eq!(r.error.as_deref(), Some(expected.as_str()));
    assert!(r.failures >= 1);
    assert!(
        h.handler.snapshot().is_empty(),
        "the handler for another type must not be called"
    );
}

#[tokio::test(start_paused = true)]
async fn validation_failure_notifies_false_and_retries_on_the_upstream_schedule() {
    let h = Harness::start_with(
        |c| {
            c.initial_backoff = Duration::from_millis(500);
            c.max_backoff = Duration::from_secs(122);
        },
        |_| {},
    )
    .await;
    *h.handler.validate_error.lock().unwrap() = Some("name is not a DNS domain".into());
    let p = plugin(&h, "invalid.sock", "invalid").await;
    let mut n = p.notifications();
    let mut times = Vec::new();
    for count in 1..=6 {
        watch_until("rejection", &mut n, Duration::from_secs(600), |n| {
            n.len() >= count
        })
        .await;
        times.push(tokio::time::Instant::now());
    }
    let rejected = n.borrow().clone();
    assert!(rejected.iter().all(|s| !s.plugin_registered));
    assert_eq!(
        rejected[0].error,
        "RegisterPlugin error -- plugin validation failed with err: name is not a DNS domain"
    );
    let gaps: Vec<u128> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    // Each retry comes exactly when its backoff expires (virtual time).
    for (gap, expected) in gaps.iter().zip([500u128, 1000, 2000, 4000, 8000]) {
        assert!(*gap >= expected && *gap < expected + 50, "gaps {gaps:?}");
    }
}

#[tokio::test]
async fn register_failure_is_retried_until_it_succeeds() {
    let h = Harness::start().await;
    *h.handler.register_error.lock().unwrap() = Some("backend not ready".into());
    let p = plugin(&h, "retry.sock", "retry.example.com").await;
    let mut n = p.notifications();
    let first = watch_until("rejection", &mut n, TIMEOUT, |n| !n.is_empty()).await;
    assert_eq!(
        first[0].error,
        "RegisterPlugin error -- plugin registration failed with err: backend not ready"
    );
    *h.handler.register_error.lock().unwrap() = None;
    let all = watch_until("acceptance", &mut n, TIMEOUT, |n| {
        n.last().is_some_and(|s| s.plugin_registered)
    })
    .await;
    assert!(all.len() >= 2);
    h.wait_registered(p.socket()).await;
}

#[tokio::test]
async fn a_plugin_that_cannot_be_told_is_deregistered_and_retried() {
    // As upstream since v1.35: NotifyRegistrationStatus(true) failing undoes
    // the handler's registration, and the operation is retried with backoff.
    let h = Harness::start_with(|c| c.notify_timeout = Duration::from_millis(100), |_| {}).await;
    let p = FakePlugin::builder(TYPE, "deaf.example.com")
        .notify_delay(Duration::from_millis(400))
        .serve(h.sock("deaf.sock"))
        .await;
    let table = h
        .wait_for("a failed notification", |t| {
            row(t, p.socket()).is_some_and(|r| r.state == PluginState::Failed)
        })
        .await;
    let error = row(&table, p.socket()).unwrap().error.clone().unwrap();
    assert!(
        error.starts_with(&format!(
            "RegisterPlugin error -- failed to send registration status at socket {}, err: no answer within 100ms",
            p.socket().display()
        )),
        "{error}"
    );
    let undone = format!("deregister deaf.example.com {}", p.socket().display());
    h.wait_for_calls("the handler told to forget it", |c| {
        c.iter()
            .filter(|c| c.starts_with("register deaf.example.com"))
            .count()
            >= 1
            && c.contains(&undone)
    })
    .await;
    // Retried: another GetInfo after the backoff.
    let mut calls = p.get_info_calls();
    watch_until("a retry", &mut calls, TIMEOUT, |n| *n >= 2).await;
}

#[tokio::test]
async fn removing_the_socket_deregisters_with_name_and_endpoint() {
    let h = Harness::start().await;
    let p = plugin(&h, "gone.sock", "gone.example.com").await;
    h.wait_registered(p.socket()).await;
    let socket = p.socket().to_owned();
    p.stop().await;
    h.wait_for_calls("deregister", |c| {
        c.contains(&format!("deregister gone.example.com {}", socket.display()))
    })
    .await;
    h.wait_for("empty table", |t| t.is_empty()).await;
}

#[tokio::test]
async fn recreated_socket_deregisters_then_registers_with_a_new_generation() {
    let h = Harness::start().await;
    let mut generation = 0;
    let mut p = plugin(&h, "same.sock", "v0.example.com").await;
    for round in 1..=5 {
        let status = h.wait_registered(p.socket()).await;
        assert!(status.generation > generation, "generations must increase");
        generation = status.generation;
        p.stop().await;
        p = plugin(&h, "same.sock", &format!("v{round}.example.com")).await;
        let name = format!("v{round}.example.com");
        h.wait_for("new instance", |t| {
            t.iter()
                .any(|r| r.name.as_deref() == Some(&name) && r.state == PluginState::Registered)
        })
        .await;
    }
    let calls = h.handler.snapshot();
    let socket = h.sock("same.sock").display().to_string();
    let expected: Vec<String> = (0..5)
        .flat_map(|i| {
            [
                format!("validate v{i}.example.com"),
                format!("register v{i}.example.com"),
                format!("deregister v{i}.example.com {socket}"),
            ]
        })
        .chain([
            "validate v5.example.com".to_string(),
            "register v5.example.com".to_string(),
        ])
        .collect();
    assert_eq!(calls, expected);
    assert_eq!(h.handle.snapshot().await.unwrap().len(), 1);
}

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

#[tokio::test]
async fn a_panicking_handler_counts_as_a_failure_and_the_manager_survives() {
    let h = Harness::start().await;
    h.handler.panic_on_register.store(true, Ordering::SeqCst);
    let p = plugin(&h, "boom.sock", "boom.example.com").await;
    let table = h
        .wait_for("failure", |t| {
            row(t, p.socket()).is_some_and(|r| r.state == PluginState::Failed)
        })
        .await;
    let error = row(&table, p.socket()).unwrap().error.clone().unwrap();
    assert!(
        error.contains("handler panicked: handler exploded for boom.example.com"),
        "{error}"
    );
    h.handler.panic_on_register.store(false, Ordering::SeqCst);
    h.wait_registered(p.socket()).await;
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
    let (_h, stuck, table) =
        slots_scenario(1, Duration::from_secs(60), Duration::from_millis(300), 1).await;
    assert_eq!(
        row(&table, stuck[0].socket()).map(|r| r.state),
        Some(PluginState::Failed),
        "the slot was taken until the stuck registration failed"
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

#[tokio::test]
async fn a_plugin_that_hangs_in_get_info_times_out_without_blocking_others() {
    let h = Harness::start_with(|c| c.get_info_timeout = Duration::from_millis(200), |_| {}).await;
    let stuck = FakePlugin::builder(TYPE, "stuck.example.com")
        .get_info(GetInfoBehaviour::Hang)
        .serve(h.sock("stuck.sock"))
        .await;
    let ok = plugin(&h, "ok.sock", "ok.example.com").await;
    h.wait_registered(ok.socket()).await;
    let table = h
        .wait_for("GetInfo timeout", |t| {
            row(t, stuck.socket()).is_some_and(|r| r.state == PluginState::Failed)
        })
        .await;
    let error = row(&table, stuck.socket()).unwrap().error.clone().unwrap();
    assert!(
        error.contains("failed to get plugin info using RPC GetInfo"),
        "{error}"
    );
    stuck.set_get_info(GetInfoBehaviour::Answer);
    h.wait_registered(stuck.socket()).await;
}

#[tokio::test]
async fn a_server_that_accepts_and_closes_fails_cleanly() {
    let h = Harness::start().await;
    let path = h.sock("rude.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let rude = tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            drop(stream);
        }
    });
    let table = h
        .wait_for("failures", |t| {
            row(t, &path).is_some_and(|r| r.state == PluginState::Failed && r.failures >= 3)
        })
        .await;
    let error = row(&table, &path).unwrap().error.clone().unwrap();
    assert!(error.starts_with("RegisterPlugin error --"), "{error}");
    rude.abort();
}

#[tokio::test]
async fn plain_files_and_dot_files_are_ignored() {
    let h = Harness::start().await;
    std::fs::write(h.sock("not-a-socket.sock"), b"x").unwrap();
    std::fs::create_dir_all(h.sock(".hidden-dir")).unwrap();
    let _dot = FakePlugin::builder(TYPE, "dot.example.com")
        .serve(h.sock(".dot.sock"))
        .await;
    let _hidden = FakePlugin::builder(TYPE, "hidden.example.com")
        .serve(h.sock(".hidden-dir/x.sock"))
        .await;
    let real = plugin(&h, "real.sock", "real.example.com").await;
    let table = h.wait_registered(real.socket()).await;
    assert_eq!(table.name.as_deref(), Some("real.example.com"));
    let all = h.handle.snapshot().await.unwrap();
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(
        !h.handler
            .snapshot()
            .iter()
            .any(|c| c.contains("dot") || c.contains("hidden"))
    );
}

/// Collects log output of the current thread (the test runtime is single-threaded).
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_stale_socket_backs_off_and_logs_once() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let h = Harness::start().await;
    let path = h.sock("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let table = h
        .wait_for("repeated failures", |t| {
            row(t, &path).is_some_and(|r| r.failures >= 5)
        })
        .await;
    let r = row(&table, &path).unwrap();
    assert_eq!(r.state, PluginState::Failed);
    let error = r.error.clone().unwrap();
    assert!(
        error.contains("dial failed at socket") && error.contains("onnection refused"),
        "{error}"
    );

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("stale.sock"))
        .count();
    assert_eq!(
        warnings, 1,
        "one warning for the first failure, none for identical retries:\n{log}"
    );
}

#[tokio::test]
async fn directories_moved_in_and_out_bring_and_take_their_sockets() {
    let h = Harness::start().await;
    let outside = h._dir.path().join("outside");
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    let p = FakePlugin::builder(TYPE, "mover.example.com")
        .serve(outside.join("sub/m.sock"))
        .await;
    std::fs::rename(&outside, h.sock("moved")).unwrap();
    let moved = h.sock("moved/sub/m.sock");
    h.wait_registered(&moved).await;
    std::fs::rename(h.sock("moved"), &outside).unwrap();
    h.wait_for_calls("deregister", |c| {
        c.iter()
            .any(|c| c.starts_with("deregister mover.example.com"))
    })
    .await;
    h.wait_for("empty", |t| t.is_empty()).await;
    drop(p);
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

#[tokio::test]
async fn a_handler_that_never_answers_is_given_up_on_and_retried() {
    let h = Harness::start_with(|c| c.handler_timeout = Duration::from_millis(200), |_| {}).await;
    let gate = Arc::new(Semaphore::new(0));
    *h.handler.gate.lock().unwrap() = Some(gate.clone());
    let p = plugin(&h, "hung.sock", "hung.example.com").await;
    let table = h
        .wait_for("handler timeout", |t| {
            row(t, p.socket()).is_some_and(|r| r.state == PluginState::Failed)
        })
        .await;
    let error = row(&table, p.socket()).unwrap().error.clone().unwrap();
    assert!(
        error.contains("handler did not answer within 200ms"),
        "{error}"
    );
    gate.add_permits(1000);
    h.wait_registered(p.socket()).await;
}

#[tokio::test]
async fn a_registry_removed_with_registered_plugins_and_made_again_registers_new_plugins() {
    let h = Harness::start().await;
    let first = plugin(&h, "a.sock", "a.example.com").await;
    let second = plugin(&h, "b.sock", "b.example.com").await;
    h.wait_registered(first.socket()).await;
    h.wait_registered(second.socket()).await;

    // `rm -rf plugins_registry; mkdir plugins_registry`, as an operator would.
    std::fs::remove_dir_all(&h.registry_dir).unwrap();
    match std::fs::create_dir(&h.registry_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("mkdir: {e}"),
    }
    h.wait_for_calls("both deregistered", |c| {
        ["a.example.com", "b.example.com"].iter().all(|name| {
            c.iter()
                .any(|c| c.starts_with(&format!("deregister {name}")))
        })
    })
    .await;

    let third = plugin(&h, "c.sock", "c.example.com").await;
    std::fs::create_dir_all(h.sock("sub")).unwrap();
    let fourth = plugin(&h, "sub/d.sock", "d.example.com").await;
    h.wait_registered(third.socket()).await;
    h.wait_registered(fourth.socket()).await;
    let table = h.wait_for("only the new plugins", |t| t.len() == 2).await;
    assert!(table.iter().all(|p| p.state == PluginState::Registered));
    drop((first, second));
}
