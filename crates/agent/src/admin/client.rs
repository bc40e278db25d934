//! Reading the admin socket, for the CLI and tests.

use std::path::{Path, PathBuf};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedReadHalf;

use super::protocol::{
    AdminErrorReply, AdminRequest, AgentStatus, AllocateReply, DraClaimsReply, DraPreparePodReply,
    DraPrepareReply, DraUnpreparePodReply, DraUnprepareReply, FollowingMarker, PodsReply,
    ReleaseReply, socket_path,
};
use crate::device::AllocationRequest;
use crate::dra::{ClaimPod, ClaimRef};
use crate::event::AgentEvent;

/// Why the agent could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum AdminClientError {
    /// No agent listens on the socket.
    #[error(
        "cannot reach the agent at {path:?} (is `nodeplugins run` running with this --root-dir?): {source}"
    )]
    Connect {
        /// The admin socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The connection failed mid-way.
    #[error("talking to the agent at {path:?}: {source}")]
    Io {
        /// The admin socket.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The agent answered with an error.
    #[error("the agent answered: {0}")]
    Agent(String),
    /// The request could not be encoded.
    #[error("cannot encode the request: {0}")]
    Encode(#[source] serde_json::Error),
    /// The answer was not understood.
    #[error("unexpected answer from the agent: {0}")]
    Decode(#[source] serde_json::Error),
    /// The agent closed the connection before it answered.
    #[error("the agent closed the connection without an answer")]
    NoAnswer,
    /// The agent closed an events stream before saying it follows.
    #[error("the agent closed the events stream")]
    StreamClosed,
}

async fn request(
    root_dir: &Path,
    request: AdminRequest,
) -> Result<Lines<BufReader<OwnedReadHalf>>, AdminClientError> {
    let path = socket_path(root_dir);
    let stream = UnixStream::connect(&path)
        .await
        .map_err(|source| AdminClientError::Connect {
            path: path.clone(),
            source,
        })?;
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_vec(&request).map_err(AdminClientError::Encode)?;
    line.push(b'\n');
    write
        .write_all(&line)
        .await
        .map_err(|source| AdminClientError::Io { path, source })?;
    Ok(BufReader::new(read).lines())
}

fn parse<T: serde::de::DeserializeOwned>(line: &str) -> Result<T, AdminClientError> {
    match serde_json::from_str::<T>(line) {
        Ok(value) => Ok(value),
        Err(e) => match serde_json::from_str::<AdminErrorReply>(line) {
            Ok(reply) => Err(AdminClientError::Agent(reply.error)),
            Err(_) => Err(AdminClientError::Decode(e)),
        },
    }
}

/// Asks the agent using `root_dir` for its status.
pub async fn status(root_dir: &Path) -> Result<AgentStatus, AdminClientError> {
    one_reply(root_dir, AdminRequest::Status).await
}

async fn one_reply<T: serde::de::DeserializeOwned>(
    root_dir: &Path,
    req: AdminRequest,
) -> Result<T, AdminClientError> {
    let path = socket_path(root_dir);
    let mut lines = request(root_dir, req).await?;
    match lines.next_line().await {
        Ok(Some(line)) => parse(&line),
        Ok(None) => Err(AdminClientError::NoAnswer),
        Err(source) => Err(AdminClientError::Io { path, source }),
    }
}

/// Asks the agent to allocate devices to a container (all or nothing).
pub async fn allocate(
    root_dir: &Path,
    request: &AllocationRequest,
) -> Result<AllocateReply, AdminClientError> {
    one_reply(root_dir, AdminRequest::Allocate(request.clone())).await
}

/// Asks the agent to free every device `pod` holds.
pub async fn release(root_dir: &Path, pod: &str) -> Result<ReleaseReply, AdminClientError> {
    one_reply(root_dir, AdminRequest::Release { pod: pod.into() }).await
}

/// Asks the agent to prepare `claims` with DRA driver `driver`, for `pod`
/// if given.
pub async fn dra_prepare(
    root_dir: &Path,
    driver: &str,
    claims: Vec<ClaimRef>,
    pod: Option<ClaimPod>,
) -> Result<DraPrepareReply, AdminClientError> {
    let req = AdminRequest::DraPrepare {
        driver: driver.into(),
        claims,
        pod,
    };
    one_reply(root_dir, req).await
}

/// Asks the agent to unprepare `claims` with DRA driver `driver`, or without
/// one, each with the driver that prepared it.
pub async fn dra_unprepare(
    root_dir: &Path,
    driver: Option<&str>,
    claims: Vec<ClaimRef>,
) -> Result<DraUnprepareReply, AdminClientError> {
    let req = AdminRequest::DraUnprepare {
        driver: driver.map(Into::into),
        claims,
    };
    one_reply(root_dir, req).await
}

/// Asks the agent to prepare pod `namespace/name`'s claims, read from the
/// API as the kubelet reads them.
pub async fn dra_prepare_pod(
    root_dir: &Path,
    namespace: &str,
    name: &str,
) -> Result<DraPreparePodReply, AdminClientError> {
    let req = AdminRequest::DraPreparePod {
        namespace: namespace.into(),
        name: name.into(),
    };
    one_reply(root_dir, req).await
}

/// Asks the agent to unprepare what pod `namespace/name` uses.
pub async fn dra_unprepare_pod(
    root_dir: &Path,
    namespace: &str,
    name: &str,
) -> Result<DraUnpreparePodReply, AdminClientError> {
    let req = AdminRequest::DraUnpreparePod {
        namespace: namespace.into(),
        name: name.into(),
    };
    one_reply(root_dir, req).await
}

/// The pods bound to the node as the agent serves them: all of them, or
/// those of `namespace` (and `name`) only.
pub async fn pods(
    root_dir: &Path,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<PodsReply, AdminClientError> {
    let req = AdminRequest::Pods {
        namespace: namespace.map(Into::into),
        name: name.map(Into::into),
    };
    one_reply(root_dir, req).await
}

/// The agent's prepared DRA claims.
pub async fn dra_claims(root_dir: &Path) -> Result<DraClaimsReply, AdminClientError> {
    one_reply(root_dir, AdminRequest::DraClaims).await
}

/// Follows the agent's events from now on: when this returns, the agent is
/// subscribed, so nothing that happens afterwards is missed.
pub async fn events(root_dir: &Path) -> Result<EventStream, AdminClientError> {
    events_with(root_dir, false, true).await
}

/// The agent's events: its recent history first (with `history`), then new
/// events as they happen (with `follow`); the stream ends when the agent
/// has sent what was asked or goes away.
pub async fn events_with(
    root_dir: &Path,
    history: bool,
    follow: bool,
) -> Result<EventStream, AdminClientError> {
    let lines = request(root_dir, AdminRequest::Events { history, follow }).await?;
    let mut stream = EventStream {
        lines,
        path: socket_path(root_dir),
    };
    if follow && !history {
        // The first line says the agent follows: from here on nothing is missed.
        match stream.lines.next_line().await {
            Ok(Some(line)) => {
                parse::<FollowingMarker>(&line)?;
            }
            Ok(None) => {
                return Err(AdminClientError::StreamClosed);
            }
            Err(source) => {
                return Err(AdminClientError::Io {
                    path: stream.path,
                    source,
                });
            }
        }
    }
    Ok(stream)
}

/// Plugin events read from the admin socket.
pub struct EventStream {
    lines: Lines<BufReader<OwnedReadHalf>>,
    path: PathBuf,
}

impl EventStream {
    /// The next event; `None` when the agent closes the stream.
    pub async fn next(&mut self) -> Result<Option<AgentEvent>, AdminClientError> {
        loop {
            match self.lines.next_line().await {
                Ok(Some(line)) => {
                    if serde_json::from_str::<FollowingMarker>(&line).is_ok() {
                        continue;
                    }
                    return parse(&line).map(Some);
                }
                Ok(None) => return Ok(None),
                Err(source) => {
                    return Err(AdminClientError::Io {
                        path: self.path.clone(),
                        source,
                    });
                }
            }
        }
    }
}
