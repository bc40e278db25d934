//! A monitored connection to one DRA plugin instance's service socket.
//!
//! The connection is ours rather than a lazily reconnecting channel's: a task
//! (the [`monitor`]) dials the socket, performs the HTTP/2 handshake and then
//! drives the connection, so the moment the plugin goes away (the process
//! exits, the server shuts down) it sees it and reports it, not at the next
//! call. It then reconnects at once and, while that fails, with backoff; a
//! [`socket_watch`] on the socket's directory cuts the wait short when the
//! socket is created again, so a restarted plugin is reconnected within
//! milliseconds.
//!
//! The monitor reports every change as a [`LinkEvent`] to the DRA manager's
//! task, which owns the instance's [`Link`] and publishes it; calls and the
//! health stream share the one connection through a [`Channel`] reading it.

mod channel;
mod handshake;
mod link;
mod monitor;
mod socket_watch;

pub use monitor::{RECONNECT_INITIAL, RECONNECT_MAX};

pub(crate) use channel::Channel;
pub(crate) use link::{Link, LinkEvent};
pub(crate) use monitor::{Monitor, MonitorConfig};
