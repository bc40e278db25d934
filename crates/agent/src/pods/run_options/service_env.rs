//! The environment variables the kubelet gives every container for the
//! cluster's Services (`getServiceEnvVarMap`, `envvars.FromServices`): the
//! `kubernetes` Service of `default` always, and, with the pod's
//! `enableServiceLinks` (the API's default), every Service of the pod's
//! namespace; a Service without a cluster IP (headless) is left out. For a
//! Service `my-db` with port 5432 named `pg`:
//!
//! ```text
//! MY_DB_SERVICE_HOST=10.0.0.7          MY_DB_PORT=tcp://10.0.0.7:5432
//! MY_DB_SERVICE_PORT=5432              MY_DB_PORT_5432_TCP=tcp://10.0.0.7:5432
//! MY_DB_SERVICE_PORT_PG=5432           MY_DB_PORT_5432_TCP_PROTO=tcp
//!                                      MY_DB_PORT_5432_TCP_PORT=5432
//!                                      MY_DB_PORT_5432_TCP_ADDR=10.0.0.7
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};

use crate::pods::admit::spec::is_static;
use crate::pods::informers::{Informers, NotListed};

/// The namespace of the cluster's own Service.
const MASTER_NAMESPACE: &str = "default";
/// The cluster's own Service, whose variables every container gets.
const MASTER_SERVICE: &str = "kubernetes";

/// The service variables of `pod`'s containers, in name order, from the
/// Services `informers` hold. A static pod does not wait for the Services'
/// first listing (it may be the API server itself): before it, it gets
/// none, as the kubelet's.
pub(crate) async fn for_pod(
    informers: &Informers,
    pod: &Pod,
) -> Result<Vec<(String, String)>, NotListed> {
    if is_static(pod) && !informers.services_listed() {
        return Ok(Vec::new());
    }
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let mut services: BTreeMap<String, Arc<Service>> = BTreeMap::new();
    if links {
        for service in informers.services_in(&namespace).await? {
            let name = service.metadata.name.clone().unwrap_or_default();
            services.insert(name, service);
        }
    }
    if namespace != MASTER_NAMESPACE || !links {
        // The cluster's own Service wins over one of the same name here.
        if let Some(master) = informers.service(MASTER_NAMESPACE, MASTER_SERVICE).await? {
            services.insert(MASTER_SERVICE.to_string(), master);
        }
    }
    let mut env = BTreeMap::new();
    for service in services.values() {
        env.extend(variables(service));
    }
    Ok(env.into_iter().collect())
}

/// A Service's variables; none without a cluster IP.
pub(crate) fn variables(service: &Service) -> Vec<(String, String)> {
    let Some(spec) = service.spec.as_ref() else {
        return Vec::new();
    };
    let ip = spec.cluster_ip.clone().unwrap_or_default();
    if ip.is_empty() || ip == "None" {
        return Vec::new();
    }
    let name = env_name(service.metadata.name.as_deref().unwrap_or_default());
    let ports = spec.ports.clone().unwrap_or_default();
    let mut env = vec![(format!("{name}_SERVICE_HOST"), ip.clone())];
    if let Some(first) = ports.first() {
        env.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
    }
    for port in &ports {
        if let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            env.push((
                format!("{name}_SERVICE_PORT_{}", env_name(port_name)),
                port.port.to_string(),
            ));
        }
    }
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.clone()
    };
    for (i, port) in ports.iter().enumerate() {
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        let lower = protocol.to_ascii_lowercase();
        let url = format!("{lower}://{host}:{}", port.port);
        let prefix = format!(
            "{name}_PORT_{}_{}",
            port.port,
            protocol.to_ascii_uppercase()
        );
        if i == 0 {
            env.push((format!("{name}_PORT"), url.clone()));
        }
        env.push((prefix.clone(), url));
        env.push((format!("{prefix}_PROTO"), lower));
        env.push((format!("{prefix}_PORT"), port.port.to_string()));
        env.push((format!("{prefix}_ADDR"), ip.clone()));
    }
    env
}

/// A name as a variable name: upper case, `-` as `_`.
fn env_name(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn a_service_gives_the_kubelets_docker_link_variables() {
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": "kubernetes"},
            "spec": {"clusterIP": "10.0.0.1", "ports": [
                {"name": "https", "port": 443, "protocol": "TCP"}]},
        }))
        .unwrap();
        let env: BTreeMap<String, String> = variables(&service).into_iter().collect();
        let want: BTreeMap<String, String> = [
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.0.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, want);

        let headless: Service = serde_json::from_value(json!({
            "metadata": {"name": "db"}, "spec": {"clusterIP": "None"},
        }))
        .unwrap();
        assert!(variables(&headless).is_empty());
        assert_eq!(env_name("my-db"), "MY_DB");
    }
}
