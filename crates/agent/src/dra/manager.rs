//! The DRA manager: one task owns the drivers ([`State`]) and receives
//! commands from [`DraHandle`]s, reports from each instance's connection
//! monitor and health stream, the ends of cleanup hook calls and of the
//! claim book's checkpoint writes; it wakes only for those and for a
//! cleanup falling due. It loads the claim book, which callers change
//! themselves ([`ClaimBook`]).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use nodeplugins_api::dra_health::v1 as health_v1;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::command::{Command, Route, Routes, Shared};
use super::config::DraManagerConfig;
use super::error::DraError;
use super::handle::DraHandle;
use super::metrics::DraMetrics;
use super::snapshot::{DraSnapshot, DriverSnapshot};
use crate::checkpoint::{Ends, Written};
use crate::common::owner::Mailbox;
use crate::common::shards::Shards;
use crate::dra::drivers::cleanup::{BoundedCleanup, CleanupDone, DriverCleanup, node_started};
use crate::dra::drivers::cleanup_scheduler::CleanupScheduler;
use crate::dra::drivers::connection::{Channel, Demand, Link, LinkEvent, Monitor, MonitorConfig};
use crate::dra::drivers::health;
use crate::dra::drivers::state::{Driver, Instance, InstanceId, State};
use crate::dra::prepare::checkpoint;
use crate::dra::prepare::claim_book::ClaimBook;
use crate::dra::prepare::records::PreparedClaims;
use crate::event::{AgentEvent, EventKind};
use crate::fs_watch::FsWatcher;
use crate::published::Publisher;
use nodeplugins_api::dra_client::{DraService, HealthService};
use nodeplugins_api::timer::sleep_until;

#[cfg(test)]
mod tests;

/// The DRA manager's task. [`new`](Self::new) gives it with its
/// [`DraHandle`]; [`run`](Self::run) it.
pub struct DraManager {
    config: DraManagerConfig,
    cleanup: Arc<dyn DriverCleanup>,
    commands: mpsc::UnboundedReceiver<Command>,
    events: broadcast::Sender<AgentEvent>,
    routes: Publisher<Routes>,
    claims: Arc<ClaimBook>,
    /// The prepared claims' sender, for the book once loaded.
    prepared: Publisher<PreparedClaims>,
    snapshot: Publisher<DraSnapshot>,
}

impl DraManager {
    /// A manager with no drivers, calling `cleanup` when a driver stays
    /// unusable, and the handle callers use.
    pub fn new(config: DraManagerConfig, cleanup: Arc<dyn DriverCleanup>) -> (Self, DraHandle) {
        let cleanup: Arc<dyn DriverCleanup> = Arc::new(BoundedCleanup(cleanup));
        let (commands_tx, commands) = Mailbox::new();
        let events = broadcast::channel(1024).0;
        let (routes, routes_store) = Publisher::new(Routes::new());
        let claims = Arc::new(ClaimBook::default());
        let (prepared, prepared_store) = Publisher::new(PreparedClaims::default());
        let (snapshot, store) = Publisher::new(DraSnapshot::default());
        let shared = Arc::new(Shared {
            config: config.clone(),
            events: events.clone(),
            routes: routes_store,
            prepared: prepared_store,
            claims: claims.clone(),
            store,
            metrics: DraMetrics::default(),
        });
        let handle = DraHandle {
            commands: commands_tx,
            shared,
        };
        let manager = Self {
            config,
            cleanup,
            commands,
            events,
            routes,
            claims,
            prepared,
            snapshot,
        };
        (manager, handle)
    }

