//! One probe run, as the kubelet's prober runs it: the handler of the
//! probe's kind called up to three times in a row while it errs, its
//! answer made a result and the Event the kubelet records for it: a
//! failure is `Unhealthy` (`Readiness probe failed: <output>`), a warning
//! (an HTTP redirect not followed) a success with `ProbeWarning`, and a
//! handler that kept erring `Unhealthy` (`... probe errored and resulted
//! in unknown state: <error>`) with its result thrown away.

use super::exec::exec_probe;
use super::grpc::grpc_probe;
use super::http::{HttpGet, PROBE_AGENT, http_probe};
use super::spec::{Action, ProbeSpec};
use super::tcp::tcp_probe;
use super::verdict::{Handled, Verdict};
use crate::runtime::ContainerRuntime;

/// How many times a handler that errs is called in a row.
const MAX_TRIES: usize = 3;
/// The reason of a probe's failure Event.
pub(crate) const UNHEALTHY: &str = "Unhealthy";
/// The reason of a probe's warning Event.
pub(crate) const PROBE_WARNING: &str = "ProbeWarning";

/// What a probe run gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeRun {
    /// Whether it succeeded; `None`: the handler kept erring, the run does
    /// not count.
    pub(crate) success: Option<bool>,
    /// The Warning to record on the container: (reason, message).
    pub(crate) event: Option<(&'static str, String)>,
}

/// Where a probe reaches the container.
pub(crate) struct Target<'a> {
    pub(crate) runtime: &'a dyn ContainerRuntime,
    /// The container's runtime id.
    pub(crate) container_id: &'a str,
    /// The pod's address (the node's: pods run in its network).
    pub(crate) pod_ip: &'a str,
}

/// Runs `spec` against `target`.
pub(crate) async fn run_probe(spec: &ProbeSpec, target: &Target<'_>) -> ProbeRun {
    let mut handled = Err(("unknown", String::new()));
    for _ in 0..MAX_TRIES {
        handled = handle(spec, target).await;
        if handled.is_ok() {
            break;
        }
    }
    let kind = spec.kind.as_str();
    match handled {
        Ok((Verdict::Success, _)) => ProbeRun {
            success: Some(true),
            event: None,
        },
        Ok((Verdict::Warning, output)) => ProbeRun {
            success: Some(true),
            event: Some((PROBE_WARNING, format!("{kind} probe warning: {output}"))),
        },
        Ok((Verdict::Failure, output)) => ProbeRun {
            success: Some(false),
            event: Some((UNHEALTHY, format!("{kind} probe failed: {output}"))),
        },
        Err((state, error)) => ProbeRun {
            success: None,
            event: Some((
                UNHEALTHY,
                format!("{kind} probe errored and resulted in {state} state: {error}"),
            )),
        },
    }
}

async fn handle(spec: &ProbeSpec, target: &Target<'_>) -> Handled {
    let timeout = spec.timeout;
    let host = |host: &str| {
        if host.is_empty() {
            target.pod_ip.to_string()
        } else {
            host.to_string()
        }
    };
    match &spec.action {
        Action::Exec { command } => {
            exec_probe(target.runtime, target.container_id, command, timeout).await
        }
        Action::Http {
            https,
            host: h,
            port,
            path,
            headers,
        } => {
            let port = port.clone().map_err(|e| ("unknown", e))?;
            let get = HttpGet {
                https: *https,
                host: host(h),
                port,
                path,
                headers,
                agent: PROBE_AGENT,
            };
            http_probe(&get, timeout).await
        }
        Action::Tcp { host: h, port } => {
            let port = port.clone().map_err(|e| ("unknown", e))?;
            tcp_probe(&host(h), port, timeout).await
        }
        Action::Grpc { port, service } => grpc_probe(target.pod_ip, *port, service, timeout).await,
        Action::Missing => Err(("unknown", "missing probe handler".to_string())),
    }
}
