//! For the tests of readers of the DRA manager (the pod-resources views):
//! a handle whose prepared claims the test publishes, with no task.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::command::{Routes, Shared};
use super::config::DraManagerConfig;
use super::handle::DraHandle;
use super::metrics::DraMetrics;
use super::snapshot::DraSnapshot;
use crate::common::owner::Mailbox;
use crate::dra::prepare::claim_book::ClaimBook;
pub(crate) use crate::dra::prepare::records::PreparedClaims;
use crate::dra::prepare::records::RecordedClaim;
use crate::published::{Publisher, Store};

/// A handle reading `prepared`; its commands go nowhere, and its claim
/// book is never loaded.
pub(crate) fn handle(prepared: Store<PreparedClaims>) -> DraHandle {
    let (commands, _) = Mailbox::new();
    DraHandle {
        commands,
        shared: Arc::new(Shared {
            config: DraManagerConfig::default(),
            events: broadcast::channel(1).0,
            routes: Publisher::new(Routes::new()).1,
            prepared,
            claims: Arc::new(ClaimBook::default()),
            store: Publisher::new(DraSnapshot::default()).1,
            metrics: DraMetrics::default(),
        }),
    }
}

/// The claims as the manager publishes them once it read a checkpoint of
/// `claims`, then changed them `changes` times.
pub(crate) fn loaded(claims: Vec<RecordedClaim>, changes: u64) -> PreparedClaims {
    let mut prepared = PreparedClaims::restore(claims).loaded();
    for _ in 0..changes {
        prepared.changed();
    }
    prepared
}