    /// Loads the prepared claims from the state directory, if there is one,
    /// runs the start-up cleanup ([`DriverCleanup::node_started`], retried
    /// with backoff until it succeeds) and manages drivers until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let tasks = TaskTracker::new();
        let written = match &self.config.state_dir {
            None => {
                self.claims
                    .load(PreparedClaims::default(), None, self.prepared);
                None
            }
            Some(dir) => {
                let (persister, ends, loaded) = checkpoint::open(dir, &tasks).await;
                self.claims.load(loaded, Some(persister), self.prepared);
                Some(ends)
            }
        };
        tasks.spawn(node_started(self.cleanup.clone(), shutdown.clone()));
        let (links_tx, links) = mpsc::unbounded_channel();
        let (health_tx, health) = mpsc::unbounded_channel();
        let sockets = self.config.fs_watcher.clone();
        let mut owner = Owner {
            scheduler: CleanupScheduler::new(self.cleanup, self.config.cleanup_grace),
            config: self.config,
            state: State::default(),
            commands: self.commands,
            links_tx,
            links,
            health_tx,
            health,
            events: self.events,
            routes: self.routes,
            claims: self.claims,
            written,
            snapshot: self.snapshot,
            published: false,
            rows: Shards::default(),
            touched: HashSet::new(),
            tasks,
            sockets,
            shutdown,
        };
        owner.publish();
        owner.run().await;
    }
}

/// The most waiting commands one wake-up handles before publishing.
const COMMANDS_AT_ONCE: usize = 256;

struct Owner {
    config: DraManagerConfig,
    state: State,
    commands: mpsc::UnboundedReceiver<Command>,
    /// Connection monitors report here.
    links_tx: mpsc::UnboundedSender<(InstanceId, LinkEvent)>,
    links: mpsc::UnboundedReceiver<(InstanceId, LinkEvent)>,
    /// Health streams report here.
    health_tx: mpsc::UnboundedSender<(InstanceId, Vec<health_v1::DeviceHealth>)>,
    health: mpsc::UnboundedReceiver<(InstanceId, Vec<health_v1::DeviceHealth>)>,
    /// Calls the cleanup hook for drivers that stay unusable.
    scheduler: CleanupScheduler,
    events: broadcast::Sender<AgentEvent>,
    /// Where each driver's calls go, published for handles.
    routes: Publisher<Routes>,
    /// The prepared claims, which callers change.
    claims: Arc<ClaimBook>,
    /// The ends of the claims' checkpoint writes (none without a state
    /// directory).
    written: Option<Ends>,
    /// The drivers after every change, for readers.
    snapshot: Publisher<DraSnapshot>,
    /// Published during the current event (before its reply).
    published: bool,
    /// Each driver's row of the published snapshot.
    rows: Shards<String, DriverSnapshot>,
    /// Drivers whose row is to be made again.
    touched: HashSet<String>,
    /// Monitors and health streams.
    tasks: TaskTracker,
    /// One inotify instance for every disconnected instance's socket.
    sockets: FsWatcher,
    shutdown: CancellationToken,
}

impl Owner {
    async fn run(mut self) {
        loop {
            let next_due = self.scheduler.next_due(&self.state.drivers);
            self.published = false;
            let mut changed = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => break,
                Some(command) = self.commands.recv() => self.on_command(command),
                Some((id, event)) = self.links.recv() => self.on_link(id, event),
                Some((id, devices)) = self.health.recv() => self.on_health(id, devices),
                done = self.scheduler.next_done() => self.on_cleanup_done(done),
                () = sleep_until(next_due) => self.start_due_cleanups(),
                Some(written) = next_written(&mut self.written) => self.claims.on_written(written),
            };
            // Commands waiting already are handled before publishing once
            // for all of them (a burst of registrations sends many).
            for _ in 0..COMMANDS_AT_ONCE {
                let Ok(command) = self.commands.try_recv() else {
                    break;
                };
                changed |= self.on_command(command);
            }
            if changed && !self.published {
                self.publish();
            }
        }
        self.scheduler.stop();
        if let Some(written) = &mut self.written {
            self.claims.finish(written).await;
        }
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Publishes the drivers: a new snapshot, and a new change count.
    fn publish(&mut self) {
        let problem = self.claims.problem();
        for driver in std::mem::take(&mut self.touched) {
            let row = self.state.driver_snapshot(&driver);
            self.rows.set(driver, row);
        }
        let rows = self.rows.publish();
        let snapshot = DraSnapshot::new(rows, self.config.health_timeout, problem);
        self.snapshot.publish(snapshot);
        self.published = true;
    }

