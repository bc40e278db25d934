//! Errors of the Unix-socket transport.

use std::path::PathBuf;

/// What went wrong binding, serving or dialing a Unix socket.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The path does not fit in `sockaddr_un.sun_path`.
    #[error("socket path {path:?} is {len} bytes long; the limit is {max} bytes")]
    PathTooLong {
        /// The offending path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The limit, [`super::MAX_SOCKET_PATH_LEN`].
        max: usize,
    },
    /// Something that is not a socket sits where the socket should go; it is left alone.
    #[error("{path:?} exists and is not a socket; refusing to replace it")]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// Another server answers on the path.
    #[error("socket {path:?} is in use by a live server")]
    InUse {
        /// The path.
        path: PathBuf,
    },
    /// Inspecting or removing an existing socket file failed.
    #[error("cannot clear stale socket {path:?}: {source}")]
    StaleSocket {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `bind(2)` failed.
    #[error("cannot listen on {path:?}: {source}")]
    Bind {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Setting the socket's permissions failed.
    #[error("cannot set mode {mode:o} on {path:?}: {source}")]
    Permissions {
        /// The path.
        path: PathBuf,
        /// The requested mode.
        mode: u32,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The task serving the socket panicked (a bug) or was aborted, rather
    /// than returning.
    #[error("the task serving {path:?} ended without returning: {source}")]
    Task {
        /// The socket it served.
        path: PathBuf,
        /// How it ended: its panic's message, or its cancellation.
        #[source]
        source: tokio::task::JoinError,
    },
    /// The gRPC server failed.
    #[error("gRPC server on {path:?} failed: {source}")]
    Serve {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: tonic::transport::Error,
    },
    /// Connecting to a socket failed.
    #[error("dial {path:?} failed: {}", root_cause(source))]
    Dial {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: tonic::transport::Error,
    },
    /// Connecting (or starting HTTP/2 on the connection) failed.
    #[error("dial {path:?} failed: {source}")]
    Connect {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Connecting did not finish in time.
    #[error("dial {path:?} timed out after {timeout:?}")]
    DialTimeout {
        /// The path.
        path: PathBuf,
        /// The time allowed.
        timeout: std::time::Duration,
    },
}

/// The innermost cause of an error, which for transport errors is the one
/// that says what happened ("Connection refused (os error 111)").
pub fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut current = error;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}
