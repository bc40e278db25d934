//! The reconciler's state transitions, driven by watcher reports sent
//! straight to it: no directory is watched and no socket exists, so every
//! registration fails at its dial, and a registered plugin is put in place
//! by hand.

use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::event::EventSubject;
use crate::plugin_manager::PluginState;
use crate::plugin_manager::handler::HandlerError;
use crate::plugin_manager::status::PluginStatus;
use crate::published::Store;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A handler recording the deregistrations it is asked for.
#[derive(Default)]
struct Recording {
    deregistered: Mutex<Vec<(String, String)>>,
}

#[async_trait::async_trait]
impl PluginHandler for Recording {
    async fn validate(&self, _: &str, _: &str, _: &[String]) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn register(&self, _: &str, _: &str, _: &[String]) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        let mut deregistered = self.deregistered.lock().unwrap_or_else(|p| p.into_inner());
        deregistered.push((name.into(), endpoint.into()));
    }
}

/// A reconciler running on its own task, and what it publishes.
struct Harness {
    watch: mpsc::Sender<WatchEvent>,
    events: broadcast::Receiver<AgentEvent>,
    snapshot: Store<PluginSnapshot>,
    ready: watch::Receiver<bool>,
    shutdown: CancellationToken,
}

/// A reconciler for `dir` with quick retries, changed by `prepare` before
/// it runs.
fn start(dir: &Path, prepare: impl FnOnce(&mut Reconciler)) -> Harness {
    let mut config = PluginManagerConfig::new(dir);
    config.initial_backoff = Duration::from_millis(20);
    config.max_backoff = Duration::from_millis(40);
    config.connection_refused_grace = Duration::ZERO;
    let (control_tx, control_rx) = mpsc::channel(16);
    let events = broadcast::channel(64).0;
    let (published, snapshot) = Publisher::new(PluginSnapshot::default());
    let ready = watch::channel(false).0;
    let mut reconciler = Reconciler::new(
        Arc::new(config),
        HandlerTable::default(),
        control_tx,
        events.clone(),
        published,
        ready.clone(),
    );
    prepare(&mut reconciler);
    let (watch_tx, watch_rx) = mpsc::channel(16);
    let shutdown = CancellationToken::new();
    let harness = Harness {
        watch: watch_tx,
        events: events.subscribe(),
        snapshot,
        ready: ready.subscribe(),
        shutdown: shutdown.clone(),
    };
    tokio::spawn(reconciler.run(watch_rx, control_rx, shutdown));
    harness
}

impl Harness {
    async fn report(&self, event: WatchEvent) {
        self.watch.send(event).await.unwrap();
    }

    /// The next event of `kind`, skipping others.
    async fn event(&mut self, kind: EventKind) -> AgentEvent {
        loop {
            let event = tokio::time::timeout(TIMEOUT, self.events.recv())
                .await
                .unwrap_or_else(|_| panic!("no {kind:?} event"))
                .unwrap();
            if event.kind == kind {
                return event;
            }
        }
    }

    /// The table, once `pred` holds for it.
    async fn table_when(&mut self, pred: impl Fn(&[PluginStatus]) -> bool) -> Vec<PluginStatus> {
        self.snapshot
            .wait_for(TIMEOUT, |s| s.status_at(Instant::now()), |t| pred(t))
            .await
            .unwrap()
            .expect("the table in time")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn added(path: &Path, inode: u64) -> WatchEvent {
    WatchEvent::Added {
        path: path.to_owned(),
        identity: Some((1, inode)),
    }
}

#[tokio::test]
async fn a_socket_nobody_answers_fails_and_is_retried_with_growing_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.sock");
    let mut manager = start(dir.path(), |_| {});
    manager.report(added(&path, 1)).await;

    let failed = manager.event(EventKind::Failed).await;
    let EventSubject::PluginManager {
        socket_path,
        retry_in_ms,
        ..
    } = &failed.subject
    else {
        panic!("not a plugin manager event: {failed:?}");
    };
    assert_eq!(socket_path, &path);
    assert_eq!(*retry_in_ms, Some(20));
    assert!(failed.detail().is_some(), "{failed:?}");
    let table = manager
        .table_when(|t| t.iter().any(|p| p.state == PluginState::Failed))
        .await;
    assert_eq!(table.len(), 1);
    assert_eq!(table[0].socket_path, path);

    // The timer retries it, and the next failure waits twice as long.
    let again = manager.event(EventKind::Failed).await;
    let EventSubject::PluginManager { retry_in_ms, .. } = again.subject else {
        panic!("not a plugin manager event");
    };
    assert_eq!(retry_in_ms, Some(40));
    manager
        .table_when(|t| t.iter().any(|p| p.failures >= 2))
        .await;
}

#[tokio::test]
async fn a_removed_socket_leaves_the_table_without_a_deregistration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.sock");
    let mut manager = start(dir.path(), |_| {});
    manager.report(added(&path, 1)).await;
    manager.event(EventKind::Failed).await;

