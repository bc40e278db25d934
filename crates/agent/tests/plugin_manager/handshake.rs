//! The registration handshake: validate, register, notify; the endpoint;
//! failures at each step told to the plugin and retried with backoff.

use std::time::Duration;

use nodeplugins::plugin_manager::PluginState;
use nodeplugins_test_support::fake_plugin::FakePlugin;
use nodeplugins_test_support::wait::watch_until;

use super::common::{Harness, TIMEOUT, TYPE, row};
use super::plugin;

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
