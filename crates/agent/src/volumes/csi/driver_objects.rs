//! The cluster's CSIDriver objects, as the kubelet's CSI plugin reads
//! them from its informer: one watch of them all, started with the first
//! CSI volume, and what each asks of the node ([`DriverPolicy`]), with the
//! API's defaults. A driver with no CSIDriver object is taken as the
//! kubelet takes it: attach required, no pod info, the default fsGroup
//! policy, persistent volumes only.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::storage::v1::CSIDriver;
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::kube_api::{Connection, reflect};

/// How long a read waits for the first listing.
const FIRST_LISTING: Duration = Duration::from_secs(10);

/// The fsGroup policy of a driver that names none.
const DEFAULT_FS_GROUP_POLICY: &str = "ReadWriteOnceWithFSType";

/// The CSIDriver objects have not been listed yet.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the CSIDriver objects have not been listed yet")]
pub(crate) struct NotListed;

/// The cluster's CSIDriver objects, watched from the first read on.
pub(crate) struct DriverObjects {
    connection: watch::Receiver<Connection>,
    store: Mutex<Option<Store<CSIDriver>>>,
    stop: CancellationToken,
}

impl Drop for DriverObjects {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl DriverObjects {
    /// CSIDriver objects read through `connection`'s client.
    pub(crate) fn new(connection: watch::Receiver<Connection>) -> Self {
        Self {
            connection,
            store: Mutex::new(None),
            stop: CancellationToken::new(),
        }
    }

    /// What driver `name` asks of the node, once the objects are listed.
    pub(crate) async fn policy(&self, name: &str) -> Result<DriverPolicy, NotListed> {
        let store = self.store();
        match tokio::time::timeout(FIRST_LISTING, store.wait_until_ready()).await {
            Ok(Ok(())) => Ok(DriverPolicy::of(
                store.get(&ObjectRef::new(name)).as_deref(),
            )),
            _ => Err(NotListed),
        }
    }

    fn store(&self) -> Store<CSIDriver> {
        let mut kept = self
            .store
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(store) = kept.as_ref() {
            return store.clone();
        }
        let (store, writer) = reflector::store();
        tokio::spawn(reflect(
            "the cluster's CSIDriver objects",
            self.connection.clone(),
            Api::<CSIDriver>::all,
            watcher::Config::default(),
            writer,
            self.stop.clone(),
        ));
        *kept = Some(store.clone());
        store
    }
}

/// One service-account token a driver asks for (`tokenRequests`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenRequest {
    /// The token's audience (empty: the API server's).
    pub(crate) audience: String,
    /// Its lifetime, when asked for.
    pub(crate) expiration_seconds: Option<i64>,
}

/// What a CSI driver asks of the node, from its CSIDriver object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DriverPolicy {
    /// Whether it has a CSIDriver object at all.
    pub(crate) exists: bool,
    /// Its volumes are attached first (`attachRequired`, default true).
    pub(crate) attach_required: bool,
    /// The pod's name, namespace, UID and service account go into the
    /// volume context (`podInfoOnMount`).
    pub(crate) pod_info_on_mount: bool,
    /// `None`, `File` or `ReadWriteOnceWithFSType`.
    pub(crate) fs_group_policy: String,
    /// Inline volumes are allowed (`volumeLifecycleModes` has `Ephemeral`).
    pub(crate) ephemeral: bool,
    /// Persistent volumes are allowed (`volumeLifecycleModes` has
    /// `Persistent`, its default).
    pub(crate) persistent: bool,
    /// Volumes are published again at every pod resync (`requiresRepublish`).
    pub(crate) requires_republish: bool,
    /// The tokens handed to each publish.
    pub(crate) token_requests: Vec<TokenRequest>,
    /// The tokens go into the secrets, not the volume context
    /// (`serviceAccountTokenInSecrets`).
    pub(crate) tokens_in_secrets: bool,
}

impl DriverPolicy {
    /// The policy of `object` (none: the kubelet's for a driver without one).
    pub(crate) fn of(object: Option<&CSIDriver>) -> Self {
        let Some(object) = object else {
            return Self {
                exists: false,
                attach_required: true,
                pod_info_on_mount: false,
                fs_group_policy: DEFAULT_FS_GROUP_POLICY.into(),
                ephemeral: false,
                persistent: true,
                requires_republish: false,
                token_requests: Vec::new(),
                tokens_in_secrets: false,
            };
        };
        let spec = &object.spec;
        let modes = spec.volume_lifecycle_modes.as_deref();
        Self {
            exists: true,
            attach_required: spec.attach_required.unwrap_or(true),
            pod_info_on_mount: spec.pod_info_on_mount.unwrap_or(false),
            fs_group_policy: spec
                .fs_group_policy
                .clone()
                .unwrap_or_else(|| DEFAULT_FS_GROUP_POLICY.into()),
            ephemeral: modes.is_some_and(|m| m.iter().any(|m| m == "Ephemeral")),
            persistent: modes.is_none_or(|m| m.is_empty() || m.iter().any(|m| m == "Persistent")),
            requires_republish: spec.requires_republish.unwrap_or(false),
            token_requests: spec
                .token_requests
                .iter()
                .flatten()
                .map(|t| TokenRequest {
                    audience: t.audience.clone(),
                    expiration_seconds: t.expiration_seconds,
                })
                .collect(),
            tokens_in_secrets: tokens_in_secrets(object),
        }
    }
}

/// `serviceAccountTokenInSecrets`, on the Kubernetes versions that have it.
#[allow(unreachable_code, unused_variables)]
fn tokens_in_secrets(object: &CSIDriver) -> bool {
    k8s_openapi::k8s_if_ge_1_35! {
        return object.spec.service_account_token_in_secrets.unwrap_or(false);
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_driver_without_an_object_needs_attaching_and_serves_persistent_volumes_only() {
        let policy = DriverPolicy::of(None);
        assert!(policy.attach_required && policy.persistent && !policy.ephemeral);
        assert_eq!(policy.fs_group_policy, "ReadWriteOnceWithFSType");
    }

    #[test]
    fn an_objects_fields_and_defaults() {
        let object: CSIDriver = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d"},
            "spec": {
                "attachRequired": false,
                "podInfoOnMount": true,
                "volumeLifecycleModes": ["Ephemeral"],
                "tokenRequests": [{"audience": "vault", "expirationSeconds": 600}],
            },
        }))
        .unwrap();
        let policy = DriverPolicy::of(Some(&object));
        assert!(policy.exists && !policy.attach_required && policy.pod_info_on_mount);
        assert!(policy.ephemeral && !policy.persistent);
        assert_eq!(
            policy.token_requests,
            [TokenRequest {
                audience: "vault".into(),
                expiration_seconds: Some(600)
            }]
        );
        let bare: CSIDriver =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "d"}, "spec": {}}))
                .unwrap();
        let policy = DriverPolicy::of(Some(&bare));
        assert!(policy.attach_required && policy.persistent && !policy.ephemeral);
    }
}