    manager
        .report(WatchEvent::Removed { path: path.clone() })
        .await;
    manager.table_when(<[PluginStatus]>::is_empty).await;
    // Nothing was registered, so nothing is deregistered.
    while let Ok(event) = manager.events.try_recv() {
        assert_ne!(event.kind, EventKind::Deregistered, "{event:?}");
    }
}

#[tokio::test]
async fn a_removed_registered_plugin_is_deregistered_from_its_handler() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.sock");
    let handler = Arc::new(Recording::default());
    let info = PluginDescription {
        plugin_type: "ExamplePlugin".into(),
        name: "example".into(),
        endpoint: "/e.sock".into(),
        versions: vec!["v1".into()],
    };
    let registered = handler.clone();
    let described = info.clone();
    let mut manager = start(dir.path(), |r| {
        r.desired.add_or_update(&path, Some((1, 1)));
        let generation = r.desired.get(&path).map(|d| d.generation).unwrap();
        r.actual.insert(
            path.clone(),
            ActualEntry {
                generation,
                info: described,
                handler: registered,
                registered_at: SystemTime::now(),
            },
        );
        r.touched.insert(path.clone());
    });
    let table = manager.table_when(|t| !t.is_empty()).await;
    assert_eq!(table[0].state, PluginState::Registered);

    // A second report of the same file changes nothing.
    manager.report(added(&path, 1)).await;
    manager
        .report(WatchEvent::Removed { path: path.clone() })
        .await;
    let event = manager.event(EventKind::Deregistered).await;
    let EventSubject::PluginManager { plugin, .. } = event.subject else {
        panic!("not a plugin manager event");
    };
    assert_eq!(plugin, Some(info));
    manager.table_when(<[PluginStatus]>::is_empty).await;
    let deregistered = handler.deregistered.lock().unwrap().clone();
    assert_eq!(deregistered, [("example".into(), "/e.sock".into())]);
}

#[tokio::test]
async fn a_socket_replaced_at_its_path_is_deregistered_then_registered_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.sock");
    let handler = Arc::new(Recording::default());
    let registered = handler.clone();
    let mut manager = start(dir.path(), |r| {
        r.desired.add_or_update(&path, Some((1, 1)));
        let generation = r.desired.get(&path).map(|d| d.generation).unwrap();
        r.actual.insert(
            path.clone(),
            ActualEntry {
                generation,
                info: PluginDescription {
                    plugin_type: "ExamplePlugin".into(),
                    name: "example".into(),
                    endpoint: "/e.sock".into(),
                    versions: vec![],
                },
                handler: registered,
                registered_at: SystemTime::now(),
            },
        );
    });
    // A new file at the same path: a new plugin.
    manager.report(added(&path, 2)).await;
    manager.event(EventKind::Deregistered).await;
    // The new one is registered next (and fails here: nobody listens).
    manager.event(EventKind::Failed).await;
    let table = manager
        .table_when(|t| t.iter().any(|p| p.state == PluginState::Failed))
        .await;
    assert_eq!(table.len(), 1);
    assert_eq!(handler.deregistered.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_resync_forgets_the_sockets_it_does_not_list_and_ready_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let mut manager = start(dir.path(), |_| {});
    manager.report(added(&a, 1)).await;
    manager.report(added(&b, 2)).await;
    manager.table_when(|t| t.len() == 2).await;

    manager
        .report(WatchEvent::Resync {
            sockets: vec![(b.clone(), Some((1, 2)))],
        })
        .await;
    let table = manager
        .table_when(|t| t.len() == 1 && t[0].socket_path == b)
        .await;
    assert_eq!(table[0].socket_path, b);

    assert!(!*manager.ready.borrow());
    manager.report(WatchEvent::Ready).await;
    tokio::time::timeout(TIMEOUT, manager.ready.wait_for(|r| *r))
        .await
        .expect("ready in time")
        .unwrap();
}
