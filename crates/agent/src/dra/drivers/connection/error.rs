//! Why a connection to a DRA plugin instance could not be made, and why
//! one ended: kept typed until they are shown (status, events, the
//! `UNAVAILABLE` a call gets).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nodeplugins_api::transport::frame::MAX_PAYLOAD;
use nodeplugins_api::transport::root_cause;

/// Why a connection attempt (light, full, or an upgrade) failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The socket could not be dialed.
    #[error("dial {}: {source}", .path.display())]
    Dial {
        path: Arc<Path>,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP/2 handshake failed.
    #[error("HTTP/2 handshake with {}: {source}", .path.display())]
    Handshake {
        path: Arc<Path>,
        #[source]
        source: ConnectionEnd,
    },
    /// The plugin's first frame was not its SETTINGS.
    #[error(
        "HTTP/2 handshake with {}: the server's first frame is of type {kind:#x}, not SETTINGS",
        .path.display()
    )]
    NotSettings { path: Arc<Path>, kind: u8 },
    /// The plugin closed the connection before it said anything.
    #[error("{} closed the connection before answering", .path.display())]
    ClosedBeforeAnswer { path: Arc<Path> },
    /// The connection failed before the plugin said anything.
    #[error("{}: {source}", .path.display())]
    Failed {
        path: Arc<Path>,
        #[source]
        source: ConnectionEnd,
    },
    /// The attempt took longer than the dial timeout.
    #[error("no connection within {0:?}")]
    Timeout(Duration),
}

/// Why an established connection ended (or a handshake broke off).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionEnd {
    /// The plugin closed it.
    #[error("the plugin closed the connection")]
    Closed,
    /// The plugin sent GOAWAY.
    #[error("the plugin is closing the connection (GOAWAY, error code {0})")]
    GoAway(u32),
    /// Reading or writing the socket failed.
    #[error("{0}")]
    Io(#[source] std::io::Error),
    /// The HTTP/2 client saw the connection fail.
    #[error("{}", root_cause(.0))]
    Http2(#[source] hyper::Error),
    /// A frame larger than allowed.
    #[error("the plugin sent a frame of {0} bytes, more than the {MAX_PAYLOAD} allowed")]
    FrameTooLarge(usize),
    /// A PING of the wrong length.
    #[error("a PING frame of {0} bytes, not 8")]
    BadPing(usize),
}

/// The last thing that went wrong with an instance's connection.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum LinkError {
    /// An attempt failed.
    #[error(transparent)]
    Attempt(Arc<ConnectError>),
    /// The connection ended.
    #[error(transparent)]
    Lost(Arc<ConnectionEnd>),
}

/// A failed connection is retried on the monitor's backoff; the same
/// failure again (said once, not at every retry) is the one with the same
/// text.
impl nodeplugins_api::retry::Classify for ConnectError {}
