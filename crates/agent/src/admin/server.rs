//! Serving the admin socket.

use crate::fs_watch::FsWatcher;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nodeplugins_api::transport::{BoundSocket, TransportError};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::event_log::EventLog;
use super::parts::AdminParts;
use super::protocol::{AdminErrorReply, AdminRequest, AgentStatus, FollowingMarker, socket_path};
use super::requests::error_reply;
use crate::common::served_socket;
use crate::common::unix_time::unix_ms;

/// How long a client has to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request line read.
const MAX_REQUEST: usize = 4096;

/// Binds `<root>/nodeplugins/admin.sock` and answers requests until
/// `shutdown`, binding it again whenever it is removed.
pub(crate) async fn serve(
    root_dir: PathBuf,
    parts: AdminParts,
    watcher: FsWatcher,
    started: SystemTime,
    shutdown: CancellationToken,
) -> Result<(), TransportError> {
    let path = socket_path(&root_dir);
    let tasks = TaskTracker::new();
    let events = EventLog::start(&parts, &tasks, shutdown.clone());
    let mut socket = bind(&path).await?;
    loop {
        let bound = served_socket::identity(&path);
        let owner = std::fs::metadata(&path).map(|m| m.uid()).unwrap_or(0);
        let (listener, file) = socket.into_parts();
        let removed = served_socket::removed(&watcher, &path, bound);
        tokio::pin!(removed);
        let gone = loop {
            let stream = tokio::select! {
                () = shutdown.cancelled() => break false,
                () = &mut removed => break true,
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
                parts: parts.clone(),
                root_dir: root_dir.clone(),
                started,
                owner,
                shutdown: shutdown.clone(),
            };
            tasks.spawn(async move { context.answer(stream).await });
        };
        drop((listener, file));
        if !gone {
            break;
        }
        tracing::warn!(socket = %path.display(), "the admin socket was removed; serving it again");
        parts.admin.socket_recreated();
        match served_socket::bind_again(&path, || bind(&path), &shutdown).await {
            Some(again) => socket = again,
            None => break,
        }
    }
    tasks.close();
    tasks.wait().await;
    Ok(())
}

/// Binds the admin socket: mode 0600 in a 0700 directory.
async fn bind(path: &Path) -> Result<BoundSocket, TransportError> {
    if let Some(dir) = path.parent() {
        crate::common::private_dir::create_private_dir(dir).map_err(|source| {
            TransportError::Bind {
                path: path.to_owned(),
                source,
            }
        })?;
    }
    BoundSocket::bind(path, Some(0o600)).await
}

