//! A container's environment as the kubelet makes it
//! (`makeEnvironmentVariables`): the device plugins' variables first, then
//! the variables of its `envFrom` sources (each ConfigMap's or Secret's
//! keys, with the source's prefix), then its own `env`, each replacing one
//! of the same name: a value expanded against the variables before it and
//! the Services', or taken from its source (a pod field, a resource of a
//! container, a ConfigMap's or Secret's key, a file's key in a volume:
//! `env_file.rs`); then the Services'
//! variables the container does not set. A source that does not exist,
//! or a key it lacks, leaves the variable out when it is optional, and
//! otherwise refuses the container with the kubelet's message (its
//! `CreateContainerConfigError`). A runtime keeps the last of a name.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

use crate::pods::run_options::env_file::file_key_value;
use crate::pods::run_options::env_sources::{EnvObjects, ObjectKind};
use crate::pods::run_options::expand::expand;
use crate::volumes::{PodVolumes, downward_pod_field, downward_resource_field};

/// What a container's environment is made from besides the pod.
pub(crate) struct EnvInputs<'a> {
    /// Its device plugins' variables.
    pub(crate) plugins: &'a BTreeMap<String, String>,
    /// The Services' variables.
    pub(crate) services: &'a [(String, String)],
    /// The ConfigMaps and Secrets it names, read.
    pub(crate) objects: &'a EnvObjects,
    /// The node's allocatable resources: a limit a container does not
    /// set.
    pub(crate) allocatable: &'a BTreeMap<String, String>,
    /// The node's address, which is the pod's too (every pod has the
    /// node's network here): known before the pod's status says it, as
    /// the kubelet takes it from the node and the sandbox.
    pub(crate) node_ip: Option<&'a str>,
    /// The pod's volumes as set up, which `fileKeyRef` reads from.
    pub(crate) volumes: Option<&'a PodVolumes>,
}

/// Container `container`'s variables, in order; an error is the
/// kubelet's message.
pub(crate) fn container_env(
    pod: &Pod,
    container: &Container,
    inputs: &EnvInputs<'_>,
) -> Result<Vec<(String, String)>, String> {
    let mut envs: Vec<(String, String)> = inputs
        .plugins
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let own = own_env(pod, container, inputs)?;
    // The service variables after the container's own, which win.
    let services: Vec<(String, String)> = inputs
        .services
        .iter()
        .filter(|(name, _)| !own.iter().any(|(o, _)| o == name))
        .cloned()
        .collect();
    envs.extend(own);
    envs.extend(services);
    Ok(envs)
}

/// Variables in the order first set, a later value of a name replacing
/// the earlier (the kubelet's `tmpEnv`).
#[derive(Default)]
struct Defined(Vec<(String, String)>);

impl Defined {
    fn set(&mut self, name: String, value: String) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
    }

    fn get(&self, name: &str) -> Option<&String> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// The variables of the container's `envFrom` and `env`.
fn own_env(
    pod: &Pod,
    container: &Container,
    inputs: &EnvInputs<'_>,
) -> Result<Vec<(String, String)>, String> {
    let objects = inputs.objects;
    let mut defined = Defined::default();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        let source = if let Some(map) = &from.config_map_ref {
            Some((ObjectKind::ConfigMap, &map.name, map.optional))
        } else {
            from.secret_ref
                .as_ref()
                .map(|s| (ObjectKind::Secret, &s.name, s.optional))
        };
        let Some((kind, name, optional)) = source else {
            continue;
        };
        match objects.data(kind, name)? {
            Some(data) => {
                for (key, value) in data {
                    defined.set(format!("{prefix}{key}"), value);
                }
            }
            None if optional == Some(true) => {}
            None => return Err(not_found(kind, name)),
        }
    }
    for EnvVar {
        name,
        value,
        value_from,
    } in container.env.iter().flatten()
    {
        let value = match (value.as_deref().filter(|v| !v.is_empty()), value_from) {
            (Some(value), _) => expand(value, |n| {
                defined
                    .get(n)
                    .or_else(|| inputs.services.iter().find(|(s, _)| s == n).map(|(_, v)| v))
                    .cloned()
            }),
            (None, Some(from)) => {
                if let Some(field) = &from.field_ref {
                    pod_field(pod, &field.field_path, inputs.node_ip)?
                } else if let Some(resource) = &from.resource_field_ref {
                    let of = resource
                        .container_name
                        .as_deref()
                        .filter(|c| !c.is_empty())
                        .unwrap_or(&container.name);
                    let divisor = resource.divisor.as_ref().map(|q| q.0.as_str());
                    downward_resource_field(
                        pod,
                        of,
                        &resource.resource,
                        divisor,
                        inputs.allocatable,
                    )
                    .map_err(|e| e.to_string())?
                } else if let Some(file) = &from.file_key_ref {
                    match file_key_value(file, inputs.volumes)? {
                        Some(value) => value,
                        None => continue,
                    }
                } else {
                    let key_ref = if let Some(key) = &from.config_map_key_ref {
                        Some((ObjectKind::ConfigMap, &key.name, &key.key, key.optional))
                    } else {
                        from.secret_key_ref
                            .as_ref()
                            .map(|k| (ObjectKind::Secret, &k.name, &k.key, k.optional))
                    };
                    match key_ref {
                        Some((kind, source, key, optional)) => {
                            let optional = optional == Some(true);
                            let Some(data) = objects.data(kind, source)? else {
                                if optional {
                                    continue;
                                }
                                return Err(not_found(kind, source));
                            };
                            match data.get(key.as_str()) {
                                Some(value) => value.clone(),
                                None if optional => continue,
                                None => {
                                    return Err(format!(
                                        "couldn't find key {key} in {} {}/{source}",
                                        kind.title(),
                                        objects.namespace()
                                    ));
                                }
                            }
                        }
                        None => String::new(),
                    }
                }
            }
            (None, None) => String::new(),
        };
        defined.set(name.clone(), value);
    }
    Ok(defined.0)
}

