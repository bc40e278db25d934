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
use nodeplugins_api::retry::Retry;
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
    let mut retry: Retry<String> = Retry::default();
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            stream = runtime.container_events() => stream,
        };
        let problem = match stream {
            Ok(mut stream) => {
                // Whatever happened while no stream was open.
                let _ = events.send(LifecycleEvent::Relist);
                let mut delivered = false;
                let end = loop {
                    let next = tokio::select! {
                        () = shutdown.cancelled() => return,
                        next = stream.next() => next,
                    };
                    match next {
                        Some(Ok(event)) => {
                            delivered = true;
                            retry.succeeded();
                            let told = match event.pod_uid {
                                Some(uid) => LifecycleEvent::Pod(uid),
                                None => LifecycleEvent::Relist,
                            };
                            let _ = events.send(told);
                        }
                        Some(Err(e)) => break e.to_string(),
                        None => break "the stream ended".to_string(),
                    }
                };
                let _ = events.send(LifecycleEvent::Relist);
                // A stream that told something is asked for again at once;
                // one that failed straight away is a runtime away.
                if delivered {
                    continue;
                }
                end
            }
            Err(e) if e.code() == Some(tonic::Code::Unimplemented) => {
                tracing::info!("the runtime offers no container events: relisting every second");
                relist(&events, &shutdown).await;
                return;
            }
            Err(e) => e.to_string(),
        };
        // Said once for each time they go away, whatever the errors.
        if !retry.failing() {
            tracing::warn!(error = %problem, "cannot follow the runtime's container events; relisting each second until they are back");
        }
        let now = tokio::time::Instant::now();
        retry.failed(problem, &backoff, now);
        let until = retry.due_at().unwrap_or(now);
        loop {
            let now = tokio::time::Instant::now();
            if now >= until {
                break;
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RELIST_PERIOD.min(until - now)) => {}
            }
            let _ = events.send(LifecycleEvent::Relist);
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
