//! Noticing a plugin's service socket being created again.

use std::path::Path;

use futures::StreamExt;
use inotify::{Inotify, WatchMask};

/// An inotify watch on the socket's directory. It only exists while the
/// instance is disconnected, so a connected instance costs no watch.
pub(crate) struct SocketWatch {
    events: inotify::EventStream<[u8; 1024]>,
    name: std::ffi::OsString,
}

impl SocketWatch {
    /// A watch for `endpoint`, if one can be set up.
    pub(crate) fn new(endpoint: &Path) -> Option<Self> {
        let dir = endpoint.parent()?;
        let name = endpoint.file_name()?.to_owned();
        let inotify = Inotify::init().ok()?;
        inotify
            .watches()
            .add(
                dir,
                WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::ATTRIB,
            )
            .ok()?;
        let events = inotify.into_event_stream([0u8; 1024]).ok()?;
        Some(Self { events, name })
    }

    /// Resolves when the socket's name is created; never, without a watch.
    pub(crate) async fn next(watch: &mut Option<Self>) {
        let Some(w) = watch else {
            return std::future::pending().await;
        };
        loop {
            match w.events.next().await {
                Some(Ok(event)) if event.name.as_deref() == Some(w.name.as_os_str()) => return,
                Some(Ok(_)) => {}
                // The watch broke: fall back to the backoff schedule alone.
                Some(Err(_)) | None => {
                    *watch = None;
                    return std::future::pending().await;
                }
            }
        }
    }

    /// Closes the watch. Closing an inotify descriptor waits for the kernel
    /// (milliseconds), so it is done off the runtime's threads.
    pub(crate) fn close(watch: Option<Self>) {
        if let Some(watch) = watch {
            tokio::task::spawn_blocking(move || drop(watch));
        }
    }
}
