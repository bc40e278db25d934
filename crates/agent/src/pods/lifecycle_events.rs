//! The pod lifecycle event generator: what happens to containers, told to
//! the pods' workers. The runtime's container events where it offers them
//! (each told to the worker of its pod at once), else a relist: every
//! worker looks again each second, as the kubelet's generic PLEG relists.
//! When the event stream ends (the runtime restarted), every worker looks
//! again (events may have been missed) and the stream is asked for again,
//! with a relist each second meanwhile.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use nodeplugins_api::backoff::Backoff;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::runtime::ContainerRuntime;

/// How often every worker looks again without events (the kubelet's
/// relist period).
pub(crate) const RELIST_PERIOD: Duration = Duration::from_secs(1);

/// What a worker is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LifecycleEvent {
    /// A container of the pod of this UID changed.
    Pod(String),
    /// Any container may have changed: every worker looks.
    Relist,
}

impl LifecycleEvent {
    /// Whether the worker of pod `uid` is to look.
    pub(crate) fn concerns(&self, uid: &str) -> bool {
        match self {
            Self::Pod(pod) => pod == uid,
            Self::Relist => true,
        }
    }
}

/// Follows `runtime`'s container events until `shutdown`, telling
/// `events`.
pub(crate) async fn generate(
    runtime: Arc<dyn ContainerRuntime>,
    events: broadcast::Sender<LifecycleEvent>,
    shutdown: CancellationToken,
) {
    let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let mut failures = 0u32;
    let mut logged = false;
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            stream = runtime.container_events() => stream,
        };
        match stream {
            Ok(mut stream) => {
                failures = 0;
                logged = false;
                // Whatever happened while no stream was open.
                let _ = events.send(LifecycleEvent::Relist);
                loop {
                    let next = tokio::select! {
                        () = shutdown.cancelled() => return,
                        next = stream.next() => next,
                    };
                    match next {
                        Some(Ok(event)) => {
                            let told = match event.pod_uid {
                                Some(uid) => LifecycleEvent::Pod(uid),
                                None => LifecycleEvent::Relist,
                            };
                            let _ = events.send(told);
                        }
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "the runtime's container events failed; relisting");
                            break;
                        }
                        None => break,
                    }
                }
                let _ = events.send(LifecycleEvent::Relist);
            }
            Err(e) if e.code() == Some(tonic::Code::Unimplemented) => {
                tracing::info!("the runtime offers no container events: relisting every second");
                relist(&events, &shutdown).await;
                return;
            }
            Err(e) => {
                if !logged {
                    tracing::warn!(error = %e, "cannot follow the runtime's container events; relisting until they are back");
                    logged = true;
                }
                failures += 1;
                let until = tokio::time::Instant::now() + backoff.delay(failures);
                // A relist each second meanwhile.
                while tokio::time::Instant::now() < until {
                    let _ = events.send(LifecycleEvent::Relist);
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(RELIST_PERIOD.min(until - tokio::time::Instant::now())) => {}
                    }
                }
            }
        }
    }
}

/// A relist each second until `shutdown`.
async fn relist(events: &broadcast::Sender<LifecycleEvent>, shutdown: &CancellationToken) {
    let mut ticks = tokio::time::interval(RELIST_PERIOD);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => { let _ = events.send(LifecycleEvent::Relist); }
        }
    }
}
