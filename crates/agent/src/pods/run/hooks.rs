//! A container's lifecycle hook (`postStart` or `preStop`) as the
//! kubelet's handler runner runs it: an `exec` command run in the
//! container through the runtime's `ExecSync` with no timeout of its own
//! (not `$(VAR)`-expanded, unlike a probe's), an `httpGet` sent to the
//! pod's address unless it names a host (any answer is a success, whatever
//! its status; only no answer fails), or a `sleep`. A failure is the
//! kubelet's message, which names the hook, the container and the pod; the
//! Events of a failed hook never carry it (it may hold secrets).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};
use tokio_util::sync::CancellationToken;

use crate::common::go_quote::go_quote;
use crate::pods::kube_events::PodEvents;
use crate::pods::pod::PodRef;
use crate::pods::run::lifecycle_metrics::LifecycleMetrics;
use crate::pods::run::probes::http::{FetchError, HOOK_AGENT, HttpGet, PLAIN_ANSWER, http_fetch};
use crate::pods::run::probes::spec::resolve_port;
use crate::pods::run::probes::verdict::join_host_port;
use crate::runtime::ContainerRuntime;

/// The reason of the Event of a `postStart` hook that failed.
pub(crate) const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
/// The reason a container waits with after its `postStart` hook failed
/// (the kubelet's `ErrPostStartHook`).
pub(crate) const POST_START_HOOK_ERROR: &str = "PostStartHookError";

/// What a hook does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hook {
    /// A command run in the container.
    Exec { command: Vec<String> },
    /// An HTTP GET; `host` empty: the pod's address.
    Http {
        https: bool,
        host: String,
        port: Result<u16, String>,
        path: String,
        headers: Vec<(String, String)>,
    },
    /// A pause of this many seconds.
    Sleep { seconds: i64 },
    /// None the kubelet runs (none set, or the deprecated `tcpSocket`).
    Invalid,
}

impl Hook {
    /// The hook `handler` of `container`.
    pub(crate) fn of(handler: &LifecycleHandler, container: &Container) -> Self {
        if let Some(exec) = &handler.exec {
            return Self::Exec {
                command: exec.command.clone().unwrap_or_default(),
            };
        }
        if let Some(http) = &handler.http_get {
            return Self::Http {
                https: http
                    .scheme
                    .as_deref()
                    .is_some_and(|s| s.eq_ignore_ascii_case("https")),
                host: http.host.clone().unwrap_or_default(),
                port: resolve_port(&http.port, container),
                path: http.path.clone().unwrap_or_default(),
                headers: http
                    .http_headers
                    .iter()
                    .flatten()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            };
        }
        if let Some(sleep) = &handler.sleep {
            return Self::Sleep {
                seconds: sleep.seconds,
            };
        }
        Self::Invalid
    }
}

/// Where a hook runs.
pub(crate) struct HookTarget<'a> {
    pub(crate) runtime: &'a dyn ContainerRuntime,
    /// The container's runtime id.
    pub(crate) container_id: &'a str,
    /// The container's name.
    pub(crate) container: &'a str,
    pub(crate) pod: &'a PodRef,
    /// The pod's address, when it has one.
    pub(crate) pod_ip: Option<&'a str>,
    /// Cancelled when the container is gone: a sleep ends early.
    pub(crate) gone: &'a CancellationToken,
    /// Where an `httpGet` hook's fall back to HTTP is told.
    pub(crate) events: Option<&'a PodEvents>,
    /// Where a fall back to HTTP and a `sleep` cut short are counted.
    pub(crate) metrics: Option<&'a LifecycleMetrics>,
}

