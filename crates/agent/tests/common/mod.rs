//! A plugin manager on a temporary directory with a recording handler.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodeplugins::plugin_manager::{
    PluginManagerConfig, PluginManagerHandle, PluginState, PluginStatus,
};
use nodeplugins::{HandlerError, PluginHandler, PluginManager};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

pub const TIMEOUT: Duration = nodeplugins_test_support::wait::TIMEOUT;
pub const TYPE: &str = "TestPlugin";

/// Adds a note to the recorded register call.
pub type RegisterHook = Box<dyn Fn(&str) -> String + Send + Sync>;

/// Records every call; can be told to fail, panic, or hold registrations.
#[derive(Default)]
pub struct RecordingHandler {
    calls: watch::Sender<Vec<String>>,
    pub validate_error: Mutex<Option<String>>,
    pub register_error: Mutex<Option<String>>,
    pub panic_on_register: AtomicBool,
    /// When set, register waits for a permit.
    pub gate: Mutex<Option<Arc<Semaphore>>>,
    in_flight: Mutex<HashMap<String, usize>>,
    pub max_in_flight_per_endpoint: Mutex<usize>,
    pub max_in_flight_total: Mutex<usize>,
    /// Seen in register: how many notifications the plugin had received.
    pub on_register: Mutex<Option<RegisterHook>>,
}

impl RecordingHandler {
    pub fn calls(&self) -> watch::Receiver<Vec<String>> {
        self.calls.subscribe()
    }

    pub fn snapshot(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }

    fn record(&self, call: String) {
        self.calls.send_modify(|c| c.push(call));
    }
}

#[async_trait::async_trait]
impl PluginHandler for RecordingHandler {
    async fn validate(
        &self,
        name: &str,
        _endpoint: &str,
        _versions: &[String],
    ) -> Result<(), HandlerError> {
        self.record(format!("validate {name}"));
        match self.validate_error.lock().unwrap().clone() {
            Some(e) => Err(HandlerError::new(e)),
            None => Ok(()),
        }
    }

    async fn register(
        &self,
        name: &str,
        endpoint: &str,
        _versions: &[String],
    ) -> Result<(), HandlerError> {
        let extra = self.on_register.lock().unwrap().as_ref().map(|f| f(name));
        self.record(match extra {
            Some(extra) => format!("register {name} {extra}"),
            None => format!("register {name}"),
        });
        if self.panic_on_register.load(Ordering::SeqCst) {
            panic!("handler exploded for {name}");
        }
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            let n = in_flight.entry(endpoint.to_string()).or_default();
            *n += 1;
            let mut max = self.max_in_flight_per_endpoint.lock().unwrap();
            *max = (*max).max(*n);
            let total: usize = in_flight.values().sum();
            let mut max_total = self.max_in_flight_total.lock().unwrap();
            *max_total = (*max_total).max(total);
        }
        let gate = self.gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            gate.acquire().await.unwrap().forget();
        }
        *self.in_flight.lock().unwrap().get_mut(endpoint).unwrap() -= 1;
        match self.register_error.lock().unwrap().clone() {
            Some(e) => Err(HandlerError::new(e)),
            None => Ok(()),
        }
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        self.record(format!("deregister {name} {endpoint}"));
    }
}

pub struct Harness {
    pub _dir: tempfile::TempDir,
    pub registry_dir: PathBuf,
    pub handle: PluginManagerHandle,
    pub handler: Arc<RecordingHandler>,
    pub shutdown: CancellationToken,
}

impl Harness {
    /// Starts a manager with fast backoff, after `before_start` prepared the directory.
    pub async fn start_with(
        configure: impl FnOnce(&mut PluginManagerConfig),
        before_start: impl FnOnce(&Path),
    ) -> Self {
        nodeplugins_test_support::init_tracing();
        let dir = tempfile::tempdir().unwrap();
        let registry_dir = dir.path().join("plugins_registry");
        std::fs::create_dir_all(&registry_dir).unwrap();
        before_start(&registry_dir);
        let mut config = PluginManagerConfig::new(&registry_dir);
        config.initial_backoff = Duration::from_millis(20);
        config.max_backoff = Duration::from_millis(80);
        configure(&mut config);
        let (manager, handle) = PluginManager::new(config);
        let handler = Arc::new(RecordingHandler::default());
        manager.add_handler(TYPE, handler.clone());
        let shutdown = CancellationToken::new();
        tokio::spawn(manager.run(shutdown.clone()));
        tokio::time::timeout(TIMEOUT, handle.ready())
            .await
            .unwrap()
            .unwrap();
        Self {
            _dir: dir,
            registry_dir,
            handle,
            handler,
            shutdown,
        }
    }

    pub async fn start() -> Self {
        Self::start_with(|_| {}, |_| {}).await
    }

    pub fn sock(&self, name: &str) -> PathBuf {
        self.registry_dir.join(name)
    }

    pub async fn wait_for(
        &self,
        what: &str,
        pred: impl FnMut(&[PluginStatus]) -> bool,
    ) -> Vec<PluginStatus> {
        match self.handle.wait_for(TIMEOUT, pred).await.unwrap() {
            Some(table) => table,
            None => panic!(
                "timed out waiting for {what}; table: {:#?}",
                self.handle.status().await.unwrap()
            ),
        }
    }

    pub async fn wait_for_calls(
        &self,
        what: &str,
        pred: impl FnMut(&Vec<String>) -> bool,
    ) -> Vec<String> {
        let mut calls = self.handler.calls();
        nodeplugins_test_support::wait::watch_until(what, &mut calls, TIMEOUT, pred).await
    }

    pub async fn wait_registered(&self, socket: &Path) -> PluginStatus {
        let table = self
            .wait_for("registration", |t| {
                t.iter()
                    .any(|p| p.socket_path == socket && p.state == PluginState::Registered)
            })
            .await;
        table.into_iter().find(|p| p.socket_path == socket).unwrap()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub fn row<'a>(table: &'a [PluginStatus], socket: &Path) -> Option<&'a PluginStatus> {
    table.iter().find(|p| p.socket_path == socket)
}
