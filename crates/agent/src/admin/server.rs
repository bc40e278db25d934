//! Serving the admin socket.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use nodeplugins_api::transport::{BoundSocket, TransportError};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::event_log::EventLog;
use super::{
    AdminErrorReply, AdminRequest, AgentStatus, AllocateReply, DraPrepareReply, DraUnprepareReply,
    FollowingMarker, ReleaseReply, StatusSources, socket_path,
};
use crate::registry::status::unix_ms;

/// How long a client has to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request line read.
const MAX_REQUEST: usize = 4096;

/// Binds `<root>/nodeplugins/admin.sock` and answers requests until `shutdown`.
pub async fn serve(
    root_dir: PathBuf,
    sources: StatusSources,
    started: SystemTime,
    shutdown: CancellationToken,
) -> Result<(), TransportError> {
    let path = socket_path(&root_dir);
    if let Some(dir) = path.parent() {
        create_private_dir(dir).map_err(|source| TransportError::Bind {
            path: path.clone(),
            source,
        })?;
    }
    let socket = BoundSocket::bind(&path, Some(0o600)).await?;
    let owner = std::fs::metadata(socket.path())
        .map(|m| m.uid())
        .unwrap_or(0);
    let (listener, _file) = socket.into_parts();
    let events = EventLog::start(&sources, shutdown.clone());
    let tasks = TaskTracker::new();
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(socket = %path.display(), error = %e, "admin accept failed");
                    // Out of file descriptors and the like: pause instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let context = Context {
            events: events.clone(),
            sources: sources.clone(),
            root_dir: root_dir.clone(),
            started,
            owner,
            shutdown: shutdown.clone(),
        };
        tasks.spawn(async move { context.answer(stream).await });
    }
    tasks.close();
    Ok(())
}

fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

struct Context {
    events: std::sync::Arc<EventLog>,
    sources: StatusSources,
    root_dir: PathBuf,
    started: SystemTime,
    owner: u32,
    shutdown: CancellationToken,
}

impl Context {
    async fn answer(self, stream: UnixStream) {
        let peer = stream.peer_cred().map(|c| c.uid()).ok();
        let (read, mut write) = stream.into_split();
        // The request is read before anything is answered, even for a peer
        // about to be refused, so that the refusal reaches a client that is
        // still writing instead of breaking its pipe.
        let mut line = String::new();
        let mut reader = BufReader::new(read.take(MAX_REQUEST as u64));
        match tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut line)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        if peer != Some(0) && peer != Some(self.owner) {
            tracing::warn!(peer_uid = ?peer, "refused admin connection from another user");
            let _ = write_line(
                &mut write,
                &AdminErrorReply {
                    error: "permission denied".into(),
                },
            )
            .await;
            return;
        }
        match serde_json::from_str::<AdminRequest>(line.trim()) {
            Ok(AdminRequest::Status) => {
                let reply = match self.sources.registry.snapshot().await {
                    Ok(plugins) => serde_json::to_value(AgentStatus {
                        version: env!("CARGO_PKG_VERSION").to_string(),
                        root_dir: self.root_dir.clone(),
                        started_at_unix_ms: unix_ms(self.started),
                        uptime_ms: self.started.elapsed().map_or(0, |d| d.as_millis() as u64),
                        plugins,
                        csi_drivers: self.sources.csi.list(),
                        resources: self.sources.devices.status(),
                        device_checkpoint_error: self.sources.devices.checkpoint_error(),
                        dra_drivers: self.sources.dra.status(),
                        metrics_addr: self.sources.metrics_addr.map(|a| a.to_string()),
                    }),
                    Err(e) => serde_json::to_value(AdminErrorReply {
                        error: e.to_string(),
                    }),
                };
                if let Ok(reply) = reply {
                    let _ = write_line(&mut write, &reply).await;
                }
            }
            Ok(AdminRequest::Allocate {
                pod,
                container,
                resources,
            }) => {
                let devices = &self.sources.devices;
                // What the container held before: a repeat request returns it,
                // and a failed request must not undo it.
                let held: std::collections::BTreeSet<String> = devices
                    .allocations()
                    .into_iter()
                    .filter(|a| a.pod_uid == pod && a.container == container)
                    .map(|a| a.resource)
                    .collect();
                let mut done = Vec::new();
                let mut failure = None;
                for (resource, count) in &resources {
                    match devices.allocate(&pod, &container, resource, *count).await {
                        Ok(allocation) => done.push(allocation),
                        Err(e) => {
                            failure = Some(e.to_string());
                            break;
                        }
                    }
                }
                let reply = match failure {
                    None => serde_json::to_value(AllocateReply { allocations: done }),
                    Some(error) => {
                        // All or nothing: undo what this request allocated.
                        for allocation in done.iter().filter(|a| !held.contains(&a.resource)) {
                            devices
                                .forget(
                                    &allocation.pod_uid,
                                    &allocation.container,
                                    &allocation.resource,
                                )
                                .await;
                        }
                        serde_json::to_value(AdminErrorReply { error })
                    }
                };
                if let Ok(reply) = reply {
                    let _ = write_line(&mut write, &reply).await;
                }
            }
            Ok(AdminRequest::Release { pod }) => {
                let released = self.sources.devices.release(&pod).await;
                let _ = write_line(&mut write, &ReleaseReply { released }).await;
            }
            Ok(AdminRequest::DraPrepare { driver, claims }) => {
                let reply = match self.sources.dra.prepare(&driver, &claims).await {
                    Ok(claims) => serde_json::to_value(DraPrepareReply { claims }),
                    Err(e) => serde_json::to_value(AdminErrorReply {
                        error: e.to_string(),
                    }),
                };
                if let Ok(reply) = reply {
                    let _ = write_line(&mut write, &reply).await;
                }
            }
            Ok(AdminRequest::DraUnprepare { driver, claims }) => {
                let reply = match self.sources.dra.unprepare(&driver, &claims).await {
                    Ok(claims) => serde_json::to_value(DraUnprepareReply { claims }),
                    Err(e) => serde_json::to_value(AdminErrorReply {
                        error: e.to_string(),
                    }),
                };
                if let Ok(reply) = reply {
                    let _ = write_line(&mut write, &reply).await;
                }
            }
            Ok(AdminRequest::Events { history, follow }) => {
                let (past, mut live) = self.events.subscribe();
                if history {
                    for event in &past {
                        if write_line(&mut write, event).await.is_err() {
                            return;
                        }
                    }
                }
                if !follow {
                    return;
                }
                let marker = FollowingMarker { following: true };
                if write_line(&mut write, &marker).await.is_err() {
                    return;
                }
                loop {
                    let event = tokio::select! {
                        () = self.shutdown.cancelled() => return,
                        event = live.recv() => event,
                    };
                    match event {
                        Ok(event) => {
                            if write_line(&mut write, &event).await.is_err() {
                                return;
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            let error = AdminErrorReply {
                                error: format!("missed {missed} events"),
                            };
                            if write_line(&mut write, &error).await.is_err() {
                                return;
                            }
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            }
            Err(e) => {
                let _ = write_line(
                    &mut write,
                    &AdminErrorReply {
                        error: format!("bad request: {e}"),
                    },
                )
                .await;
            }
        }
    }
}

async fn write_line(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    value: &impl serde::Serialize,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
}
