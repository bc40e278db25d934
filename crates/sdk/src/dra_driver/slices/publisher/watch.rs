//! One watch of the driver's slices: its events, whether it has listed,
//! and what its listing has gathered so far.

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::runtime::{WatchStreamExt, watcher};

use super::super::known::Scope;
use crate::dra_driver::resource_api::ResourceApi;

/// A watch's events.
pub(super) type WatchEvent = Result<watcher::Event<ResourceSlice>, watcher::Error>;

/// One watch of the driver's slices, selected by `spec.nodeName`.
pub(super) struct Watch {
    /// Which slices it sees.
    pub(super) scope: Scope,
    events: BoxStream<'static, WatchEvent>,
    /// Whether it has listed at least once.
    pub(super) listed: bool,
    /// The slices of a listing in progress.
    pub(super) listing: Vec<ResourceSlice>,
}

impl Watch {
    /// Starts watching the slices `selector` (a field selector) selects.
    pub(super) fn new(api: &ResourceApi<ResourceSlice>, scope: Scope, selector: &str) -> Self {
        let events = api
            .watch(watcher::Config::default().fields(selector))
            .default_backoff()
            .boxed();
        Self {
            scope,
            events,
            listed: false,
            listing: Vec::new(),
        }
    }
}

/// The next event of `watch`, or never when there is no watch.
pub(super) async fn next_event(watch: &mut Option<Watch>) -> Option<WatchEvent> {
    match watch {
        Some(watch) => watch.events.next().await,
        None => std::future::pending().await,
    }
}

/// Whether `watch` is there and has listed.
pub(super) fn has_listed(watch: Option<&Watch>) -> bool {
    watch.is_some_and(|w| w.listed)
}
