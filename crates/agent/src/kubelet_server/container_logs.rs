//! `/containerLogs/{namespace}/{pod}/{container}`: the query read into the
//! pod log options as the kubelet reads it (`tail` the legacy name of
//! `tailLines`, and ahead of it; `follow`, `previous`, `timestamps`,
//! `sinceSeconds`, `sinceTime`, `tailLines`, `limitBytes`, `stream`),
//! validated as the API validates them and refused with the kubelet's two
//! answers (400 `Unable to decode query.`, 422 `Invalid request.`, the
//! reason only in our log); the container's log chosen from the pod's status as
//! the kubelet's `validateContainerLogStatus` chooses it; and its file,
//! as the runtime names it, streamed.

use http::StatusCode;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::mpsc;

use super::log_reader::{LogOptions, read_logs};
use super::reply::{self, Reply};
use super::state::State;
use crate::runtime::ContainerState;

/// The pod log options of a query, and whether the previous container's
/// log is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogQuery {
    pub(crate) options: LogOptions,
    pub(crate) previous: bool,
}

/// Why a query is refused, and with which status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadQuery {
    /// 400 (the query does not decode) or 422 (it is invalid).
    pub(crate) status: StatusCode,
    /// What is wrong with it, for the log: the kubelet tells the client
    /// only [`BadQuery::body`].
    pub(crate) reason: String,
}

impl BadQuery {
    /// The kubelet's answer.
    pub(crate) fn body(&self) -> &'static str {
        if self.status == StatusCode::BAD_REQUEST {
            r#"{"message": "Unable to decode query."}"#
        } else {
            r#"{"message": "Invalid request."}"#
        }
    }
}

fn bad(reason: String) -> BadQuery {
    BadQuery {
        status: StatusCode::BAD_REQUEST,
        reason,
    }
}

fn invalid(field: &str, value: &str, detail: &str) -> BadQuery {
    BadQuery {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        reason: format!("{field}: Invalid value: {value}: {detail}"),
    }
}

/// A boolean query parameter as the API's conversion reads one: absent,
/// empty, `0` or `false` (any case) is false; anything else true.
fn flag(value: Option<&str>) -> bool {
    value.is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "" | "0" | "false"))
}

fn integer(name: &str, value: &str) -> Result<i64, BadQuery> {
    value.parse().map_err(|_| {
        bad(format!(
            "unable to decode query parameter {name}: {value:?} is not a number"
        ))
    })
}

/// Reads `query` (the URL's, undecoded) at time `now`.
pub(crate) fn parse_query(query: &str, now: Timestamp) -> Result<LogQuery, BadQuery> {
    let pairs: Vec<(String, String)> = form_urlencoded(query);
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut options = LogOptions {
        follow: flag(get("follow")),
        timestamps: flag(get("timestamps")),
        ..LogOptions::default()
    };
    let previous = flag(get("previous"));
    // The legacy `tail`, when not empty, replaces `tailLines`; `all` is
    // no tail at all.
    let tail = match (get("tail"), get("tailLines")) {
        (Some("all"), _) => None,
        (Some(lines), _) if !lines.is_empty() => Some(lines),
        (_, lines) => lines,
    };
    if let Some(tail) = tail {
        let lines = integer("tailLines", tail)?;
        if lines < 0 {
            return Err(invalid(
                "tailLines",
                tail,
                "must be greater than or equal to 0",
            ));
        }
        options.tail = Some(lines.unsigned_abs());
    }
    if let Some(limit) = get("limitBytes") {
        let bytes = integer("limitBytes", limit)?;
        if bytes < 1 {
            return Err(invalid("limitBytes", limit, "must be greater than 0"));
        }
        options.limit_bytes = Some(bytes.unsigned_abs());
    }
    let since_seconds = get("sinceSeconds");
    let since_time = get("sinceTime");
    if since_seconds.is_some() && since_time.is_some() {
        return Err(BadQuery {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            reason: "at most one of `sinceTime` or `sinceSeconds` may be specified".to_string(),
        });
    }
    if let Some(seconds) = since_seconds {
        let value = integer("sinceSeconds", seconds)?;
        if value < 1 {
            return Err(invalid("sinceSeconds", seconds, "must be greater than 0"));
        }
        let back = k8s_openapi::jiff::SignedDuration::from_secs(value);
        options.since = now.checked_sub(back).ok();
    }
    if let Some(time) = since_time {
        let parsed: Timestamp = time.parse().map_err(|_| {
            bad(format!(
                "unable to decode query parameter sinceTime: {time:?}"
            ))
        })?;
        options.since = Some(parsed);
    }
    match get("stream") {
        None | Some("All") => {}
        Some(other) => {
            return Err(BadQuery {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                reason: format!(
                    "stream: Forbidden: may not be specified (the PodLogsQuerySplitStreams feature is off), got {other:?}"
                ),
            });
        }
    }
    Ok(LogQuery { options, previous })
}

