//! The task that owns desired and actual state and makes the second follow
//! the first: unregister first (socket gone or replaced), then register.
//!
//! It wakes only for a watcher event, a finished operation, a running
//! operation's progress or a due backoff deadline; otherwise it sleeps.
//! After each wake-up that changed something it publishes the plugin table
//! ([`PluginSnapshot`]), making again only the rows of the paths touched. Each wake-up reconciles
//! only the socket paths that event touched.

use crate::plugin_description::PluginDescription;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{Semaphore, broadcast, mpsc, watch};
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::attempt_error::AttemptError;
use super::config::PluginManagerConfig;
use super::control::Control;
use super::handler_table::HandlerTable;
use super::notifications::Notifications;
use super::register::{Failed, Progress, Registered, register};
use super::snapshot::{PluginSnapshot, Row};
use super::socket_retry::SocketRetry;
use super::state::{ActualEntry, ActualState, DesiredState, Generation, Running};
use super::watcher::WatchEvent;
use crate::common::shards::Shards;
use crate::event::{AgentEvent, EventKind};
use crate::plugin_manager::handler::PluginHandler;
use crate::published::Publisher;
use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::Said;
use nodeplugins_api::timer::sleep_until;
use tracing::Instrument;

/// The most ready items one wake-up takes before publishing, so that a
/// steady stream never holds the table back for long.
const TAKE_READY_MAX: usize = 256;

enum Outcome {
    Register {
        path: PathBuf,
        generation: Generation,
        result: Result<Registered, Failed>,
    },
    Unregister {
        path: PathBuf,
        info: PluginDescription,
    },
}

pub(crate) struct Reconciler {
    pub(crate) config: Arc<PluginManagerConfig>,
    pub(crate) handlers: HandlerTable,
    pub(crate) control_tx: mpsc::Sender<Control>,
    pub(crate) events: broadcast::Sender<AgentEvent>,
    pub(crate) published: Publisher<PluginSnapshot>,
    pub(crate) ready: watch::Sender<bool>,
    /// The published table's rows.
    rows: Shards<PathBuf, Row>,
    /// Paths whose row is to be made again.
    touched: HashSet<PathBuf>,
    desired: DesiredState,
    actual: ActualState,
    running: HashMap<PathBuf, Running>,
    task_paths: HashMap<tokio::task::Id, (PathBuf, Running)>,
    backoff: HashMap<PathBuf, SocketRetry>,
    pending_info: HashMap<PathBuf, PluginDescription>,
    timers: BTreeSet<(Instant, PathBuf)>,
    dirty: HashSet<PathBuf>,
    tasks: JoinSet<Outcome>,
    /// Registrations talking to their plugins (see
    /// [`super::config::REGISTRATIONS_AT_ONCE`]).
    slots: Arc<Semaphore>,
    /// Handlers to tell that their plugins heard back.
    notifications: Notifications,
}

impl Reconciler {
    pub(crate) fn new(
        config: Arc<PluginManagerConfig>,
        handlers: HandlerTable,
        control_tx: mpsc::Sender<Control>,
        events: broadcast::Sender<AgentEvent>,
        published: Publisher<PluginSnapshot>,
        ready: watch::Sender<bool>,
    ) -> Self {
        let slots = Arc::new(Semaphore::new(config.registrations_at_once.max(1)));
        Self {
            slots,
            config,
            handlers,
            control_tx,
            events,
            published,
            ready,
            rows: Shards::default(),
            touched: HashSet::new(),
            desired: DesiredState::default(),
            actual: ActualState::default(),
            running: HashMap::new(),
            task_paths: HashMap::new(),
            backoff: HashMap::new(),
            pending_info: HashMap::new(),
            timers: BTreeSet::new(),
            dirty: HashSet::new(),
            tasks: JoinSet::new(),
            notifications: Notifications::default(),
        }
    }