    /// Cancels the driver's cleanup if an instance is connected, or schedules
    /// one if none is and none is pending (a pending one keeps its deadline).
    fn reschedule_cleanup(&mut self, driver: &str) {
        self.touched.insert(driver.to_string());
        let Some(usable) = self.state.drivers.get(driver).map(Driver::any_connected) else {
            return;
        };
        let now = Instant::now();
        if let Some(change) =
            self.scheduler
                .reschedule(&mut self.state.drivers, driver, usable, now)
        {
            let (kind, detail) = change.report(driver);
            self.event(kind, driver, None, detail);
        }
    }

    /// Calls the hook for every cleanup that is due.
    fn start_due_cleanups(&mut self) -> bool {
        self.scheduler
            .start_due(&mut self.state.drivers, Instant::now())
    }

    fn on_cleanup_done(&mut self, done: CleanupDone) -> bool {
        let driver = done.0.clone();
        self.touched.insert(driver.clone());
        let now = Instant::now();
        let Some(finished) = self.scheduler.finish(&mut self.state.drivers, done, now) else {
            return false;
        };
        let (kind, detail) = finished.report(&driver);
        self.event(kind, &driver, None, detail);
        true
    }

    fn event(&self, kind: EventKind, driver: &str, endpoint: Option<&str>, detail: Option<String>) {
        let _ = self
            .events
            .send(AgentEvent::dra(kind, driver, endpoint, detail));
    }

    fn on_command(&mut self, command: Command) -> bool {
        match command {
            Command::Register {
                driver,
                endpoint,
                service,
                health_service,
                connect_now,
                reply,
            } => {
                let result = self.register(&driver, endpoint, service, health_service, connect_now);
                let changed = result.is_ok();
                if changed {
                    self.publish();
                }
                let _ = reply.send(result);
                changed
            }
            Command::Connect { driver, endpoint } => {
                if let Some(instance) = self
                    .state
                    .drivers
                    .get(&driver)
                    .and_then(|d| d.instances.iter().find(|i| i.endpoint == endpoint))
                {
                    instance.demand.connect();
                }
                false
            }
            Command::Deregister {
                driver,
                endpoint,
                reply,
            } => {
                let removed = self.deregister(&driver, &endpoint);
                if removed.is_some() {
                    self.publish();
                }
                let _ = reply.send(());
                // Its monitor and health stream stop once the caller is
                // answered: closing a connection is no part of the answer.
                if let Some(removed) = &removed {
                    removed.close.cancel();
                }
                removed.is_some()
            }
        }
    }

    fn register(
        &mut self,
        driver: &str,
        endpoint: String,
        service: DraService,
        health_service: Option<HealthService>,
        connect_now: bool,
    ) -> Result<(), DraError> {
        self.touched.insert(driver.to_string());
        let entry = self.state.drivers.entry(driver.to_string()).or_default();
        if entry.instances.iter().any(|i| i.endpoint == endpoint) {
            return Err(DraError::AlreadyRegistered {
                driver: driver.into(),
                endpoint,
            });
        }
        self.state.next_instance += 1;
        let id = self.state.next_instance;
        // Announced before the connection can report anything.
        self.event(
            EventKind::InstanceAdded,
            driver,
            Some(&endpoint),
            Some(service.to_string()),
        );
        let (link, link_rx) = watch::channel(Link::default());
        let demand = Arc::new(Demand::default());
        let close = self.shutdown.child_token();
        let path: Arc<Path> = Arc::from(Path::new(&endpoint));
        let monitor = Monitor {
            id,
            endpoint: path.clone(),
            config: MonitorConfig {
                dial_timeout: self.config.dial_timeout,
                drain_timeout: self.config.call_timeout,
                reconnect_initial: self.config.reconnect_initial,
                reconnect_max: self.config.reconnect_max,
            },
            reports: self.links_tx.clone(),
            demand: demand.clone(),
            parked: !connect_now,
            sockets: self.sockets.clone(),
            close: close.clone(),
            shutdown: self.shutdown.clone(),
        };
        self.tasks.spawn(monitor.run());
        let channel = Channel::new(link_rx, demand.clone(), path);
        if let Some(health_service) = health_service {
            self.tasks.spawn(health::follow(
                channel.clone(),
                health_service,
                endpoint.clone(),
                id,
                self.health_tx.clone(),
                close.clone(),
            ));
        }
        tracing::info!(%driver, %endpoint, %service, health = ?health_service.map(HealthService::as_str),
            "DRA plugin registered");
        let instance = Instance {
            id,
            endpoint,
            service,
            health_service,
            registered_at: SystemTime::now(),
            link,
            channel,
            health: Arc::default(),
            demand,
            close,
        };
        if let Some(entry) = self.state.drivers.get_mut(driver) {
            entry.instances.push(instance);
        }
        self.state.driver_of.insert(id, driver.to_string());
        self.update_route(driver);
        Ok(())
    }

