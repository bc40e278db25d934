//! `/exec`, `/attach`, `/portForward` and `/run`, as the kubelet serves
//! them: the streams asked for read from the query (`input`, `output`,
//! `error`, `tty`: `1` is true; a terminal has no separate stderr; at
//! least one stream), the pod found among those bound to the node (`pod
//! does not exist`), its running container (or its sandbox) found in the
//! runtime, the runtime asked for a URL of its streaming server, and the
//! user's upgraded connection proxied there. `/run` runs the command to
//! its end (`ExecSync`) and answers with its output.

use std::sync::Arc;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use k8s_openapi::api::core::v1::Pod;

use super::container_logs::form_urlencoded;
use super::reply::{self, Reply};
use super::state::State;
use super::upgrade_proxy;
use crate::runtime::{AttachRequest, ContainerState, ExecRequest, RuntimeError};

/// Which of the three streaming endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Session {
    Exec,
    Attach,
    PortForward,
}

/// The streams a session carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Streams {
    pub(crate) stdin: bool,
    pub(crate) stdout: bool,
    pub(crate) stderr: bool,
    pub(crate) tty: bool,
}

/// The streams of `pairs` (remote command's `NewOptions`).
pub(crate) fn streams(pairs: &[(String, String)]) -> Result<Streams, String> {
    // The first value of each, as Go's `FormValue` reads it.
    let on = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .is_some_and(|(_, v)| v == "1")
    };
    let tty = on("tty");
    let stdin = on("input");
    let stdout = on("output");
    // A terminal merges stderr into stdout.
    let stderr = on("error") && !tty;
    if !stdin && !stdout && !stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".to_string());
    }
    Ok(Streams {
        stdin,
        stdout,
        stderr,
        tty,
    })
}