    /// Runs until `shutdown`. Operations still running then are abandoned.
    pub(crate) async fn run(
        mut self,
        mut watch_rx: mpsc::Receiver<WatchEvent>,
        mut control_rx: mpsc::Receiver<Control>,
        shutdown: CancellationToken,
    ) {
        let mut watcher_open = true;
        self.publish();
        loop {
            if !self.dirty.is_empty() || !self.touched.is_empty() {
                let dirty: Vec<PathBuf> = self.dirty.drain().collect();
                for path in &dirty {
                    self.reconcile(path);
                }
                self.touched.extend(dirty);
                self.publish();
            }
            if self.notifications.due(!self.tasks.is_empty()) {
                self.notifications.deliver().await;
            }
            let next_timer = self.timers.first().map(|(at, _)| *at);
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                event = watch_rx.recv(), if watcher_open => match event {
                    Some(event) => self.on_watch(event),
                    None => watcher_open = false,
                },
                Some(done) = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => self.on_done(done),
                Some(control) = control_rx.recv() => self.on_control(control),
                () = sleep_until(next_timer) => self.on_timer(),
                () = sleep_until(self.notifications.deadline()) => {}
            }
            // What else is ready already is taken before publishing once
            // for all of it (a burst of registrations ends many at a time).
            self.take_ready(&mut watch_rx, &mut control_rx, &mut watcher_open);
        }
        self.tasks.abort_all();
    }

    /// Handles the finished operations, progress and watcher events that
    /// are ready now, up to a bound, without waiting.
    fn take_ready(
        &mut self,
        watch_rx: &mut mpsc::Receiver<WatchEvent>,
        control_rx: &mut mpsc::Receiver<Control>,
        watcher_open: &mut bool,
    ) {
        for _ in 0..TAKE_READY_MAX {
            if let Some(done) = self.tasks.try_join_next_with_id() {
                self.on_done(done);
            } else if let Ok(control) = control_rx.try_recv() {
                self.on_control(control);
            } else if *watcher_open {
                match watch_rx.try_recv() {
                    Ok(event) => self.on_watch(event),
                    Err(mpsc::error::TryRecvError::Disconnected) => *watcher_open = false,
                    Err(mpsc::error::TryRecvError::Empty) => return,
                }
            } else {
                return;
            }
        }
    }

    fn on_watch(&mut self, event: WatchEvent) {
        match event {
            WatchEvent::Added { path, identity } => {
                if self.desired.add_or_update(&path, identity) {
                    self.dirty.insert(path);
                }
            }
            WatchEvent::Removed { path } => {
                if self.desired.remove(&path) {
                    self.dirty.insert(path);
                }
            }
            WatchEvent::RemovedTree { dir } => {
                self.dirty.extend(self.desired.remove_tree(&dir));
            }
            WatchEvent::Resync { sockets } => {
                let present: HashSet<&PathBuf> = sockets.iter().map(|(p, _)| p).collect();
                let gone: Vec<PathBuf> = self
                    .desired
                    .paths()
                    .filter(|p| !present.contains(p))
                    .cloned()
                    .collect();
                for path in gone {
                    self.desired.remove(&path);
                    self.dirty.insert(path);
                }
                for (path, identity) in sockets {
                    if self.desired.add_or_update(&path, identity) {
                        self.dirty.insert(path);
                    }
                }
            }
            WatchEvent::Ready => {
                self.ready.send_replace(true);
            }
        }
    }

    fn on_control(&mut self, control: Control) {
        match control {
            Control::Progress {
                path,
                generation,
                info,
            } => {
                if self.running.get(&path) == Some(&Running::Register(generation)) {
                    self.pending_info.insert(path.clone(), info);
                    self.touched.insert(path);
                }
            }
        }
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        while let Some((at, _)) = self.timers.first() {
            if *at > now {
                break;
            }
            if let Some((_, path)) = self.timers.pop_first() {
                self.dirty.insert(path);
            }
        }
    }

    /// Brings one socket path one step closer to its desired state.
    fn reconcile(&mut self, path: &Path) {
        if self.running.contains_key(path) {
            return;
        }
        let desired = self.desired.get(path).copied();
        if let Some(actual) = self.actual.get(path) {
            if desired.map(|d| d.generation) == Some(actual.generation) {
                return;
            }
            if let Some(entry) = self.actual.remove(path) {
                self.start_unregister(path, entry);
            }
            return;
        }
        let Some(desired) = desired else {
            self.backoff.remove(path);
            self.pending_info.remove(path);
            return;
        };
        if let Some(backoff) = self.backoff.get(path)
            && backoff.generation == desired.generation
            && let Some(retry_at) = backoff.retry_at()
            && Instant::now() < retry_at
        {
            self.timers.insert((retry_at, path.to_owned()));
            return;
        }
        self.start_register(path, desired.generation, desired.seen_at);
    }

    fn start_register(&mut self, path: &Path, generation: Generation, seen_at: Instant) {
        let control = self.control_tx.clone();
        let progress_path = path.to_owned();
        let progress: Progress = Box::new(move |info| {
            let _ = control.try_send(Control::Progress {
                path: progress_path,
                generation,
                info,
            });
        });
        let (handlers, config, socket) =
            (self.handlers.clone(), self.config.clone(), path.to_owned());
        let slots = self.slots.clone();
        let task = self.tasks.spawn(async move {
            // A closed semaphore (never closed) would only mean no limit.
            let slot = slots.acquire_owned().await.ok();
            let slow = config.slow_registration;
            let span = tracing::info_span!("registration", socket = %socket.display());
            let registering =
                register(socket.clone(), handlers, config, progress, seen_at).instrument(span);
            tokio::pin!(registering);
            let result = tokio::select! {
                result = &mut registering => result,
                () = tokio::time::sleep(slow) => {
                    drop(slot);
                    registering.await
                }
            };
            Outcome::Register {
                path: socket,
                generation,
                result,
            }
        });
        self.running
            .insert(path.to_owned(), Running::Register(generation));
        self.task_paths
            .insert(task.id(), (path.to_owned(), Running::Register(generation)));
    }

    fn start_unregister(&mut self, path: &Path, entry: ActualEntry) {
        tracing::info!(
            socket = %path.display(), plugin_type = %entry.info.plugin_type, name = %entry.info.name,
            "deregistering plugin"
        );
        let handler: Arc<dyn PluginHandler> = entry.handler;
        let (info, socket) = (entry.info, path.to_owned());
        let span =
            tracing::info_span!("deregistration", socket = %path.display(), name = %info.name);
        let task = self.tasks.spawn(async move {
            let started = Instant::now();
            // The handler's own deadline bounds it (see `bounded_handler`).
            handler
                .deregister(&info.name, &info.endpoint)
                .instrument(span)
                .await;
            tracing::debug!(socket = %socket.display(), handler_us = started.elapsed().as_micros(),
                "deregistered: time in the handler");
            Outcome::Unregister { path: socket, info }
        });
        self.running.insert(path.to_owned(), Running::Unregister);
        self.task_paths
            .insert(task.id(), (path.to_owned(), Running::Unregister));
    }

    fn on_done(&mut self, done: Result<(tokio::task::Id, Outcome), JoinError>) {
        match done {
            Ok((id, outcome)) => {
                self.task_paths.remove(&id);
                match outcome {
                    Outcome::Register {
                        path,
                        generation,
                        result: Ok(registered),
                    } => {
                        self.on_registered(path, generation, registered);
                    }
                    Outcome::Register {
                        path,
                        generation,
                        result: Err(failed),
                    } => {
                        self.on_failed(path, generation, failed.error.into(), failed.info);
                    }
                    Outcome::Unregister { path, info } => {
                        self.emit(EventKind::Deregistered, &path, Some(info), None, None);
                        self.running.remove(&path);
                        self.dirty.insert(path);
                    }
                }
            }
            Err(error) => {
                let Some((path, running)) = self.task_paths.remove(&error.id()) else {
                    return;
                };
                if !error.is_panic() {
                    // Cancelled: only happens at shutdown, but never leave the path stuck.
                    self.running.remove(&path);
                    self.dirty.insert(path);
                    return;
                }
                let message = panic_message(error);
                match running {
                    Running::Register(generation) => {
                        let info = self.pending_info.get(&path).cloned();
                        self.on_failed(path, generation, AttemptError::Panicked(message), info);
                    }
                    Running::Unregister => {
                        tracing::error!(socket = %path.display(), panic = %message, "plugin handler panicked while deregistering");
                        self.running.remove(&path);
                        self.dirty.insert(path);
                    }
                }
            }
        }
    }

    fn on_registered(&mut self, path: PathBuf, generation: Generation, registered: Registered) {
        self.running.remove(&path);
        self.backoff.remove(&path);
        self.pending_info.remove(&path);
        let Registered { info, handler } = registered;
        tracing::info!(
            socket = %path.display(), plugin_type = %info.plugin_type, name = %info.name,
            endpoint = %info.endpoint, "registered plugin"
        );
        self.emit(EventKind::Registered, &path, Some(info.clone()), None, None);
        let (name, endpoint) = (info.name.clone(), info.endpoint.clone());
        self.notifications.push(handler.clone(), name, endpoint);
        let entry = ActualEntry {
            generation,
            info,
            handler,
            registered_at: SystemTime::now(),
        };
        self.actual.insert(path.clone(), entry);
        self.dirty.insert(path);
    }

    fn on_failed(
        &mut self,
        path: PathBuf,
        generation: Generation,
        error: AttemptError,
        info: Option<PluginDescription>,
    ) {
        let error = Arc::new(error);
        self.running.remove(&path);
        let previous = self.backoff.remove(&path);
        let schedule = Backoff::new(self.config.initial_backoff, self.config.max_backoff);
        let (backoff, said) = SocketRetry::after_failure(
            previous,
            generation,
            error.clone(),
            Instant::now(),
            &schedule,
        );
        let delay = backoff.retry.due().map(|d| d.delay).unwrap_or_default();
        if said == Said::NewError {
            tracing::warn!(socket = %path.display(), %error, retry_in = ?delay, "plugin registration failed");
        } else {
            tracing::debug!(socket = %path.display(), %error, failures = backoff.retry.failures(), retry_in = ?delay, "plugin registration failed again");
        }
        let retry_in = Some(delay.as_millis() as u64);
        if let Some(info) = &info {
            self.pending_info.insert(path.clone(), info.clone());
        }
        self.emit(
            EventKind::Failed,
            &path,
            info,
            Some(error.to_string()),
            retry_in,
        );
        if let Some(retry_at) = backoff.retry_at() {
            self.timers.insert((retry_at, path.clone()));
        }
        self.backoff.insert(path.clone(), backoff);
        self.dirty.insert(path);
    }

    fn emit(
        &self,
        kind: EventKind,
        path: &Path,
        plugin: Option<PluginDescription>,
        error: Option<String>,
        retry_in_ms: Option<u64>,
    ) {
        let event = AgentEvent::plugin(kind, path, plugin, error, retry_in_ms);
        let _ = self.events.send(event);
    }

    /// Makes the rows of `touched` again and publishes the table.
    fn publish(&mut self) {
        for path in std::mem::take(&mut self.touched) {
            let row = Row::of(
                &path,
                &self.desired,
                &self.actual,
                &self.running,
                &self.backoff,
                &self.pending_info,
            );
            self.rows.set(path, row);
        }
        self.published
            .publish(PluginSnapshot::new(self.rows.publish()));
    }
}

fn panic_message(error: JoinError) -> String {
    let payload = error.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests;
