//! A monitored connection to one DRA plugin instance's service socket.
//!
//! The connection is ours rather than a lazily reconnecting channel's: a task
//! (the [`monitor`]) dials the socket, performs the HTTP/2 handshake and then
//! drives the connection, so the moment the plugin goes away (the process
//! exits, the server shuts down) it sees it and reports it, not at the next
//! call. It then reconnects at once and, while that fails, with backoff; a
//! wait on the socket's directory
//! ([`crate::fs_watch`]) cuts the wait short when the
//! socket is created again, so a restarted plugin is reconnected within
//! milliseconds.
//!
//! Until the instance is first called, the connection is a light one (the
//! HTTP/2 handshake, then answering the server's pings: a socket and a few
//! hundred bytes); a call upgrades it to a full HTTP/2 client connection.
//! The first connection waits for the registration to ask for it (a
//! [`Demand`]), once the plugin was told it is registered.
//!
//! The monitor reports every change as a [`LinkEvent`] to the DRA manager's
//! task, which owns the instance's [`Link`] and publishes it; calls and the
//! health stream share the one connection through a [`Channel`] reading it.

mod channel;
mod demand;
mod error;
mod handshake;
mod light;
mod link;
mod monitor;

pub(in crate::dra) use monitor::{RECONNECT_INITIAL, RECONNECT_MAX};

pub(crate) use channel::Channel;
pub(crate) use demand::Demand;
pub(crate) use error::LinkError;
pub(crate) use link::{Link, LinkEvent};
pub(crate) use monitor::{Monitor, MonitorConfig};
