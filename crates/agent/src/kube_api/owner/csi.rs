//! How the owner follows the CSINode: watched when the identity may watch
//! it, else read when the Node changes and every `csinode_recheck` of the
//! configuration (a failed read again with backoff); and
//! the check that marks the CSI write when the Node and CSINode do not show
//! what was written.

use std::collections::BTreeSet;

use k8s_openapi::api::storage::v1::CSINode;
use tokio::time::Instant;

use nodeplugins_api::backoff::Backoff;

use super::super::csi_node;
use super::super::error::KubeApiError;
use super::super::observed::{self, CsiNodeFollow, Seen};
use super::{Owner, State};
use std::sync::Arc;

/// Up to this fraction of the recheck period is added at random to each
/// CSINode read, so that the nodes of a cluster do not read in step.
const RECHECK_JITTER: f64 = 0.2;

impl Owner {
    pub(super) fn on_csinode(
        &self,
        state: &mut State,
        follow: &mut CsiNodeFollow,
        seen: Seen<CSINode>,
    ) {
        match seen {
            Seen::Now(csinode) => {
                state.csinode = csinode;
                state.csinode_seen = true;
                self.check_csi(state);
            }
            Seen::Failed(e) if observed::refused(&e) => {
                tracing::info!(
                    "the CSINode may not be watched with these credentials; reading it when the Node changes and every {:?}",
                    self.config.csinode_recheck
                );
                *follow = CsiNodeFollow::Reading {
                    next: Some(Instant::now()),
                };
            }
            Seen::Failed(e) => {
                tracing::debug!(error = %e, "watching the CSINode failed; watching again")
            }
        }
    }

    /// A read of the CSINode finished: the next one in
    /// `csinode_recheck` (up to a fifth longer at random, so
    /// that the nodes of a cluster do not read in step), or after a failure
    /// with the usual backoff; sooner if the Node changes meanwhile.
    pub(super) fn csinode_read_done(
        &self,
        state: &mut State,
        follow: &mut CsiNodeFollow,
        read: Result<(), Arc<KubeApiError>>,
        now: Instant,
    ) {
        let CsiNodeFollow::Reading { next } = follow else {
            return;
        };
        if next.is_some() {
            // Already due again: the Node changed while it was read.
            return;
        }
        let delay = if let Err(error) = read {
            state.csinode_read.record(error);
            self.policy.backoff.delay(state.csinode_read.failures())
        } else {
            state.csinode_read.succeeded();
            let every = self.config.csinode_recheck;
            Backoff::new(every, every)
                .with_jitter(RECHECK_JITTER)
                .delay(1)
        };
        *next = Some(now + delay);
    }

    /// Marks the CSI write when the Node and CSINode do not show what was
    /// written.
    pub(super) fn check_csi(&self, state: &mut State) {
        let Some(node) = &state.node else {
            return;
        };
        let shown = match &state.csi_node.written {
            Some(written) => {
                let removed: BTreeSet<String> = state
                    .published_drivers
                    .iter()
                    .filter(|d| !written.contains_key(*d))
                    .cloned()
                    .collect();
                csi_node::shows(node, state.csinode.as_deref(), written, &removed)
            }
            None => false,
        };
        if !shown {
            state.csi_node.drifted(Instant::now());
        }
    }
}
