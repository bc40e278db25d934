//! Misbehaving plugins and handlers: panics, hangs, servers that close at
//! once, stale sockets, handlers that never answer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nodeplugins::plugin_manager::PluginState;
use nodeplugins_test_support::fake_plugin::{FakePlugin, GetInfoBehaviour};
use tokio::sync::Semaphore;

use super::common::{Harness, TYPE, row};
use super::plugin;

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