/// A runtime's failure as the kubelet's `streaming.WriteError` writes
/// it: NotFound a 404, ResourceExhausted a 429, anything else a 500, with
/// the gRPC error's text.
fn runtime_error(error: &RuntimeError) -> Reply {
    match error {
        RuntimeError::Call { code, message, .. } => {
            let status = match code {
                tonic::Code::NotFound => StatusCode::NOT_FOUND,
                tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            reply::text(
                status,
                format!("rpc error: code = {code:?} desc = {message}"),
            )
        }
        other => reply::text(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
    }
}

/// The pod a session names, with the UID the path gives (if any).
struct Target {
    pod: Arc<Pod>,
    uid: String,
}

fn find_pod(state: &State, namespace: &str, name: &str, uid: Option<&str>) -> Option<Target> {
    let pod = state.pods.bound_pod(namespace, name)?;
    let actual = pod.metadata.uid.clone().unwrap_or_default();
    Some(Target {
        uid: uid.map_or(actual, str::to_string),
        pod,
    })
}

fn full_name(pod: &Pod) -> String {
    format!(
        "{}_{}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default()
    )
}

/// The runtime id of `container`'s running instance in the pod of UID
/// `uid` (its latest attempt).
async fn running_container(
    state: &State,
    uid: &str,
    container: &str,
) -> Result<Option<String>, RuntimeError> {
    let containers = state.runtime.containers().await?;
    Ok(containers
        .into_iter()
        .filter(|c| c.pod.uid == uid && c.name == container && c.state == ContainerState::Running)
        .max_by_key(|c| (c.attempt, c.created_at))
        .map(|c| c.id))
}

/// The pod's ready sandbox.
async fn ready_sandbox(state: &State, uid: &str) -> Result<Option<String>, RuntimeError> {
    let sandboxes = state.runtime.sandboxes().await?;
    Ok(sandboxes
        .into_iter()
        .filter(|s| s.pod.uid == uid && s.ready)
        .max_by_key(|s| (s.attempt, s.created_at))
        .map(|s| s.id))
}

/// Serves an exec, attach or port-forward `request` for the path's
/// `segments` (after the endpoint's name).
pub(crate) async fn serve(
    state: &State,
    session: Session,
    segments: &[&str],
    request: Request<Incoming>,
) -> Reply {
    let pairs = form_urlencoded(request.uri().query().unwrap_or_default());
    let (namespace, pod_name, uid, container) = match (session, segments) {
        (Session::PortForward, [ns, pod]) => (*ns, *pod, None, ""),
        (Session::PortForward, [ns, pod, uid]) => (*ns, *pod, Some(*uid), ""),
        (Session::Exec | Session::Attach, [ns, pod, container]) => (*ns, *pod, None, *container),
        (Session::Exec | Session::Attach, [ns, pod, uid, container]) => {
            (*ns, *pod, Some(*uid), *container)
        }
        _ => return reply::text(StatusCode::NOT_FOUND, "404 page not found"),
    };
    let streams = match session {
        Session::PortForward => None,
        _ => match streams(&pairs) {
            Ok(streams) => Some(streams),
            Err(message) => return reply::text(StatusCode::BAD_REQUEST, message),
        },
    };
    let Some(target) = find_pod(state, namespace, pod_name, uid) else {
        return reply::text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let url = match (session, streams) {
        (Session::PortForward, _) => match ready_sandbox(state, &target.uid).await {
            Ok(Some(sandbox)) => state.runtime.port_forward(&sandbox, &[]).await,
            Ok(None) => {
                return reply::text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("pod not found ({:?})", full_name(&target.pod)),
                );
            }
            Err(e) => Err(e),
        },
        (_, Some(streams)) => {
            let id = match running_container(state, &target.uid, container).await {
                Ok(Some(id)) => id,
                Ok(None) => {
                    let message = match session {
                        Session::Exec => format!("container not found ({container:?})"),
                        _ => format!(
                            "container {container} not found in pod {}",
                            full_name(&target.pod)
                        ),
                    };
                    return reply::text(StatusCode::INTERNAL_SERVER_ERROR, message);
                }
                Err(e) => return runtime_error(&e),
            };
            if session == Session::Exec {
                let cmd = pairs
                    .iter()
                    .filter(|(k, _)| k == "command")
                    .map(|(_, v)| v.clone())
                    .collect();
                state
                    .runtime
                    .exec(&ExecRequest {
                        container_id: id,
                        cmd,
                        tty: streams.tty,
                        stdin: streams.stdin,
                        stdout: streams.stdout,
                        stderr: streams.stderr,
                    })
                    .await
            } else {
                // Attach: the terminal is the container's, from its spec.
                let tty = target.pod.spec.as_ref().is_some_and(|spec| {
                    spec.containers
                        .iter()
                        .any(|c| c.name == container && c.tty == Some(true))
                });
                state
                    .runtime
                    .attach(&AttachRequest {
                        container_id: id,
                        tty,
                        stdin: streams.stdin,
                        stdout: streams.stdout,
                        stderr: streams.stderr && !tty,
                    })
                    .await
            }
        }
        (_, None) => return reply::text(StatusCode::BAD_REQUEST, "no streams"),
    };
    match url {
        Ok(url) => upgrade_proxy::proxy(request, &url).await,
        Err(e) => runtime_error(&e),
    }
}

/// Serves `/run/{namespace}/{pod}[/{uid}]/{container}?cmd=...`: the
/// command (split at spaces) run to its end; its stdout then stderr.
pub(crate) async fn run(state: &State, segments: &[&str], query: &str) -> Reply {
    let (namespace, pod_name, uid, container) = match segments {
        [ns, pod, container] => (*ns, *pod, None, *container),
        [ns, pod, uid, container] => (*ns, *pod, Some(*uid), *container),
        _ => return reply::text(StatusCode::NOT_FOUND, "404 page not found"),
    };
    let Some(target) = find_pod(state, namespace, pod_name, uid) else {
        return reply::text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let pairs = form_urlencoded(query);
    let cmd: Vec<String> = pairs
        .iter()
        .find(|(k, _)| k == "cmd")
        .map(|(_, v)| v.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    let id = match running_container(state, &target.uid, container).await {
        Ok(Some(id)) => id,
        Ok(None) => {
            return reply::text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("container not found ({container:?})"),
            );
        }
        Err(e) => return reply::text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match state.runtime.exec_sync(&id, &cmd, None).await {
        Ok(output) if output.exit_code == 0 => {
            let mut data = output.stdout;
            data.extend_from_slice(&output.stderr);
            reply::bytes(StatusCode::OK, "application/json", data)
        }
        Ok(output) => reply::text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "command '{}' exited with {}: {}",
                cmd.join(" "),
                output.exit_code,
                String::from_utf8_lossy(&output.stderr)
            ),
        ),
        Err(e) => reply::text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(query: &str) -> Vec<(String, String)> {
        form_urlencoded(query)
    }

    #[test]
    fn the_streams_are_the_flags_set_to_one_and_a_terminal_has_no_stderr() {
        assert_eq!(
            streams(&pairs("input=1&output=1&error=1")),
            Ok(Streams {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false
            })
        );
        assert_eq!(
            streams(&pairs("output=1&error=1&tty=1")),
            Ok(Streams {
                stdin: false,
                stdout: true,
                stderr: false,
                tty: true
            })
        );
        assert_eq!(
            streams(&pairs("output=true&tty=1")),
            Err("you must specify at least 1 of stdin, stdout, stderr".to_string())
        );
    }
}
