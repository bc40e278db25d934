//! A container's probes as the kubelet reads them once, when the pod's
//! workers are made: the kind, the handler (the first of `exec`,
//! `httpGet`, `tcpSocket`, `grpc` set), its timing and thresholds with the
//! API's defaults for a value left 0 (period 10 s, timeout 1 s, success 1,
//! failure 3), and a named port resolved against the container's own
//! ports.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::pods::run_options::expand::expand;

/// Which probe: the name the kubelet gives it in Events and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    /// The kubelet's word for it (`Liveness probe failed: ...`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Liveness => "Liveness",
            Self::Readiness => "Readiness",
            Self::Startup => "Startup",
        }
    }
}

/// What a probe does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// A command run in the container (ExecSync), `$(VAR)` expanded from
    /// the container's literal `env` values.
    Exec { command: Vec<String> },
    /// An HTTP GET; `host` empty: the pod's address.
    Http {
        https: bool,
        host: String,
        port: Result<u16, String>,
        path: String,
        headers: Vec<(String, String)>,
    },
    /// A TCP connection opened and closed.
    Tcp {
        host: String,
        port: Result<u16, String>,
    },
    /// A `grpc.health.v1.Health/Check` call in plain text.
    Grpc { port: i32, service: String },
    /// None of them set: the kubelet's "missing probe handler".
    Missing,
}

/// One probe of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeSpec {
    pub(crate) kind: ProbeKind,
    pub(crate) action: Action,
    /// Whole seconds after the container started before the first probe.
    pub(crate) initial_delay: i64,
    pub(crate) period: Duration,
    pub(crate) timeout: Duration,
    pub(crate) success_threshold: u32,
    pub(crate) failure_threshold: u32,
    /// The grace of a kill this probe causes, in place of the pod's.
    pub(crate) termination_grace: Option<i64>,
}

/// The probes of `container`, in the order the kubelet makes their
/// workers: startup, readiness, liveness.
pub(crate) fn probes_of(container: &Container) -> Vec<ProbeSpec> {
    [
        (ProbeKind::Startup, container.startup_probe.as_ref()),
        (ProbeKind::Readiness, container.readiness_probe.as_ref()),
        (ProbeKind::Liveness, container.liveness_probe.as_ref()),
    ]
    .into_iter()
    .filter_map(|(kind, probe)| Some(probe_spec(kind, probe?, container)))
    .collect()
}

fn probe_spec(kind: ProbeKind, probe: &Probe, container: &Container) -> ProbeSpec {
    let or = |value: Option<i32>, default: u32| match value {
        Some(v) if v > 0 => u32::try_from(v).unwrap_or(default),
        _ => default,
    };
    ProbeSpec {
        kind,
        action: action(probe, container),
        initial_delay: i64::from(probe.initial_delay_seconds.unwrap_or(0).max(0)),
        period: Duration::from_secs(u64::from(or(probe.period_seconds, 10))),
        timeout: Duration::from_secs(u64::from(or(probe.timeout_seconds, 1))),
        success_threshold: or(probe.success_threshold, 1),
        failure_threshold: or(probe.failure_threshold, 3),
        termination_grace: probe.termination_grace_period_seconds,
    }
}

fn action(probe: &Probe, container: &Container) -> Action {
    if let Some(exec) = &probe.exec {
        let env: Vec<(&str, String)> = container
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.as_str(), e.value.clone().unwrap_or_default()))
            .collect();
        let lookup = |name: &str| {
            env.iter()
                .rev()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        };
        let command = exec
            .command
            .iter()
            .flatten()
            .map(|arg| expand(arg, lookup))
            .collect();
        return Action::Exec { command };
    }
    if let Some(http) = &probe.http_get {
        let headers = http
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        return Action::Http {
            https: http
                .scheme
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("https")),
            host: http.host.clone().unwrap_or_default(),
            port: resolve_port(&http.port, container),
            path: http.path.clone().unwrap_or_else(|| "/".into()),
            headers,
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        return Action::Tcp {
            host: tcp.host.clone().unwrap_or_default(),
            port: resolve_port(&tcp.port, container),
        };
    }
    if let Some(grpc) = &probe.grpc {
        return Action::Grpc {
            port: grpc.port,
            service: grpc.service.clone().unwrap_or_default(),
        };
    }
    Action::Missing
}

/// A probe's port: a number as given, a name looked up in the container's
/// ports; an error in the kubelet's words.
pub(crate) fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .ok_or_else(|| format!("port {name:?} not found"))?,
    };
    u16::try_from(number)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("invalid port number: {number}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(value: serde_json::Value) -> Container {
        serde_json::from_value(value).unwrap_or_default()
    }

    #[test]
    fn probes_come_in_the_kubelets_order_with_the_apis_defaults() {
        let c = container(json!({
            "name": "app",
            "env": [{"name": "FILE", "value": "/tmp/ok"}, {"name": "FROM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "ports": [{"name": "web", "containerPort": 8080}],
            "livenessProbe": {"httpGet": {"port": "web", "path": "/healthz"}},
            "readinessProbe": {"exec": {"command": ["cat", "$(FILE)", "$(FROM)", "$(NONE)", "$$(FILE)"]}, "periodSeconds": 2},
            "startupProbe": {"tcpSocket": {"port": 9000}, "failureThreshold": 30, "terminationGracePeriodSeconds": 5},
        }));
        let probes = probes_of(&c);
        let kinds: Vec<_> = probes.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [
                ProbeKind::Startup,
                ProbeKind::Readiness,
                ProbeKind::Liveness
            ]
        );
        assert_eq!(probes[0].failure_threshold, 30);
        assert_eq!(probes[0].termination_grace, Some(5));
        assert_eq!(probes[1].period, Duration::from_secs(2));
        assert_eq!(probes[1].timeout, Duration::from_secs(1));
        assert_eq!(
            probes[1].action,
            Action::Exec {
                command: vec![
                    "cat".into(),
                    "/tmp/ok".into(),
                    String::new(),
                    "$(NONE)".into(),
                    "$(FILE)".into()
                ]
            }
        );
        assert_eq!(probes[2].period, Duration::from_secs(10));
        assert_eq!(probes[2].success_threshold, 1);
        assert_eq!(probes[2].failure_threshold, 3);
        match &probes[2].action {
            Action::Http {
                port, path, https, ..
            } => {
                assert_eq!(port, &Ok(8080));
                assert_eq!(path, "/healthz");
                assert!(!https);
            }
            other => panic!("not an HTTP probe: {other:?}"),
        }
    }

    #[test]
    fn a_port_that_is_not_the_containers_is_an_error_in_the_kubelets_words() {
        let c = container(json!({
            "name": "app",
            "readinessProbe": {"tcpSocket": {"port": "nope"}},
            "livenessProbe": {"tcpSocket": {"port": 0}},
        }));
        let probes = probes_of(&c);
        assert_eq!(
            probes[0].action,
            Action::Tcp {
                host: String::new(),
                port: Err("port \"nope\" not found".into())
            }
        );
        assert_eq!(
            probes[1].action,
            Action::Tcp {
                host: String::new(),
                port: Err("invalid port number: 0".into())
            }
        );
    }
}
