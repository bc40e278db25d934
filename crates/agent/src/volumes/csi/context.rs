//! What the CSI plugin's steps share: the node's state directory and
//! name, the registered drivers, the API client, and which volumes are
//! staged and published (kept in memory, found again from disk after a
//! restart by the kubelet's marks: a published volume's `vol_data.json`
//! beside a mount, a staged one's beside its staging directory).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio::sync::watch;

use crate::csi::CsiDriverStore;
use crate::kube_api::Connection;
use crate::volumes::csi::operations::CsiOperations;
use crate::volumes::csi::source::SecretRef;
use crate::volumes::csi::stats::StatsCollector;
use crate::volumes::csi::vol_data;

/// What the CSI plugin's steps share.
pub(crate) struct CsiContext {
    /// The node's state directory (the kubelet's root).
    pub(crate) root: PathBuf,
    pub(crate) node_name: String,
    drivers: CsiDriverStore,
    connection: watch::Receiver<Connection>,
    state: Mutex<State>,
    /// The claimed volumes whose usage is read.
    pub(crate) stats: std::sync::Arc<StatsCollector>,
    /// Where every driver call is measured.
    pub(crate) operations: CsiOperations,
}

#[derive(Default)]
struct State {
    /// Target paths published.
    published: HashSet<PathBuf>,
    /// Staging paths staged.
    staged: HashSet<PathBuf>,
    /// Staging paths whose stage call may still be at work: staged again
    /// before use, though their marks are on disk.
    uncertain: HashSet<PathBuf>,
}

impl CsiContext {
    /// The context of node `node_name` whose state is under `root`, calling
    /// `drivers` and reading the API through `connection`.
    pub(crate) fn new(
        root: PathBuf,
        node_name: String,
        drivers: CsiDriverStore,
        connection: watch::Receiver<Connection>,
        stats: std::sync::Arc<StatsCollector>,
        operations: CsiOperations,
    ) -> Self {
        Self {
            root,
            node_name,
            drivers,
            connection,
            state: Mutex::new(State::default()),
            stats,
            operations,
        }
    }

    /// The API client of the moment.
    pub(crate) fn client(&self) -> kube::Client {
        self.connection.borrow().client.clone()
    }

    /// The data of secret `secret`, for a call of `what` (`NodeStageSecretRef`).
    pub(crate) async fn secret(
        &self,
        what: &str,
        secret: &SecretRef,
    ) -> Result<BTreeMap<String, String>, String> {
        let secrets: Api<Secret> = Api::namespaced(self.client(), &secret.namespace);
        let found = secrets.get(&secret.name).await.map_err(|e| {
            format!(
                "fetching {what} {}/{} failed: {e}",
                secret.namespace, secret.name
            )
        })?;
        Ok(found
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect())
    }

    /// The drivers registered on the node.
    pub(crate) fn drivers(&self) -> &CsiDriverStore {
        &self.drivers
    }

    /// Whether `target` is published (in memory, or found so on disk: its
    /// `vol_data.json` beside a mount), remembered if found.
    pub(crate) fn is_published(&self, target: &Path) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.published.contains(target) {
            return true;
        }
        let found = target
            .parent()
            .is_some_and(|dir| dir.join(vol_data::FILE).is_file())
            && crate::volumes::kinds::tmpfs::is_mount_point(target);
        if found {
            state.published.insert(target.to_path_buf());
        }
        found
    }

    /// Records whether `target` is published.
    pub(crate) fn set_published(&self, target: &Path, published: bool) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if published {
            state.published.insert(target.to_path_buf());
        } else {
            state.published.remove(target);
        }
    }

    /// Whether `staging` is staged (in memory, or found so on disk: its
    /// `vol_data.json` beside it, unless its stage call may still be at
    /// work), remembered if found.
    pub(crate) fn is_staged(&self, staging: &Path) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.staged.contains(staging) {
            return true;
        }
        if state.uncertain.contains(staging) {
            return false;
        }
        let found = staging
            .parent()
            .is_some_and(|dir| dir.join(vol_data::FILE).is_file());
        if found {
            state.staged.insert(staging.to_path_buf());
        }
        found
    }

    /// Whether `staging`'s last stage call may still be at work.
    pub(crate) fn stage_uncertain(&self, staging: &Path) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.uncertain.contains(staging)
    }

    /// Records `staging` staged, not staged, or possibly staged.
    pub(crate) fn set_staged(&self, staging: &Path, staged: Staged) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.staged.remove(staging);
        state.uncertain.remove(staging);
        match staged {
            Staged::Yes => {
                state.staged.insert(staging.to_path_buf());
            }
            Staged::Uncertain => {
                state.uncertain.insert(staging.to_path_buf());
            }
            Staged::No => {}
        }
    }
}

/// A staging path's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Staged {
    Yes,
    No,
    /// The stage call may still be at work.
    Uncertain,
}