/// Runs `hook` on `target`; a failure is the kubelet's message.
pub(crate) async fn run_hook(hook: &Hook, target: &HookTarget<'_>) -> Result<(), String> {
    let name = go_quote(target.container);
    let pod = go_quote(&format!(
        "{}_{}({})",
        target.pod.name, target.pod.namespace, target.pod.uid
    ));
    match hook {
        Hook::Exec { command } => {
            let (error, output) = match target
                .runtime
                .exec_sync(target.container_id, command, None)
                .await
            {
                Ok(out) if out.exit_code == 0 => return Ok(()),
                Ok(out) => {
                    let error = format!(
                        "command '{}' exited with {}: {}",
                        command.join(" "),
                        out.exit_code,
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let mut output = out.stdout;
                    output.extend_from_slice(&out.stderr);
                    (error, String::from_utf8_lossy(&output).into_owned())
                }
                Err(e) => (e.to_string(), String::new()),
            };
            Err(format!(
                "Exec lifecycle hook ([{}]) for Container {name} in Pod {pod} failed - error: {error}, message: {}",
                command.join(" "),
                go_quote(&output)
            ))
        }
        Hook::Http {
            https,
            host,
            port,
            path,
            headers,
        } => http_hook(*https, host, port, path, headers, target)
            .await
            .map_err(|error| {
                format!(
                    "HTTP lifecycle hook ({path}) for Container {name} in Pod {pod} failed - error: {error}"
                )
            }),
        Hook::Sleep { seconds } => {
            let pause = Duration::from_secs(u64::try_from(*seconds).unwrap_or(0));
            tokio::select! {
                () = tokio::time::sleep(pause) => Ok(()),
                () = target.gone.cancelled() => {
                    if let Some(metrics) = target.metrics {
                        metrics.sleep_cut_short();
                    }
                    Err(format!(
                        "Sleep lifecycle hook ({seconds}) for Container {name} in Pod {pod} failed - error: container terminated before sleep hook finished"
                    ))
                }
            }
        }
        Hook::Invalid => Err("Cannot run handler: invalid handler".to_string()),
    }
}

/// The GET of an `httpGet` hook; an error in Go's words.
async fn http_hook(
    https: bool,
    host: &str,
    port: &Result<u16, String>,
    path: &str,
    headers: &[(String, String)],
    target: &HookTarget<'_>,
) -> Result<(), String> {
    let host = if host.is_empty() {
        target
            .pod_ip
            .ok_or("failed to find networking container")?
            .to_string()
    } else {
        host.to_string()
    };
    let port = port.clone()?;
    let get = HttpGet {
        https,
        host,
        port,
        path,
        headers,
        agent: HOOK_AGENT,
    };
    match http_fetch(&get).await {
        Ok(answer) => {
            tracing::debug!(
                container = target.container,
                status = answer.status,
                "HTTP lifecycle hook answered"
            );
            Ok(())
        }
        // The body is only drained.
        Err(FetchError::Body(_)) => Ok(()),
        Err(FetchError::Request(e)) if https && e.ends_with(PLAIN_ANSWER) => {
            // Answered in plain HTTP: asked again over HTTP, without the
            // credentials, as the kubelet's hook runner does.
            let headers: Vec<(String, String)> = headers
                .iter()
                .filter(|(name, _)| !name.eq_ignore_ascii_case("authorization"))
                .cloned()
                .collect();
            let plain = HttpGet {
                https: false,
                headers: &headers,
                ..get
            };
            match http_fetch(&plain).await {
                Ok(_) | Err(FetchError::Body(_)) => {
                    tracing::warn!(
                        container = target.container,
                        "an HTTPS lifecycle hook got an HTTP answer; asked again over HTTP"
                    );
                    if let Some(metrics) = target.metrics {
                        metrics.http_fell_back();
                    }
                    if let Some(events) = target.events {
                        let events = events.clone();
                        let pod = target.pod.clone();
                        let message = format!(
                            "request to HTTPS lifecycle hook {} got HTTP response, retry with HTTP succeeded",
                            join_host_port(&plain.host, plain.port)
                        );
                        tokio::spawn(async move {
                            events
                                .warning(&pod, "LifecycleHTTPFallback", &message)
                                .await;
                        });
                    }
                    Ok(())
                }
                Err(FetchError::Request(_)) => Err(e),
            }
        }
        Err(FetchError::Request(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use crate::runtime::SimulatedRuntime;

    fn container(value: serde_json::Value) -> Container {
        serde_json::from_value(value).unwrap()
    }

    fn pod_ref() -> PodRef {
        PodRef {
            namespace: "default".into(),
            name: "web".into(),
            uid: "u1".into(),
        }
    }

    #[test]
    fn a_hook_is_read_as_the_kubelet_reads_it() {
        let c = container(json!({
            "name": "app",
            "ports": [{"name": "web", "containerPort": 8080}],
            "lifecycle": {
                "postStart": {"exec": {"command": ["sh", "-c", "echo $(HOME)"]}},
                "preStop": {"httpGet": {"port": "web", "path": "/drain", "httpHeaders": [{"name": "X", "value": "1"}]}},
            },
        }));
        let lifecycle = c.lifecycle.clone().unwrap();
        assert_eq!(
            Hook::of(lifecycle.post_start.as_ref().unwrap(), &c),
            Hook::Exec {
                command: vec!["sh".into(), "-c".into(), "echo $(HOME)".into()]
            }
        );
        assert_eq!(
            Hook::of(lifecycle.pre_stop.as_ref().unwrap(), &c),
            Hook::Http {
                https: false,
                host: String::new(),
                port: Ok(8080),
                path: "/drain".into(),
                headers: vec![("X".into(), "1".into())],
            }
        );
        let sleep: LifecycleHandler =
            serde_json::from_value(json!({"sleep": {"seconds": 3}})).unwrap();
        assert_eq!(Hook::of(&sleep, &c), Hook::Sleep { seconds: 3 });
        let tcp: LifecycleHandler =
            serde_json::from_value(json!({"tcpSocket": {"port": 80}})).unwrap();
        assert_eq!(Hook::of(&tcp, &c), Hook::Invalid);
    }

    #[tokio::test]
    async fn an_http_hook_succeeds_on_any_answer_and_fails_in_gos_words_without_one() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = vec![0; 4096];
            let n = stream.read(&mut buf).await.unwrap();
            stream
                .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        let runtime = SimulatedRuntime::new();
        let pod = pod_ref();
        let gone = CancellationToken::new();
        let target = HookTarget {
            runtime: &runtime,
            container_id: "c1",
            container: "app",
            pod: &pod,
            pod_ip: Some("127.0.0.1"),
            gone: &gone,
            events: None,
            metrics: None,
        };
        let hook = |port: u16| Hook::Http {
            https: false,
            host: String::new(),
            port: Ok(port),
            path: "/drain".into(),
            headers: Vec::new(),
        };
        assert_eq!(run_hook(&hook(port), &target).await, Ok(()));
        let request = server.await.unwrap();
        assert!(request.starts_with("GET /drain HTTP/1.1\r\n"), "{request}");
        assert!(
            request
                .to_ascii_lowercase()
                .contains("user-agent: kube-lifecycle/1.37"),
            "{request}"
        );
        // Nothing listens there now.
        let error = run_hook(&hook(port), &target).await.unwrap_err();
        assert_eq!(
            error,
            format!(
                "HTTP lifecycle hook (/drain) for Container \"app\" in Pod \"web_default(u1)\" failed - error: Get \"http://127.0.0.1:{port}/drain\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            )
        );
        let no_ip = HookTarget {
            pod_ip: None,
            ..target
        };
        assert_eq!(
            run_hook(&hook(port), &no_ip).await.unwrap_err(),
            "HTTP lifecycle hook (/drain) for Container \"app\" in Pod \"web_default(u1)\" failed - error: failed to find networking container"
        );
    }

    #[tokio::test]
    async fn an_https_hook_answered_in_plain_http_is_asked_again_over_http_without_credentials() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let mut requests = Vec::new();
            for _ in 0..2 {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buf = vec![0; 4096];
                let n = stream.read(&mut buf).await.unwrap();
                requests.push(buf[..n].to_vec());
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await
                    .unwrap();
            }
            requests
        });
        let runtime = SimulatedRuntime::new();
        let pod = pod_ref();
        let gone = CancellationToken::new();
        let metrics = LifecycleMetrics::default();
        let target = HookTarget {
            runtime: &runtime,
            container_id: "c1",
            container: "app",
            pod: &pod,
            pod_ip: Some("127.0.0.1"),
            gone: &gone,
            events: None,
            metrics: Some(&metrics),
        };
        let hook = Hook::Http {
            https: true,
            host: String::new(),
            port: Ok(port),
            path: "/drain".into(),
            headers: vec![("Authorization".into(), "Bearer secret".into())],
        };
        assert_eq!(run_hook(&hook, &target).await, Ok(()));
        let requests = server.await.unwrap();
        assert_eq!(requests[0][0], 0x16, "a TLS handshake first");
        let plain = String::from_utf8_lossy(&requests[1]).to_ascii_lowercase();
        assert!(plain.starts_with("get /drain http/1.1\r\n"), "{plain}");
        assert!(!plain.contains("authorization"), "{plain}");
        assert_eq!(metrics.http_fallbacks(), 1);
    }

    #[tokio::test]
    async fn a_sleep_ends_early_when_its_container_is_gone() {
        let runtime = SimulatedRuntime::new();
        let pod = pod_ref();
        let gone = CancellationToken::new();
        gone.cancel();
        let metrics = LifecycleMetrics::default();
        let target = HookTarget {
            runtime: &runtime,
            container_id: "c1",
            container: "app",
            pod: &pod,
            pod_ip: None,
            gone: &gone,
            events: None,
            metrics: Some(&metrics),
        };
        assert_eq!(
            run_hook(&Hook::Sleep { seconds: 3600 }, &target)
                .await
                .unwrap_err(),
            "Sleep lifecycle hook (3600) for Container \"app\" in Pod \"web_default(u1)\" failed - error: container terminated before sleep hook finished"
        );
        assert_eq!(metrics.sleeps_cut_short(), 1);
    }
}
