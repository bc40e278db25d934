//! ClusterTrustBundles as the kubelet's trust-bundle manager reads them for
//! a projected volume's `clusterTrustBundle` source: one list and watch of
//! them all (`certificates.k8s.io/v1`, which the Node authorizer lets a
//! node read), started by the first volume that needs one and kept; a
//! bundle by name, or every bundle of a signer whose labels the source's
//! selector matches (none: no bundle; an empty one: all), their PEM
//! certificates made one set, shuffled (no reader may count on an order)
//! and written out again as PEM. The same bundles give the same file for
//! five minutes (the kubelet's cache), so that a resync does not shuffle a
//! volume's file again each time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use rand::seq::SliceRandom;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::common::pem::{pem, pem_blocks};
use crate::kube_api::Connection;
use crate::volumes::content::certificates_v1::ClusterTrustBundle;
use crate::volumes::content::objects::spawn_watch;

/// How long a read waits for the bundles' first listing.
const FIRST_LISTING: Duration = Duration::from_secs(1);
/// How long the same bundles give the same file.
const KEPT: Duration = Duration::from_secs(300);

/// Why a bundle's certificates could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TrustBundleError {
    /// The watch has not listed the bundles yet.
    #[error("ClusterTrustBundle informer has not yet synced")]
    NotSynced,
    /// The bundle named is not there.
    #[error(
        "while getting ClusterTrustBundle: clustertrustbundles.certificates.k8s.io {0:?} not found"
    )]
    NotFound(String),
    /// No bundle of the signer matches.
    #[error("combination of signerName and labelSelector matched zero ClusterTrustBundles")]
    NoneMatched,
    /// The selector cannot be read.
    #[error("while parsing label selector: {0}")]
    Selector(String),
    /// The source names neither a bundle nor a signer.
    #[error("ClusterTrustBundle projection requires either name or signerName to be set")]
    Unnamed,
}

/// What a file was made from, and when.
struct Made {
    /// The certificates (DER) it holds.
    certificates: BTreeSet<Vec<u8>>,
    pem: Vec<u8>,
    at: Instant,
}

/// The cluster's trust bundles, shared by every pod's volumes.
pub(crate) struct TrustBundles {
    connection: watch::Receiver<Connection>,
    watch: Mutex<Option<(Store<ClusterTrustBundle>, CancellationToken)>>,
    made: Mutex<HashMap<String, Made>>,
}

impl TrustBundles {
    /// The bundles, read through `connection`'s client once first asked.
    pub(crate) fn new(connection: watch::Receiver<Connection>) -> Self {
        Self {
            connection,
            watch: Mutex::new(None),
            made: Mutex::new(HashMap::new()),
        }
    }

    /// The PEM certificates of bundle `name`, or of every bundle of signer
    /// `signer` whose labels `selector` matches; none (an empty file) when
    /// nothing is there and `optional`.
    pub(crate) async fn certificates(
        &self,
        name: Option<&str>,
        signer: Option<&str>,
        selector: Option<&LabelSelector>,
        optional: bool,
    ) -> Result<Vec<u8>, TrustBundleError> {
        let store = self.store();
        match tokio::time::timeout(FIRST_LISTING, store.wait_until_ready()).await {
            Ok(Ok(())) => {}
            _ => return Err(TrustBundleError::NotSynced),
        }
        let (key, bundles) = match (name, signer) {
            (Some(name), _) => match store.get(&ObjectRef::new(name)) {
                Some(bundle) => (format!("name:{name}"), vec![bundle]),
                None if optional => return Ok(Vec::new()),
                None => return Err(TrustBundleError::NotFound(name.to_string())),
            },
            (None, Some(signer)) => {
                let mut matched = Vec::new();
                for bundle in store.state() {
                    let labels = bundle.metadata.labels.clone().unwrap_or_default();
                    if bundle.spec.signer_name.as_deref() == Some(signer)
                        && selects(selector, &labels)?
                    {
                        matched.push(bundle);
                    }
                }
                if matched.is_empty() {
                    if optional {
                        return Ok(Vec::new());
                    }
                    return Err(TrustBundleError::NoneMatched);
                }
                let selector = serde_json::to_string(&selector).unwrap_or_default();
                (format!("signer:{signer}:{selector}"), matched)
            }
            (None, None) => return Err(TrustBundleError::Unnamed),
        };
        let certificates: BTreeSet<Vec<u8>> = bundles
            .iter()
            .flat_map(|b| pem_blocks(&b.spec.trust_bundle))
            .collect();
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if let Some(kept) = made.get(&key)
            && kept.certificates == certificates
            && now.duration_since(kept.at) < KEPT
        {
            return Ok(kept.pem.clone());
        }
        let mut order: Vec<&Vec<u8>> = certificates.iter().collect();
        order.shuffle(&mut rand::rng());
        let pem: Vec<u8> = order
            .into_iter()
            .flat_map(|der| pem("CERTIFICATE", der))
            .collect();
        made.insert(
            key,
            Made {
                certificates,
                pem: pem.clone(),
                at: now,
            },
        );
        Ok(pem)
    }

