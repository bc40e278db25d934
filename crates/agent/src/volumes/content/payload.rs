//! What a configMap, secret, downwardAPI or projected volume holds: its
//! files, their paths and exact modes, as the kubelet's `MakePayload` and
//! the projected volume's `collectData` make them from the objects, the
//! pod and the service-account token.
//!
//! - `defaultMode` is 0644 unless given; an item's `mode` wins.
//! - With no `items`, every key is a file; with `items`, only those, and a
//!   key missing is an error unless the source is `optional`.
//! - An object missing is an error unless `optional` (then nothing).
//! - The projected token's file is 0600 when the pod has an fsUser or
//!   fsGroup, and is owned by the fsUser.
//! - Labels and annotations read as sorted `key="value"` lines.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, SecretProjection,
};
use nodeplugins_api::quantity;

use crate::common::go_quote::go_quote;
use crate::volumes::content::atomic_writer::{FileProjection, Payload};
use crate::volumes::content::objects::{ObjectError, ObjectWatches};
use crate::volumes::content::pod_certificates::{PodCertificateError, PodCertificates};
use crate::volumes::content::token::{TokenError, TokenKey, TokenManager};
use crate::volumes::content::trust_bundles::{TrustBundleError, TrustBundles};

/// The API's default file mode of these volumes.
pub(crate) const DEFAULT_MODE: i32 = 0o644;
/// A projected token's default expiry.
const DEFAULT_TOKEN_EXPIRATION: i64 = 3600;

/// Why a volume's files could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum PayloadError {
    /// The object it names is not there.
    #[error("{kind} \"{name}\" not found")]
    NotFound { kind: &'static str, name: String },
    /// An item names a key the object does not have.
    #[error("{kind} references non-existent {what} key: {key}")]
    MissingKey {
        kind: &'static str,
        what: &'static str,
        key: String,
    },
    /// The object could not be read.
    #[error(transparent)]
    Object(#[from] ObjectError),
    /// The token could not be had.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The trust bundle could not be had.
    #[error(transparent)]
    TrustBundle(#[from] TrustBundleError),
    /// The pod's certificate is not there.
    #[error(transparent)]
    PodCertificate(#[from] PodCertificateError),
    /// A downward-API item the agent cannot read.
    #[error("unsupported {0}")]
    Unsupported(String),
}

/// Where the files' content comes from.
pub(crate) struct Sources<'a> {
    pub(crate) config_maps: &'a ObjectWatches<ConfigMap>,
    pub(crate) secrets: &'a ObjectWatches<Secret>,
    pub(crate) tokens: &'a TokenManager,
    pub(crate) trust_bundles: &'a TrustBundles,
    pub(crate) pod_certificates: &'a PodCertificates,
    /// The node (its UID names it in a PodCertificateRequest).
    pub(crate) node: Option<&'a k8s_openapi::api::core::v1::Node>,
    /// The node's allocatable resources: a container's limit when it sets
    /// none.
    pub(crate) allocatable: &'a BTreeMap<String, String>,
}

/// Who the pod's files belong to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Owners {
    /// The one user all its containers run as.
    pub(crate) fs_user: Option<u32>,
    /// Its `fsGroup`.
    pub(crate) fs_group: Option<u32>,
}

fn mode_of(mode: Option<i32>, default: i32) -> u32 {
    u32::try_from(mode.unwrap_or(default)).unwrap_or(0o644) & 0o7777
}

fn file(data: Vec<u8>, mode: u32) -> FileProjection {
    FileProjection {
        data,
        mode,
        fs_user: None,
    }
}

/// Keys to files: all of `keys` with `default`, or `items` only.
fn keyed(
    keys: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default: u32,
    optional: bool,
    kind: &'static str,
    what: &'static str,
) -> Result<Payload, PayloadError> {
    let mut payload = Payload::new();
    match items {
        None => {
            for (key, data) in keys {
                payload.insert(key.clone(), file(data.clone(), default));
            }
        }
        Some(items) => {
            for item in items {
                let Some(data) = keys.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(PayloadError::MissingKey {
                        kind,
                        what,
                        key: item.key.clone(),
                    });
                };
                let mode = item.mode.map_or(default, |m| mode_of(Some(m), 0));
                payload.insert(item.path.clone(), file(data.clone(), mode));
            }
        }
    }
    Ok(payload)
}