/// `application/x-www-form-urlencoded` pairs, decoded.
pub(crate) fn form_urlencoded(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The runtime id of the container whose log is asked for, from the
/// pod's status, or why there is none (the kubelet's texts).
pub(crate) fn log_container_id(
    pod: &Pod,
    container: &str,
    previous: bool,
) -> Result<String, String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.as_ref();
    let statuses = status.into_iter().flat_map(|s| {
        [
            s.container_statuses.as_deref(),
            s.init_container_statuses.as_deref(),
            s.ephemeral_container_statuses.as_deref(),
        ]
        .into_iter()
        .flatten()
        .flatten()
    });
    let found: Option<&ContainerStatus> = statuses.into_iter().find(|s| s.name == container);
    let Some(found) = found else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    let state = found.state.as_ref();
    let last = found
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref());
    let last_id = last
        .and_then(|t| t.container_id.as_deref())
        .filter(|id| !id.is_empty());
    let terminated = state.and_then(|s| s.terminated.as_ref());
    let id = if previous {
        last_id.ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        })?
    } else if state.and_then(|s| s.running.as_ref()).is_some() {
        found.container_id.as_deref().unwrap_or_default()
    } else if let Some(terminated) = terminated {
        match terminated
            .container_id
            .as_deref()
            .filter(|id| !id.is_empty())
        {
            Some(id) => id,
            None => last_id.ok_or_else(|| {
                format!("container {container:?} in pod {pod_name:?} is terminated")
            })?,
        }
    } else if last.is_some() {
        last_id
            .ok_or_else(|| format!("container {container:?} in pod {pod_name:?} is terminated"))?
    } else if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
        let reason = waiting.reason.as_deref().unwrap_or_default();
        let why = match reason {
            "ErrImagePull" => "image can't be pulled".to_string(),
            "ImagePullBackOff" => "trying and failing to pull image".to_string(),
            other => other.to_string(),
        };
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: {why}"
        ));
    } else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
        ));
    };
    // `containerd://<id>`: the runtime's own id.
    Ok(id.split_once("://").map_or(id, |(_, id)| id).to_string())
}

/// Serves `/containerLogs/{namespace}/{pod}/{container}?query`.
pub(crate) async fn serve(
    state: &State,
    namespace: &str,
    pod_name: &str,
    container: &str,
    query: &str,
) -> Reply {
    let now = Timestamp::now();
    let query = match parse_query(query, now) {
        Ok(query) => query,
        Err(e) => {
            tracing::debug!(reason = %e.reason, pod = pod_name, "kubelet server: container log query refused");
            return reply::text(e.status, e.body());
        }
    };
    let Some(pod) = state.pods.bound_pod(namespace, pod_name) else {
        return reply::text(
            StatusCode::NOT_FOUND,
            format!("pod {pod_name:?} does not exist"),
        );
    };
    let in_spec = pod.spec.as_ref().is_some_and(|spec| {
        spec.containers.iter().any(|c| c.name == container)
            || spec
                .init_containers
                .iter()
                .flatten()
                .any(|c| c.name == container)
            || spec
                .ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == container)
    });
    if !in_spec {
        return reply::text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {pod_name:?}"),
        );
    }
    let id = match log_container_id(&pod, container, query.previous) {
        Ok(id) => id,
        Err(message) => return reply::text(StatusCode::BAD_REQUEST, message),
    };
    let status = match state.runtime.container_status(&id).await {
        Ok(status) => status,
        Err(e) => {
            return reply::text(
                StatusCode::BAD_REQUEST,
                format!("failed to get container status {id:?}: {e}"),
            );
        }
    };
    if status.log_path.is_empty() {
        return reply::text(
            StatusCode::BAD_REQUEST,
            format!("container {id:?} has no log file"),
        );
    }
    let path = std::path::PathBuf::from(&status.log_path);
    // Opened before the answer starts: a missing file is an error, not an
    // empty log.
    if let Err(e) = tokio::fs::metadata(&path).await {
        return reply::text(
            StatusCode::BAD_REQUEST,
            format!("failed to open log file {:?}: {e}", status.log_path),
        );
    }
    let (tx, rx) = mpsc::channel(16);
    let runtime = state.runtime.clone();
    let watcher = state.fs_watcher.clone();
    tokio::spawn(async move {
        let running = || {
            let runtime = runtime.clone();
            let id = id.clone();
            async move {
                runtime
                    .container_status(&id)
                    .await
                    .is_ok_and(|s| s.state == ContainerState::Running)
            }
        };
        if let Err(e) = read_logs(&path, query.options, &watcher, running, tx).await {
            tracing::warn!(error = %e, "container log");
        }
    });
    reply::streamed("text/plain", rx)
}

#[cfg(test)]
mod tests;
