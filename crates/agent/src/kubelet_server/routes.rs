//! The endpoints, by path, once a request is authenticated and
//! authorized: `/healthz` (and `/healthz/ping`, `/log`, `/syncloop`),
//! `/pods` (the pods bound to the node, a `v1` `PodList`), `/metrics`
//! (the agent's own), `/metrics/resource` (what the metrics server
//! scrapes), `/metrics/probes` (the probes' results and durations), and the
//! debugging handlers: `/containerLogs`, `/exec`, `/attach`,
//! `/portForward`, `/run` (405 when they are off).
//!
//! Which paths the kubelet's server has at all is decided before any
//! authentication, as its mux decides it: a path no handler of the
//! kubelet is registered for is Go's `404 page not found` to anyone
//! ([`registered`]); a path under one of its go-restful services that no
//! route of it matches is go-restful's `404: Page Not Found`, once the
//! request passed the filters.

use http::{Method, Request, StatusCode};
use hyper::body::Incoming;

use super::container_logs;
use super::metrics::{agent_metrics, resource_metrics};
use super::reply::{self, Reply};
use super::state::State;
use super::streaming::{self, Session};

/// The health checks and metrics, on the kubelet's port and its read-only
/// port alike.
pub(super) const HEALTH_AND_METRICS: &[&str] = &[
    "/healthz",
    "/healthz/ping",
    "/healthz/log",
    "/healthz/syncloop",
    "/metrics",
    "/metrics/cadvisor",
    "/metrics/resource",
    "/metrics/probes",
    "/metrics/slis",
];

/// The other exact paths the kubelet's mux has handlers for (configz,
/// the verbosity flag), installed with its debugging handlers.
const DEBUG_HANDLERS: &[&str] = &["/configz", "/flagz", "/statusz", "/debug/flags/v"];

/// The roots of the kubelet's go-restful services: each is registered as
/// itself and as itself with `/`, the latter matching everything below
/// it.
const SERVICES: &[&str] = &[
    "/pods",
    "/run",
    "/exec",
    "/attach",
    "/portForward",
    "/containerLogs",
];

/// The kubelet's handler subtrees registered only with their `/`: the
/// root without it is redirected there.
const SUBTREES: &[&str] = &[
    "/stats",
    "/logs",
    "/runningpods",
    "/checkpoint",
    "/debug/pprof",
];

/// What the kubelet's mux does with a path, before any filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mux {
    /// A handler of the kubelet's has it: through the filters.
    Handled,
    /// The root of a subtree without its `/`: redirected to it.
    Redirect,
    /// Nothing has it: 404 to anyone.
    Unknown,
}

/// Which of [`Mux`] `path` is.
pub(crate) fn mux(path: &str) -> Mux {
    let below = |root: &str| path.strip_prefix(root).is_some_and(|r| r.starts_with('/'));
    if HEALTH_AND_METRICS.contains(&path)
        || DEBUG_HANDLERS.contains(&path)
        || SERVICES.iter().any(|root| path == *root || below(root))
        || SUBTREES.iter().any(|root| below(root))
    {
        Mux::Handled
    } else if SUBTREES.contains(&path) {
        Mux::Redirect
    } else {
        Mux::Unknown
    }
}

/// Go's redirect of a subtree's root to the subtree (307, and for a GET
/// its short HTML note).
pub(crate) fn redirect(method: &Method, path: &str, query: Option<&str>) -> Reply {
    let location = match query {
        Some(query) => format!("{path}/?{query}"),
        None => format!("{path}/"),
    };
    let body = if method == Method::GET {
        format!("<a href=\"{location}\">Temporary Redirect</a>.\n\n")
    } else {
        String::new()
    };
    let mut reply = reply::bytes(
        StatusCode::TEMPORARY_REDIRECT,
        "text/html; charset=utf-8",
        body.into_bytes(),
    );
    if let Ok(value) = http::HeaderValue::from_str(&location) {
        reply.headers_mut().insert(http::header::LOCATION, value);
    }
    reply
}

/// The answer to `request`.
pub(crate) async fn route(state: &State, request: Request<Incoming>) -> Reply {
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = request.method().clone();
    let read_only = method == Method::GET || method == Method::HEAD;
    match segments.as_slice() {
        // The health checks answer any method.
        ["healthz"] | ["healthz", "ping" | "log" | "syncloop"] => reply::text(StatusCode::OK, "ok"),
        ["metrics"] => agent_metrics::serve(state),
        ["metrics", "resource"] => resource_metrics::serve(state).await,
        ["metrics", "probes"] => agent_metrics::serve_probes(state),
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
                // The kubelet's `http.Error`: with a newline.
                return reply::http_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "Debug endpoints are disabled.",
                );
            }
            match (*endpoint, &method) {
                ("containerLogs", &Method::GET) => match rest {
                    [namespace, pod, container] => {
                        container_logs::serve(state, namespace, pod, container, &query).await
                    }
                    _ => no_route(),
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
        _ => no_route(),
    }
}

/// Go's answer to a path no handler is registered for.
pub(crate) fn not_found() -> Reply {
    reply::http_error(StatusCode::NOT_FOUND, "404 page not found")
}

/// go-restful's answer to a path of a service that none of its routes
/// matches.
fn no_route() -> Reply {
    reply::text(StatusCode::NOT_FOUND, "404: Page Not Found")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mux_knows_the_kubelets_paths_and_redirects_a_subtrees_root() {
        for handled in [
            "/healthz",
            "/healthz/ping",
            "/pods",
            "/pods/x",
            "/exec",
            "/containerLogs/ns/p/c",
            "/stats/summary",
            "/logs/",
            "/metrics/resource",
            "/flagz",
        ] {
            assert_eq!(mux(handled), Mux::Handled, "{handled}");
        }
        for redirected in ["/stats", "/logs", "/runningpods", "/checkpoint"] {
            assert_eq!(mux(redirected), Mux::Redirect, "{redirected}");
        }
        for unknown in ["/", "/healthz/nothing", "/podsx", "/metrics/", "/configz/"] {
            assert_eq!(mux(unknown), Mux::Unknown, "{unknown}");
        }
    }

    #[test]
    fn a_redirect_keeps_the_query_and_has_a_note_only_for_a_get() {
        let get = redirect(&Method::GET, "/stats", Some("x=1"));
        assert_eq!(get.status(), StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(get.headers()[http::header::LOCATION], "/stats/?x=1");
        let post = redirect(&Method::POST, "/logs", None);
        assert_eq!(post.headers()[http::header::LOCATION], "/logs/");
    }
}
