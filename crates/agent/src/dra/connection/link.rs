//! Where one instance's connection stands, as the manager publishes it.

use std::time::SystemTime;

use hyper::client::conn::http2::SendRequest;

/// The request body the connection carries.
pub(crate) type Body = tonic::body::Body;

/// What the monitor reports.
pub(crate) enum LinkEvent {
    /// A connection is up; requests go through `sender`.
    Connected(SendRequest<Body>),
    /// A connection attempt failed.
    AttemptFailed(String),
    /// The connection ended.
    Lost(String),
}

/// Where a connection stands.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    /// Present while connected.
    pub(crate) sender: Option<SendRequest<Body>>,
    /// Why the last attempt failed or the last connection ended.
    pub(crate) last_error: Option<String>,
    /// Finished connection attempts, successful or not.
    pub(crate) attempts: u64,
    /// Successful connections.
    pub(crate) connects: u64,
    /// When `connected` last changed.
    pub(crate) since: SystemTime,
}

impl Default for Link {
    fn default() -> Self {
        Self {
            sender: None,
            last_error: None,
            attempts: 0,
            connects: 0,
            since: SystemTime::now(),
        }
    }
}

impl Link {
    /// Whether a connection is up.
    pub(crate) fn connected(&self) -> bool {
        self.sender.is_some()
    }

    /// Applies one report; says whether connectedness changed.
    pub(crate) fn apply(&mut self, event: LinkEvent) -> bool {
        match event {
            LinkEvent::Connected(sender) => {
                self.sender = Some(sender);
                self.last_error = None;
                self.attempts += 1;
                self.connects += 1;
                self.since = SystemTime::now();
                true
            }
            LinkEvent::AttemptFailed(error) => {
                self.attempts += 1;
                self.last_error = Some(error);
                false
            }
            LinkEvent::Lost(why) => {
                self.sender = None;
                self.last_error = Some(why);
                self.since = SystemTime::now();
                true
            }
        }
    }
}