fn config_map_keys(map: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut keys: BTreeMap<String, Vec<u8>> = map
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in map.binary_data.iter().flatten() {
        keys.insert(k.clone(), v.0.clone());
    }
    keys
}

fn secret_keys(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut keys: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        keys.insert(k.clone(), v.clone().into_bytes());
    }
    keys
}

/// The files of an object's `keys` (`None`: the object is not there, which
/// is nothing when `optional`).
fn object_files(
    keys: Option<BTreeMap<String, Vec<u8>>>,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default: u32,
    optional: bool,
    (kind, what): (&'static str, &'static str),
) -> Result<Payload, PayloadError> {
    match keys {
        Some(keys) => keyed(&keys, items, default, optional, kind, what),
        None if optional => Ok(Payload::new()),
        None => Err(PayloadError::NotFound {
            kind,
            name: name.to_string(),
        }),
    }
}

/// A ConfigMap's files.
pub(crate) async fn config_map(
    sources: &Sources<'_>,
    namespace: &str,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default: u32,
    optional: bool,
) -> Result<Payload, PayloadError> {
    let keys = sources.config_maps.get(namespace, name).await?;
    let keys = keys.map(|map| config_map_keys(&map));
    object_files(
        keys,
        name,
        items,
        default,
        optional,
        ("configmap", "config"),
    )
}

/// A Secret's files.
pub(crate) async fn secret(
    sources: &Sources<'_>,
    namespace: &str,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default: u32,
    optional: bool,
) -> Result<Payload, PayloadError> {
    let keys = sources.secrets.get(namespace, name).await?;
    let keys = keys.map(|secret| secret_keys(&secret));
    object_files(keys, name, items, default, optional, ("secret", "secret"))
}

/// The downward API's files.
pub(crate) fn downward_api(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default: u32,
    allocatable: &BTreeMap<String, String>,
) -> Result<Payload, PayloadError> {
    let mut payload = Payload::new();
    for item in items {
        let data = if let Some(field) = &item.field_ref {
            pod_field(pod, &field.field_path)?
        } else if let Some(resource) = &item.resource_field_ref {
            let divisor = resource.divisor.as_ref().map(|q| q.0.as_str());
            resource_field(
                pod,
                resource.container_name.as_deref().unwrap_or_default(),
                &resource.resource,
                divisor,
                allocatable,
            )?
        } else {
            String::new()
        };
        let mode = item.mode.map_or(default, |m| mode_of(Some(m), 0));
        payload.insert(item.path.clone(), file(data.into_bytes(), mode));
    }
    Ok(payload)
}

/// A pod metadata field as the downward API volume writes it.
pub(crate) fn pod_field(pod: &Pod, path: &str) -> Result<String, PayloadError> {
    let meta = &pod.metadata;
    let subscript = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['"))
            .and_then(|rest| rest.strip_suffix("']"))
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        _ => {
            if let Some(key) = subscript("metadata.labels") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(key) = subscript("metadata.annotations") {
                meta.annotations
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(PayloadError::Unsupported(format!("fieldPath {path:?}")));
            }
        }
    })
}

