//! Where one instance's connection stands, as the manager publishes it.

use std::sync::Arc;
use std::time::SystemTime;

use hyper::client::conn::http2::SendRequest;

use super::error::{ConnectError, ConnectionEnd, LinkError};

/// The request body the connection carries.
pub(crate) type Body = tonic::body::Body;

/// What the monitor reports.
pub(crate) enum LinkEvent {
    /// A connection is up: light (no sender) or full (requests go through
    /// the sender).
    Connected(Option<SendRequest<Body>>),
    /// The light connection was replaced by a full one.
    Upgraded(SendRequest<Body>),
    /// A connection attempt (or an upgrade) failed; `full` if it was for a
    /// full connection.
    AttemptFailed {
        error: Arc<ConnectError>,
        full: bool,
    },
    /// The connection ended.
    Lost(Arc<ConnectionEnd>),
}

/// Where a connection stands.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    /// Whether a connection (light or full) is up.
    pub(crate) connected: bool,
    /// Present while a full connection is up.
    pub(crate) sender: Option<SendRequest<Body>>,
    /// Why the last attempt failed or the last connection ended.
    pub(crate) last_error: Option<LinkError>,
    /// Finished connection and upgrade attempts, successful or not.
    pub(crate) attempts: u64,
    /// Finished attempts at a full connection (which calls wait for).
    pub(crate) full_attempts: u64,
    /// Successful connections.
    pub(crate) connects: u64,
    /// When `connected` last changed.
    pub(crate) since: SystemTime,
}

impl Default for Link {
    fn default() -> Self {
        Self {
            connected: false,
            sender: None,
            last_error: None,
            attempts: 0,
            full_attempts: 0,
            connects: 0,
            since: SystemTime::now(),
        }
    }
}

impl Link {
    /// Whether a connection is up.
    pub(crate) fn connected(&self) -> bool {
        self.connected
    }

    /// Applies one report; says whether connectedness changed.
    pub(crate) fn apply(&mut self, event: LinkEvent) -> bool {
        match event {
            LinkEvent::Connected(sender) => {
                self.full_attempts += u64::from(sender.is_some());
                self.connected = true;
                self.sender = sender;
                self.last_error = None;
                self.attempts += 1;
                self.connects += 1;
                self.since = SystemTime::now();
                true
            }
            LinkEvent::Upgraded(sender) => {
                self.full_attempts += 1;
                self.sender = Some(sender);
                self.last_error = None;
                self.attempts += 1;
                false
            }
            LinkEvent::AttemptFailed { error, full } => {
                self.full_attempts += u64::from(full);
                self.attempts += 1;
                self.last_error = Some(LinkError::Attempt(error));
                false
            }
            LinkEvent::Lost(why) => {
                self.connected = false;
                self.sender = None;
                self.last_error = Some(LinkError::Lost(why));
                self.since = SystemTime::now();
                true
            }
        }
    }

    /// The instance is gone: no new call may use it.
    pub(crate) fn close(&mut self) {
        self.connected = false;
        self.sender = None;
    }
}