struct Context {
    events: std::sync::Arc<EventLog>,
    parts: AdminParts,
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
        let read = tokio::select! {
            () = self.shutdown.cancelled() => return,
            read = tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut line)) => read,
        };
        if !matches!(read, Ok(Ok(_))) {
            return;
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
        let reply = match serde_json::from_str::<AdminRequest>(line.trim()) {
            Ok(AdminRequest::Status) => self.status().await,
            Ok(AdminRequest::Events { history, follow }) => {
                self.stream_events(&mut write, history, follow).await;
                return;
            }
            Ok(request) => super::requests::answer(&self.parts, request).await,
            Err(e) => error_reply(format!("bad request: {e}")),
        };
        let _ = write_line(&mut write, &reply).await;
    }

    /// The agent's status, or why it cannot be read.
    async fn status(&self) -> serde_json::Value {
        let parts = &self.parts;
        let (plugins, resources, checkpoint, dra_drivers, dra_checkpoint) = tokio::join!(
            parts.plugins.status(),
            parts.devices.status(),
            parts.devices.checkpoint_problem(),
            parts.dra.status(),
            parts.dra.checkpoint_problem(),
        );
        #[cfg(feature = "kube")]
        let kube_api = parts.kube.as_ref().map(|kube| (*kube.snapshot()).clone());
        let status = (|| -> Result<AgentStatus, PartStopped> {
            Ok(AgentStatus {
                version: env!("CARGO_PKG_VERSION").to_string(),
                root_dir: self.root_dir.clone(),
                started_at_unix_ms: unix_ms(self.started),
                uptime_ms: self.started.elapsed().map_or(0, |d| d.as_millis() as u64),
                plugins: plugins?,
                csi_drivers: parts.csi.list(),
                resources: resources?,
                device_checkpoint_error: checkpoint?.map(|problem| problem.to_string()),
                dra_drivers: dra_drivers?,
                dra_checkpoint_error: dra_checkpoint?.map(|problem| problem.to_string()),
                metrics_addr: parts.metrics_addr.map(|a| a.to_string()),
                #[cfg(feature = "kube")]
                kube_api,
                sockets: [
                    Some(parts.devices.kubelet_socket()),
                    Some(crate::common::served_socket::SocketStatus::of(
                        &socket_path(&self.root_dir),
                        parts.admin.socket_recreations(),
                    )),
                    parts.pod_resources_socket.as_ref().map(|path| {
                        crate::common::served_socket::SocketStatus::of(
                            path,
                            parts.pod_resources.socket_recreations(),
                        )
                    }),
                ]
                .into_iter()
                .flatten()
                .collect(),
            })
        })();
        let reply = match status {
            Ok(status) => serde_json::to_value(status),
            Err(error) => serde_json::to_value(AdminErrorReply {
                error: error.to_string(),
            }),
        };
        reply.unwrap_or_default()
    }

    /// The recent events (with `history`), then every new one until the
    /// client hangs up (with `follow`).
    async fn stream_events(&self, write: &mut OwnedWriteHalf, history: bool, follow: bool) {
        let (past, mut live) = self.events.subscribe();
        if history {
            for event in &past {
                if write_line(write, event).await.is_err() {
                    return;
                }
            }
        }
        if !follow {
            return;
        }
        let marker = FollowingMarker { following: true };
        if write_line(write, &marker).await.is_err() {
            return;
        }
        // Every event already waiting goes out in the same write, so a burst
        // costs a write per batch rather than per event, and the stream
        // keeps up with what the agent's one thread produces.
        let mut batch = Vec::new();
        loop {
            let event = tokio::select! {
                () = self.shutdown.cancelled() => return,
                event = live.recv() => event,
            };
            let mut next = Some(event);
            while let Some(event) = next.take() {
                let line = match event {
                    Ok(event) => append_line(&mut batch, &event),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        let error = AdminErrorReply {
                            error: format!("missed {missed} events"),
                        };
                        append_line(&mut batch, &error)
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if line.is_err() {
                    return;
                }
                if batch.len() < MAX_EVENT_BATCH {
                    next = match live.try_recv() {
                        Ok(event) => Some(Ok(event)),
                        Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                            Some(Err(broadcast::error::RecvError::Lagged(missed)))
                        }
                        Err(broadcast::error::TryRecvError::Closed) => {
                            Some(Err(broadcast::error::RecvError::Closed))
                        }
                        Err(broadcast::error::TryRecvError::Empty) => None,
                    };
                }
            }
            if write.write_all(&batch).await.is_err() {
                return;
            }
            batch.clear();
        }
    }
}

/// The most bytes of events written at once.
const MAX_EVENT_BATCH: usize = 64 * 1024;

/// `value` as a JSON line at the end of `batch`.
fn append_line(batch: &mut Vec<u8>, value: &impl serde::Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *batch, value).map_err(std::io::Error::other)?;
    batch.push(b'\n');
    Ok(())
}

async fn write_line(
    write: &mut OwnedWriteHalf,
    value: &impl serde::Serialize,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
}

/// A part of the agent that stopped, so the status cannot be complete.
#[derive(Debug, thiserror::Error)]
enum PartStopped {
    #[error(transparent)]
    Plugins(#[from] crate::plugin_manager::PluginManagerStopped),
    #[error(transparent)]
    Devices(#[from] crate::device::DeviceManagerStopped),
    #[error(transparent)]
    Dra(#[from] crate::dra::DraManagerStopped),
}