/// The kubelet's message for object `name` of `kind` that does not exist.
fn not_found(kind: ObjectKind, name: &str) -> String {
    format!("{} {name:?} not found", kind.as_str())
}

/// A downward-API field of the pod, as the kubelet reads it for a
/// variable.
fn pod_field(pod: &Pod, path: &str, node_ip: Option<&str>) -> Result<String, String> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    Ok(match path {
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        // A host-network pod's IP is the node's.
        "status.hostIP" | "status.podIP" | "status.hostIPs" | "status.podIPs" => node_ip
            .map(str::to_string)
            .or_else(|| status.and_then(|s| s.host_ip.clone()))
            .unwrap_or_default(),
        _ => downward_pod_field(pod, path).map_err(|e| e.to_string())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(container: serde_json::Value) -> (Pod, Container) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [container]},
        }))
        .unwrap();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        (pod, c)
    }

    fn env(
        pod: &Pod,
        c: &Container,
        objects: &EnvObjects,
    ) -> Result<Vec<(String, String)>, String> {
        let inputs = EnvInputs {
            plugins: &BTreeMap::new(),
            services: &[("SVC_HOST".to_string(), "10.0.0.1".to_string())],
            objects,
            allocatable: &BTreeMap::from([("cpu".to_string(), "4".to_string())]),
            node_ip: Some("192.0.2.7"),
            volumes: None,
        };
        container_env(pod, c, &inputs)
    }

    #[test]
    fn sources_fill_the_environment_and_own_values_win() {
        let (pod, c) = pod(json!({
            "name": "app",
            "resources": {"requests": {"cpu": "250m"}},
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                        {"secretRef": {"name": "absent", "optional": true}}],
            "env": [
                {"name": "CFG_mode", "value": "own $(SVC_HOST) $(CFG_level)"},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "none", "optional": true}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
        }));
        let objects = EnvObjects::given(
            "ns",
            &[("settings", &[("mode", "fast"), ("level", "3")])],
            &[("db", &[("password", "s3cret")])],
            &[(ObjectKind::Secret, "absent")],
        );
        let got = env(&pod, &c, &objects).unwrap();
        let want: Vec<(String, String)> = [
            ("CFG_level", "3"),
            ("CFG_mode", "own 10.0.0.1 3"),
            ("PASSWORD", "s3cret"),
            ("CPU", "250"),
            ("CPUS", "4"),
            ("APP", "web"),
            ("NODE", "n1"),
            ("SVC_HOST", "10.0.0.1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn the_pods_addresses_are_known_before_its_status_says_them() {
        let field = |path: &str| json!({"valueFrom": {"fieldRef": {"fieldPath": path}}});
        let mut vars = Vec::new();
        for (name, path) in [("POD_IP", "status.podIP"), ("HOST_IP", "status.hostIP")] {
            let mut var = field(path);
            var["name"] = json!(name);
            vars.push(var);
        }
        let (pod, c) = pod(json!({"name": "app", "env": vars}));
        assert!(pod.status.is_none(), "a pod not written yet");
        let env = env(&pod, &c, &EnvObjects::default()).unwrap();
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("POD_IP"), Some("192.0.2.7"));
        assert_eq!(get("HOST_IP"), Some("192.0.2.7"));
    }

    #[test]
    fn a_missing_source_or_key_refuses_the_container_in_the_kubelets_words() {
        let (pod, c) =
            pod(json!({"name": "app", "envFrom": [{"configMapRef": {"name": "settings"}}]}));
        let none = EnvObjects::given("ns", &[], &[], &[(ObjectKind::ConfigMap, "settings")]);
        assert_eq!(
            env(&pod, &c, &none).unwrap_err(),
            "configmap \"settings\" not found"
        );
        let (pod, c) = pod_key("secretKeyRef");
        let empty = EnvObjects::given("ns", &[], &[("db", &[])], &[]);
        assert_eq!(
            env(&pod, &c, &empty).unwrap_err(),
            "couldn't find key password in Secret ns/db"
        );
        let none = EnvObjects::given("ns", &[], &[], &[(ObjectKind::Secret, "db")]);
        assert_eq!(env(&pod, &c, &none).unwrap_err(), "secret \"db\" not found");
    }

    fn pod_key(kind: &str) -> (Pod, Container) {
        pod(json!({"name": "app", "env": [
            {"name": "PASSWORD", "valueFrom": {kind: {"name": "db", "key": "password"}}},
        ]}))
    }
}
