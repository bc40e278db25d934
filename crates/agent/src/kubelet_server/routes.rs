//! The endpoints, by path, once a request is authenticated and
//! authorized: `/healthz` (and `/healthz/ping`, `/log`, `/syncloop`),
//! `/pods` (the pods bound to the node, a `v1` `PodList`), and the
//! debugging handlers: `/containerLogs`, `/exec`, `/attach`,
//! `/portForward`, `/run` (405 when they are off). Anything else is the
//! kubelet's `404 page not found`.

use http::{Method, Request, StatusCode};
use hyper::body::Incoming;

use super::container_logs;
use super::reply::{self, Reply};
use super::server::State;
use super::streaming::{self, Session};

/// The answer to `request`.
pub(crate) async fn route(state: &State, request: Request<Incoming>) -> Reply {
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = request.method().clone();
    let read_only = method == Method::GET || method == Method::HEAD;
    match segments.as_slice() {
        ["healthz"] | ["healthz", "ping" | "log" | "syncloop"] => {
            if read_only {
                reply::text(StatusCode::OK, "ok")
            } else {
                not_allowed()
            }
        }
        ["pods"] | ["pods", ""] => {
            if read_only {
                pods(state)
            } else {
                not_allowed()
            }
        }
        [endpoint, rest @ ..]
            if matches!(
                *endpoint,
                "containerLogs" | "exec" | "attach" | "portForward" | "run"
            ) =>
        {
            if !state.debugging_handlers {
                return reply::text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "Debug endpoints are disabled.",
                );
            }
            match (*endpoint, &method) {
                ("containerLogs", &Method::GET) => match rest {
                    [namespace, pod, container] => {
                        container_logs::serve(state, namespace, pod, container, &query).await
                    }
                    _ => not_found(),
                },
                ("exec", &Method::GET | &Method::POST) => {
                    let rest: Vec<&str> = rest.to_vec();
                    streaming::serve(state, Session::Exec, &rest, request).await
                }
                ("attach", &Method::GET | &Method::POST) => {
                    let rest: Vec<&str> = rest.to_vec();
                    streaming::serve(state, Session::Attach, &rest, request).await
                }
                ("portForward", &Method::GET | &Method::POST) => {
                    let rest: Vec<&str> = rest.to_vec();
                    streaming::serve(state, Session::PortForward, &rest, request).await
                }
                ("run", &Method::POST) => streaming::run(state, rest, &query).await,
                _ => not_allowed(),
            }
        }
        _ => not_found(),
    }
}

fn not_found() -> Reply {
    reply::http_error(StatusCode::NOT_FOUND, "404 page not found")
}

fn not_allowed() -> Reply {
    reply::text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed")
}

/// The pods bound to the node, as a `v1` `PodList`.
fn pods(state: &State) -> Reply {
    let mut items = state.pods.bound_pods();
    items.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let list = serde_json::json!({
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items.iter().map(|p| p.as_ref()).collect::<Vec<_>>(),
    });
    match serde_json::to_vec(&list) {
        Ok(bytes) => reply::json(StatusCode::OK, bytes),
        Err(e) => reply::text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