/// Sorted `key="value"` lines, the value quoted as Go's `%q` does.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A container's resource as the downward API writes it: its limit (the
/// node's allocatable when it sets none) or request, divided by `divisor`
/// and rounded up.
pub(crate) fn resource_field(
    pod: &Pod,
    container: &str,
    resource: &str,
    divisor: Option<&str>,
    allocatable: &BTreeMap<String, String>,
) -> Result<String, PayloadError> {
    let spec = pod.spec.as_ref();
    let found = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == container)
        .ok_or_else(|| PayloadError::Unsupported(format!("container {container:?}")))?;
    let resources = found.resources.as_ref();
    let (list, name) = match resource.split_once('.') {
        Some(("limits", name)) => (resources.and_then(|r| r.limits.as_ref()), name),
        Some(("requests", name)) => (resources.and_then(|r| r.requests.as_ref()), name),
        _ => (None, resource),
    };
    let is_limit = resource.starts_with("limits.");
    let text = list
        .and_then(|l| l.get(name))
        .map(|q| q.0.clone())
        .or_else(|| is_limit.then(|| allocatable.get(name).cloned()).flatten())
        .unwrap_or_else(|| "0".into());
    let divide = |value: Option<i64>, by: Option<i64>| -> Result<String, PayloadError> {
        let (Some(value), Some(by)) = (value, by) else {
            return Err(PayloadError::Unsupported(format!("resource {resource:?}")));
        };
        if by <= 0 {
            return Err(PayloadError::Unsupported(format!(
                "divisor of {resource:?}"
            )));
        }
        Ok(((value + by - 1) / by).to_string())
    };
    match name {
        "cpu" => divide(
            quantity::milli_value(&text),
            quantity::milli_value(divisor.unwrap_or("1")),
        ),
        "memory" | "ephemeral-storage" => divide(
            quantity::value(&text),
            quantity::value(divisor.unwrap_or("1")),
        ),
        _ => Err(PayloadError::Unsupported(format!("resource {resource:?}"))),
    }
}

