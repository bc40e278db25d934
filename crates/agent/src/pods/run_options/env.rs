//! A container's environment as the kubelet makes it
//! (`makeEnvironmentVariables`): the device plugins' variables first, then
//! the container's own `env` (each value expanded against the variables
//! before it, with the downward API's pod fields), then the Services'
//! variables the container does not set itself. A runtime keeps the last
//! of a name, so the container's own win.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

/// Container `container`'s variables, in order: `plugins` (its device
/// plugins'), its own, then `services` where it does not set them.
pub(crate) fn container_env(
    pod: &Pod,
    container: &Container,
    plugins: &BTreeMap<String, String>,
    services: &[(String, String)],
) -> Vec<(String, String)> {
    let mut envs: Vec<(String, String)> = plugins
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut known = envs.clone();
    known.extend(services.iter().cloned());
    let own = own_env(pod, container, &known);
    // The service variables after the container's own, which win.
    let services: Vec<(String, String)> = services
        .iter()
        .filter(|(name, _)| !own.iter().any(|(o, _)| o == name))
        .cloned()
        .collect();
    envs.extend(own);
    envs.extend(services);
    envs
}

/// The container's own `env`, each value expanded against the variables
/// before it (its own, then `before`), with the downward API's pod fields.
fn own_env(pod: &Pod, container: &Container, before: &[(String, String)]) -> Vec<(String, String)> {
    let mut defined: BTreeMap<String, String> = before.iter().cloned().collect();
    let mut own = Vec::new();
    for EnvVar {
        name,
        value,
        value_from,
    } in container.env.iter().flatten()
    {
        let value = match (value, value_from) {
            (Some(value), _) => expand(value, |n| defined.get(n).cloned()),
            (None, Some(from)) => from
                .field_ref
                .as_ref()
                .and_then(|f| pod_field(pod, &f.field_path))
                .unwrap_or_default(),
            (None, None) => String::new(),
        };
        defined.insert(name.clone(), value.clone());
        own.push((name.clone(), value));
    }
    own
}

/// A downward-API field of the pod, as the kubelet reads it.
fn pod_field(pod: &Pod, path: &str) -> Option<String> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    match path {
        "metadata.name" => pod.metadata.name.clone(),
        "metadata.namespace" => pod.metadata.namespace.clone(),
        "metadata.uid" => pod.metadata.uid.clone(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        // A host-network pod's IP is the node's.
        "status.hostIP" | "status.podIP" => status.and_then(|s| s.host_ip.clone()),
        _ => None,
    }
}

/// `text` with each `$(NAME)` replaced by `lookup(NAME)` (left as it is
/// when unknown) and `$$` by `$`, as the kubelet expands commands and
/// environment values.
pub(crate) fn expand(text: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(close) = inner.find(')')
        {
            let name = &inner[..close];
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}
