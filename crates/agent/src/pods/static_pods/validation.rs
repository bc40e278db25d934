//! What the kubelet validates of a static pod before it runs it (the API's
//! `ValidatePodCreate`), for the mistakes a manifest makes: names that are
//! no valid names, a pod without containers, a container without a name
//! or an image, two containers or volumes of one name, a mount of a volume
//! the pod does not have, a service account token projected for no service
//! account, a restart or DNS policy the API does not know.
//! The API server validates the rest when the mirror pod is made.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;

/// The errors of `pod`, as the API lists them (`[field: reason, ...]`).
pub(super) fn validate(pod: &Pod) -> Result<(), String> {
    let mut errors = Vec::new();
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if !dns_subdomain(name) {
        errors.push(format!("metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"));
    }
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    if !dns_label(namespace) {
        errors.push(format!("metadata.namespace: Invalid value: {namespace:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"));
    }
    let Some(spec) = &pod.spec else {
        errors.push("spec.containers: Required value".into());
        return finish(errors);
    };
    let mut volumes = HashSet::new();
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        if !dns_label(&volume.name) {
            errors.push(format!(
                "spec.volumes[{i}].name: Invalid value: {:?}",
                volume.name
            ));
        }
        if !volumes.insert(volume.name.as_str()) {
            errors.push(format!(
                "spec.volumes[{i}].name: Duplicate value: {:?}",
                volume.name
            ));
        }
        let no_account = spec
            .service_account_name
            .as_deref()
            .is_none_or(str::is_empty);
        let sources = volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten());
        for (j, source) in sources.enumerate() {
            if no_account && source.service_account_token.is_some() {
                errors.push(format!("spec.volumes[{i}].projected.sources[{j}].serviceAccountToken: Forbidden: must not be specified when serviceAccountName is not set"));
            }
        }
    }
    if spec.containers.is_empty() {
        errors.push("spec.containers: Required value".into());
    }
    let mut names = HashSet::new();
    let groups = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
        ("containers", spec.containers.as_slice()),
    ];
    for (field, containers) in groups {
        for (i, container) in containers.iter().enumerate() {
            let at = format!("spec.{field}[{i}]");
            if container.name.is_empty() {
                errors.push(format!("{at}.name: Required value"));
            } else if !dns_label(&container.name) {
                errors.push(format!("{at}.name: Invalid value: {:?}", container.name));
            } else if !names.insert(container.name.as_str()) {
                errors.push(format!("{at}.name: Duplicate value: {:?}", container.name));
            }
            if container
                .image
                .as_deref()
                .is_none_or(|i| i.trim().is_empty())
            {
                errors.push(format!("{at}.image: Required value"));
            }
            for (j, mount) in container.volume_mounts.iter().flatten().enumerate() {
                if !volumes.contains(mount.name.as_str()) {
                    errors.push(format!(
                        "{at}.volumeMounts[{j}].name: Not found: {:?}",
                        mount.name
                    ));
                }
            }
        }
    }
    let restart = spec.restart_policy.as_deref().unwrap_or("");
    if !["Always", "OnFailure", "Never"].contains(&restart) {
        errors.push(format!("spec.restartPolicy: Unsupported value: {restart:?}: supported values: \"Always\", \"Never\", \"OnFailure\""));
    }
    let dns = spec.dns_policy.as_deref().unwrap_or("");
    if !["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"].contains(&dns) {
        errors.push(format!("spec.dnsPolicy: Unsupported value: {dns:?}: supported values: \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\""));
    }
    finish(errors)
}

fn finish(errors: Vec<String>) -> Result<(), String> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("[{}]", errors.join(", ")))
    }
}

/// An RFC 1123 label: at most 63 lowercase letters, digits and `-`,
/// starting and ending with a letter or digit.
fn dns_label(text: &str) -> bool {
    text.len() <= 63 && label_characters(text)
}

/// Lowercase letters, digits and `-`, starting and ending with a letter or
/// digit.
fn label_characters(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// An RFC 1123 subdomain: at most 253 characters, labels joined by `.`.
fn dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(label_characters)
}