    /// The watch of every bundle, started now if it is not.
    fn store(&self) -> Store<ClusterTrustBundle> {
        let mut watch = self
            .watch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((store, _)) = watch.as_ref() {
            return store.clone();
        }
        let (store, writer) = reflector::store();
        let stop = CancellationToken::new();
        let api: Api<ClusterTrustBundle> = Api::all(self.connection.borrow().client.clone());
        let failed = |e: &watcher::Error| {
            tracing::warn!(error = %e, "watching the cluster's trust bundles failed; watching again with backoff");
        };
        spawn_watch(
            api,
            watcher::Config::default(),
            writer,
            stop.clone(),
            (|| {}, failed),
        );
        *watch = Some((store.clone(), stop));
        store
    }
}

impl Drop for TrustBundles {
    fn drop(&mut self) {
        if let Ok(watch) = self.watch.lock()
            && let Some((_, stop)) = watch.as_ref()
        {
            stop.cancel();
        }
    }
}

/// Whether `selector` matches `labels` (`LabelSelectorAsSelector`: none
/// matches nothing, an empty one everything).
fn selects(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Result<bool, TrustBundleError> {
    let Some(selector) = selector else {
        return Ok(false);
    };
    for (key, value) in selector.match_labels.iter().flatten() {
        if labels.get(key) != Some(value) {
            return Ok(false);
        }
    }
    for requirement in selector.match_expressions.iter().flatten() {
        let values = requirement.values.as_deref().unwrap_or_default();
        let has = labels.get(&requirement.key);
        let ok = match requirement.operator.as_str() {
            "In" => has.is_some_and(|v| values.contains(v)),
            "NotIn" => has.is_none_or(|v| !values.contains(v)),
            "Exists" => has.is_some(),
            "DoesNotExist" => has.is_none(),
            other => {
                return Err(TrustBundleError::Selector(format!(
                    "{other:?} is not a valid label selector operator"
                )));
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_selector_matches_as_the_apis_label_selectors() {
        let labels: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
        let selector =
            |json: serde_json::Value| -> LabelSelector { serde_json::from_value(json).unwrap() };
        assert!(!selects(None, &labels).unwrap(), "none matches nothing");
        assert!(selects(Some(&selector(serde_json::json!({}))), &labels).unwrap());
        assert!(
            selects(
                Some(&selector(
                    serde_json::json!({"matchLabels": {"env": "prod"}})
                )),
                &labels
            )
            .unwrap()
        );
        assert!(
            !selects(
                Some(&selector(serde_json::json!({"matchExpressions": [
                    {"key": "env", "operator": "NotIn", "values": ["prod"]}]}))),
                &labels
            )
            .unwrap()
        );
        assert!(
            selects(
                Some(&selector(serde_json::json!({"matchExpressions": [
                    {"key": "tier", "operator": "DoesNotExist"}]}))),
                &labels
            )
            .unwrap()
        );
    }
}