/// Projected volume `volume`'s files, each source's in order (a later
/// path wins).
pub(crate) async fn projected(
    sources: &Sources<'_>,
    pod: &Pod,
    volume: &str,
    source: &k8s_openapi::api::core::v1::ProjectedVolumeSource,
    owners: Owners,
) -> Result<Payload, PayloadError> {
    let default = mode_of(source.default_mode, DEFAULT_MODE);
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut payload = Payload::new();
    for (index, projection) in source.sources.iter().flatten().enumerate() {
        if let Some(ConfigMapProjection {
            name,
            items,
            optional,
        }) = &projection.config_map
        {
            let files = config_map(
                sources,
                &namespace,
                name,
                items.as_ref(),
                default,
                optional.unwrap_or(false),
            )
            .await?;
            payload.extend(files);
        }
        if let Some(SecretProjection {
            name,
            items,
            optional,
        }) = &projection.secret
        {
            let files = secret(
                sources,
                &namespace,
                name,
                items.as_ref(),
                default,
                optional.unwrap_or(false),
            )
            .await?;
            payload.extend(files);
        }
        if let Some(api) = &projection.downward_api {
            let items = api.items.as_deref().unwrap_or_default();
            payload.extend(downward_api(pod, items, default, sources.allocatable)?);
        }
        if let Some(token) = &projection.service_account_token {
            let key = TokenKey {
                namespace: namespace.clone(),
                service_account: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.service_account_name.clone())
                    .unwrap_or_else(|| "default".into()),
                audience: token.audience.clone().unwrap_or_default(),
                expiration_seconds: Some(
                    token.expiration_seconds.unwrap_or(DEFAULT_TOKEN_EXPIRATION),
                ),
                pod_name: pod.metadata.name.clone().unwrap_or_default(),
                pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            };
            let text = sources.tokens.token(&key).await?;
            let mode = if owners.fs_user.is_some() || owners.fs_group.is_some() {
                0o600
            } else {
                default
            };
            payload.insert(
                token.path.clone(),
                FileProjection {
                    data: text.into_bytes(),
                    mode,
                    fs_user: owners.fs_user,
                },
            );
        }
        if let Some(bundle) = &projection.cluster_trust_bundle {
            let pem = sources
                .trust_bundles
                .certificates(
                    bundle.name.as_deref(),
                    bundle.signer_name.as_deref(),
                    bundle.label_selector.as_ref(),
                    bundle.optional.unwrap_or(false),
                )
                .await?;
            let mode = if owners.fs_user.is_some() || owners.fs_group.is_some() {
                0o600
            } else {
                default
            };
            payload.insert(
                bundle.path.clone(),
                FileProjection {
                    data: pem,
                    mode,
                    fs_user: owners.fs_user,
                },
            );
        }
        if let Some(certificate) = &projection.pod_certificate {
            let (key, chain) = sources
                .pod_certificates
                .credential_bundle(pod, volume, index, certificate, sources.node)
                .await?;
            let mode = if owners.fs_user.is_some() || owners.fs_group.is_some() {
                0o600
            } else {
                default
            };
            let file = |data: Vec<u8>| FileProjection {
                data,
                mode,
                fs_user: owners.fs_user,
            };
            if let Some(path) = certificate
                .credential_bundle_path
                .as_deref()
                .filter(|p| !p.is_empty())
            {
                payload.insert(
                    path.to_string(),
                    file([key.clone(), chain.clone()].concat()),
                );
            }
            if let Some(path) = certificate.key_path.as_deref().filter(|p| !p.is_empty()) {
                payload.insert(path.to_string(), file(key));
            }
            if let Some(path) = certificate
                .certificate_chain_path
                .as_deref()
                .filter(|p| !p.is_empty())
            {
                payload.insert(path.to_string(), file(chain));
            }
        }
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                "labels": {"b": "2", "a": "say \"hi\"\n"}},
            "spec": {"containers": [{"name": "main", "resources": {
                "limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}}}]},
        }))
        .unwrap()
    }

    fn items(json: serde_json::Value) -> Vec<DownwardAPIVolumeFile> {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_downward_api_writes_fields_and_resources_as_the_kubelet() {
        let allocatable = BTreeMap::from([("cpu".to_string(), "2".to_string())]);
        let payload = downward_api(
            &pod(),
            &items(serde_json::json!([
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "b", "fieldRef": {"fieldPath": "metadata.labels['b']"}, "mode": 0o400},
                {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}},
                {"path": "cpu_limit", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu"}},
                {"path": "cpu_request", "resourceFieldRef": {"containerName": "main", "resource": "requests.cpu", "divisor": "1m"}},
            ])),
            0o644,
            &allocatable,
        )
        .unwrap();
        let text = |p: &str| String::from_utf8(payload[p].data.clone()).unwrap();
        assert_eq!(text("labels"), "a=\"say \\\"hi\\\"\\n\"\nb=\"2\"");
        assert_eq!(text("b"), "2");
        assert_eq!(payload["b"].mode, 0o400);
        assert_eq!(payload["labels"].mode, 0o644);
        assert_eq!(text("mem"), "64");
        assert_eq!(text("cpu_limit"), "2", "no limit: the node's allocatable");
        assert_eq!(text("cpu_request"), "250");
    }

    #[test]
    fn items_pick_keys_and_a_missing_one_fails_unless_optional() {
        let keys = BTreeMap::from([
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
        ]);
        let all = keyed(&keys, None, 0o644, false, "configmap", "config").unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["a", "b"]);
        let items: Vec<KeyToPath> = serde_json::from_value(serde_json::json!([
            {"key": "b", "path": "dir/b.txt", "mode": 0o600},
            {"key": "c", "path": "c"},
        ]))
        .unwrap();
        let err = keyed(&keys, Some(&items), 0o644, false, "configmap", "config").unwrap_err();
        assert_eq!(
            err.to_string(),
            "configmap references non-existent config key: c"
        );
        let some = keyed(&keys, Some(&items), 0o644, true, "configmap", "config").unwrap();
        assert_eq!(some.keys().collect::<Vec<_>>(), ["dir/b.txt"]);
        assert_eq!(some["dir/b.txt"].mode, 0o600);
    }
}
