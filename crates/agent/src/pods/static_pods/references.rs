//! What in a static pod would need the API: a static pod runs without an
//! API server, and NodeRestriction refuses a mirror pod that names a
//! service account, a Secret, a ConfigMap, a claim or a volume the API
//! serves, so the kubelet refuses such a manifest ("static pods may not
//! reference ..."), in its order (`HasAPIObjectReference`).

use k8s_openapi::api::core::v1::{Container, EnvFromSource, EnvVar, Pod, PodSpec};

/// The kind of API object `pod` references first, as the kubelet names it
/// in its refusal; `None` when it references none.
pub(super) fn api_object_reference(pod: &Pod) -> Option<&'static str> {
    let spec = pod.spec.as_ref()?;
    if spec
        .service_account_name
        .as_deref()
        .is_some_and(|name| !name.is_empty())
    {
        return Some("serviceaccounts");
    }
    if names_secret(spec) {
        return Some("secrets");
    }
    if names_config_map(spec) {
        return Some("configmaps");
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return Some("resourceclaims");
    }
    for volume in spec.volumes.iter().flatten() {
        if volume.config_map.is_some() {
            return Some("configmaps (via configmap volumes)");
        }
        if volume.secret.is_some() {
            return Some("secrets (via secret volumes)");
        }
        if volume.csi.is_some() {
            return Some("csidrivers (via CSI volumes)");
        }
        if volume.glusterfs.is_some() {
            return Some("endpoints (via glusterFS volumes)");
        }
        if volume.persistent_volume_claim.is_some() {
            return Some("persistentvolumeclaims");
        }
        if volume.ephemeral.is_some() {
            return Some("persistentvolumeclaims (via ephemeral volumes)");
        }
        if volume.azure_file.is_some() {
            return Some("secrets (via azureFile volumes)");
        }
        if let Some(projected) = &volume.projected {
            for source in projected.sources.iter().flatten() {
                if source.config_map.is_some() {
                    return Some("configmaps (via projected volumes)");
                }
                if source.secret.is_some() {
                    return Some("secrets (via projected volumes)");
                }
                if source.service_account_token.is_some() {
                    return Some("serviceaccounts (via projected volumes)");
                }
                if source.cluster_trust_bundle.is_some() {
                    return Some("clustertrustbundles");
                }
                if source.pod_certificate.is_some() {
                    return Some("podcertificates");
                }
            }
        }
    }
    None
}

/// Every container of `spec`, init and ephemeral ones too, by what they
/// can name: their environment and its sources.
fn environments(spec: &PodSpec) -> impl Iterator<Item = (&[EnvVar], &[EnvFromSource])> {
    fn env(c: &Container) -> (&[EnvVar], &[EnvFromSource]) {
        (
            c.env.as_deref().unwrap_or_default(),
            c.env_from.as_deref().unwrap_or_default(),
        )
    }
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(env)
        .chain(spec.ephemeral_containers.iter().flatten().map(|c| {
            (
                c.env.as_deref().unwrap_or_default(),
                c.env_from.as_deref().unwrap_or_default(),
            )
        }))
}

/// Whether `spec` names a Secret anywhere (`VisitPodSecretNames`).
fn names_secret(spec: &PodSpec) -> bool {
    if spec
        .image_pull_secrets
        .iter()
        .flatten()
        .any(|s| !s.name.is_empty())
    {
        return true;
    }
    for (env, env_from) in environments(spec) {
        if env_from.iter().any(|from| from.secret_ref.is_some())
            || env.iter().any(|var| {
                var.value_from
                    .as_ref()
                    .is_some_and(|v| v.secret_key_ref.is_some())
            })
        {
            return true;
        }
    }
    spec.volumes.iter().flatten().any(|v| {
        v.secret.is_some()
            || v.azure_file.is_some()
            || v.cephfs.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.cinder.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.flex_volume
                .as_ref()
                .is_some_and(|s| s.secret_ref.is_some())
            || v.rbd.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.iscsi.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.scale_io.as_ref().is_some()
            || v.storageos.as_ref().is_some_and(|s| s.secret_ref.is_some())
            || v.csi
                .as_ref()
                .is_some_and(|s| s.node_publish_secret_ref.is_some())
            || v.projected
                .as_ref()
                .is_some_and(|p| p.sources.iter().flatten().any(|s| s.secret.is_some()))
    })
}

/// Whether `spec` names a ConfigMap anywhere (`VisitPodConfigmapNames`).
fn names_config_map(spec: &PodSpec) -> bool {
    for (env, env_from) in environments(spec) {
        if env_from.iter().any(|from| from.config_map_ref.is_some())
            || env.iter().any(|var| {
                var.value_from
                    .as_ref()
                    .is_some_and(|v| v.config_map_key_ref.is_some())
            })
        {
            return true;
        }
    }
    spec.volumes.iter().flatten().any(|v| {
        v.config_map.is_some()
            || v.projected
                .as_ref()
                .is_some_and(|p| p.sources.iter().flatten().any(|s| s.config_map.is_some()))
    })
}