    /// Removes the instance from the routes and returns it; the caller
    /// stops its monitor (after answering whoever is waiting).
    fn deregister(&mut self, driver: &str, endpoint: &str) -> Option<Instance> {
        self.touched.insert(driver.to_string());
        let entry = self.state.drivers.get_mut(driver)?;
        let at = entry
            .instances
            .iter()
            .position(|i| i.endpoint == endpoint)?;
        let removed = entry.instances.remove(at);
        self.state.driver_of.remove(&removed.id);
        // New calls fail; those running may finish while the monitor drains.
        removed.link.send_modify(Link::close);
        self.update_route(driver);
        tracing::info!(%driver, %endpoint, "DRA plugin deregistered");
        self.event(EventKind::InstanceRemoved, driver, Some(endpoint), None);
        self.reschedule_cleanup(driver);
        Some(removed)
    }

    /// Applies a monitor's report to the instance's published state.
    fn on_link(&mut self, id: InstanceId, event: LinkEvent) -> bool {
        let Some((driver, instance)) = self.state.instance_mut(id) else {
            // Deregistered meanwhile.
            return false;
        };
        self.touched.insert(driver.to_string());
        let kind = match &event {
            LinkEvent::Connected(_) => Some(EventKind::Connected),
            LinkEvent::Lost(_) => Some(EventKind::Disconnected),
            LinkEvent::AttemptFailed { .. } | LinkEvent::Upgraded(_) => None,
        };
        let mut error = None;
        instance.link.send_modify(|l| {
            l.apply(event);
            error = l.last_error.as_ref().map(ToString::to_string);
        });
        let (driver, endpoint) = (driver.to_string(), instance.endpoint.clone());
        if kind.is_some() {
            self.update_route(&driver);
        }
        match kind {
            Some(EventKind::Connected) => {
                self.event(EventKind::Connected, &driver, Some(&endpoint), None);
            }
            Some(kind) => self.event(kind, &driver, Some(&endpoint), error),
            None => {}
        }
        self.reschedule_cleanup(&driver);
        true
    }

    /// Publishes where `driver`'s calls go now, if that changed.
    fn update_route(&mut self, driver: &str) {
        let route = self
            .state
            .drivers
            .get(driver)
            .and_then(Driver::in_use)
            .map(|i| Route {
                instance: i.id,
                endpoint: i.endpoint.clone(),
                service: i.service,
                channel: i.channel.clone(),
            });
        self.routes.modify(|routes| {
            let current = routes.get(driver).map(|r| r.instance);
            if current == route.as_ref().map(|r| r.instance) {
                return false;
            }
            let routes = Arc::make_mut(routes);
            match route {
                Some(route) => routes.insert(driver.to_string(), route),
                None => routes.remove(driver),
            };
            true
        });
    }

    fn on_health(&mut self, id: InstanceId, devices: Vec<health_v1::DeviceHealth>) -> bool {
        let Some((driver, instance)) = self.state.instance_mut(id) else {
            return false;
        };
        self.touched.insert(driver.to_string());
        health::apply(Arc::make_mut(&mut instance.health), devices, Instant::now());
        true
    }
}

/// The end of the next checkpoint write; never, without a checkpoint.
async fn next_written(written: &mut Option<Ends>) -> Option<Written> {
    match written {
        Some(written) => written.recv().await,
        None => std::future::pending().await,
    }
}
