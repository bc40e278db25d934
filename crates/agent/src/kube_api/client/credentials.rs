//! The API client, built again whenever its credentials change.
//!
//! The kubelet's own kubeconfig names a client certificate that the kubelet
//! rotates (`kubelet-client-current.pem`, a symlink swapped for a new file
//! long before the old certificate expires), and the API server checks the
//! certificate on every request, so a client built once fails with 401 for
//! good once the old one expires. Here the kubeconfig and every file it
//! names (client certificate and key, token file, CA) are watched with
//! inotify on their directories, looked at again every five minutes (as
//! client-go does) and on a 401, and when their bytes changed a new client
//! is built and published; the old one's connections close with it. Files
//! caught half-written leave the current client in place until the next
//! look. A token file's token is read and trimmed here (as client-go does),
//! so a trailing newline is no problem.
//!
//! In a pod (`in-cluster`), the client reads its token file and CA again by
//! itself; a 401 still builds a new client. An application's own client
//! (`KubeConfigSource::Client`) is used as it is, with the request
//! deadline around it, and never built again.
//!
//! The 401 is noticed in the client's own transport, so every request
//! asks for the look when refused: writes, watches and their listings,
//! ResourceSlice wipes, the identity check, pod and claim reads, Events.

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use inotify::WatchMask;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tower::util::MapResponseLayer;

use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Retry, Said};

use crate::fs_watch::{FsWatch, FsWatcher};
use crate::kube_api::client::deadline::DeadlineLayer;
use crate::kube_api::config::KubeConfigSource;
use crate::kube_api::error::KubeApiError;

/// How often the files are looked at even without an inotify event
/// (client-go's `CertCallbackRefreshDuration`).
pub(in crate::kube_api) const CREDENTIALS_RECHECK: Duration = Duration::from_secs(5 * 60);
/// How long after a file event the files are read, so that a rotation's
/// several steps (new file, symlink swap) are one reload.
const SETTLE: Duration = Duration::from_millis(50);
/// How soon a reload that failed (files caught half-written, or a file
/// gone) is tried again: a second at first, doubling to the recheck period,
/// so that a rotation caught midway is picked up at once and a file that
/// stays broken is not read every second.
const RELOAD_BACKOFF: Backoff =
    Backoff::new(Duration::from_secs(1), CREDENTIALS_RECHECK).with_jitter(0.1);
/// The token a pod's service account is given; the client reads it again
/// by itself, and a new client is built when a 401 comes after it changed.
const IN_CLUSTER_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// A client of the API server, and the server's URL.
#[derive(Clone)]
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// The API server, for status.
    pub server: String,
}

/// Builds the client for a source and keeps it current.
pub(crate) struct Credentials {
    source: KubeConfigSource,
    current: watch::Sender<Connection>,
    fingerprint: u64,
    /// Given to every client built: a 401 asks for a look through it.
    reload: Reload,
    reloads: mpsc::Receiver<()>,
    /// Every request's deadline, in each client built.
    request_timeout: Duration,
}

/// Asks for the credentials to be looked at again now (after a 401).
#[derive(Clone)]
pub(crate) struct Reload(mpsc::Sender<()>);

impl Reload {
    /// Asks for a look; several asks before it happens are one look.
    pub(crate) fn now(&self) {
        let _ = self.0.try_send(());
    }

    /// Asks for a look when `response` is a 401: the credentials were
    /// refused, whichever request it was.
    pub(crate) fn on_response<B>(&self, response: &http::Response<B>) {
        if response.status() == http::StatusCode::UNAUTHORIZED {
            tracing::debug!("the API server refused the credentials (401); looking at them again");
            self.now();
        }
    }
}

impl Credentials {
    /// The client for `source`, built from what the files hold now, each
    /// request but watches answered within `request_timeout`.
    pub(crate) async fn load(
        source: KubeConfigSource,
        request_timeout: Duration,
    ) -> Result<Self, KubeApiError> {
        let (reload, reloads) = reload_channel();
        let (connection, fingerprint) = build(&source, &reload, request_timeout).await?;
        Ok(Self {
            source,
            current: watch::channel(connection).0,
            fingerprint,
            reload,
            reloads,
            request_timeout,
        })
    }

    /// The current client, and every one built after it.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Connection> {
        self.current.subscribe()
    }

    /// Keeps the client current until `shutdown`; a 401 to any request
    /// asks for an immediate look.
    pub(crate) async fn run(mut self, watcher: FsWatcher, shutdown: CancellationToken) {
        let dirs = self.watched_dirs();
        let mask = WatchMask::CREATE
            | WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_TO
            | WatchMask::DELETE
            | WatchMask::ATTRIB;
        let mut events = match dirs.is_empty() {
            true => None,
            false => match watcher.watch_dirs(dirs.iter().map(PathBuf::as_path), mask) {
                Ok(watch) => Some(watch),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the credentials' files; looking at them every {CREDENTIALS_RECHECK:?} and on a 401");
                    None
                }
            },
        };
        let mut next_look = tokio::time::Instant::now() + CREDENTIALS_RECHECK;
        let mut reloads: Retry<KubeApiError> = Retry::default();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                Some(()) = self.reloads.recv() => {}
                () = FsWatch::fired(&mut events) => {
                    // The rest of a rotation comes within the settle.
                    tokio::time::sleep(SETTLE).await;
                    if let Some(events) = events.as_mut() {
                        events.drain();
                    }
                }
                () = tokio::time::sleep_until(next_look) => {}
            }
            let now = tokio::time::Instant::now();
            next_look = now + CREDENTIALS_RECHECK;
            match build(&self.source, &self.reload, self.request_timeout).await {
                Ok((connection, fingerprint)) => {
                    if reloads.succeeded() == Said::Recovered {
                        tracing::info!("API credentials can be read again");
                    }
                    if fingerprint != self.fingerprint {
                        tracing::info!(server = %connection.server, "API credentials changed; using the new ones");
                        self.fingerprint = fingerprint;
                        self.current.send_replace(connection);
                    }
                }
                Err(e) => {
                    let text = e.to_string();
                    if reloads.failed(e, &RELOAD_BACKOFF, now) == Said::NewError {
                        tracing::warn!(error = %text, "API credentials could not be read again; keeping the current ones");
                    }
                    if let Some(at) = reloads.due_at() {
                        next_look = at;
                    }
                }
            }
        }
    }

    /// The directories of the kubeconfig and of every file it names.
    fn watched_dirs(&self) -> BTreeSet<PathBuf> {
        let KubeConfigSource::Kubeconfig(path) = &self.source else {
            return BTreeSet::new();
        };
        let mut files = vec![path.clone()];
        if let Ok(kubeconfig) = kube::config::Kubeconfig::read_from(path) {
            files.extend(named_files(&kubeconfig));
        }
        files
            .iter()
            .filter_map(|f| f.parent().map(Path::to_path_buf))
            .collect()
    }
}

/// A channel to ask `credentials` for an immediate look, and its receiver.
fn reload_channel() -> (Reload, mpsc::Receiver<()>) {
    let (tx, rx) = mpsc::channel(1);
    (Reload(tx), rx)
}

/// The files `kubeconfig`'s current user and cluster name.
fn named_files(kubeconfig: &kube::config::Kubeconfig) -> Vec<PathBuf> {
    let context = kubeconfig
        .current_context
        .as_ref()
        .and_then(|name| kubeconfig.contexts.iter().find(|c| &c.name == name))
        .and_then(|c| c.context.as_ref());
    let mut files = Vec::new();
    if let Some(user) = context.and_then(|c| c.user.as_ref()) {
        let auth = kubeconfig
            .auth_infos
            .iter()
            .find(|a| &a.name == user)
            .and_then(|a| a.auth_info.as_ref());
        if let Some(auth) = auth {
            files.extend(auth.client_certificate.iter().map(PathBuf::from));
            files.extend(auth.client_key.iter().map(PathBuf::from));
            files.extend(auth.token_file.iter().map(PathBuf::from));
        }
    }
    if let Some(cluster) = context.map(|c| &c.cluster) {
        let ca = kubeconfig
            .clusters
            .iter()
            .find(|c| &c.name == cluster)
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.certificate_authority.as_ref());
        files.extend(ca.map(PathBuf::from));
    }
    files
}

/// A client for `source` from what its files hold now, asking `reload` for
/// a look whenever it is answered 401, each request but watches answered
/// within `request_timeout`, and a fingerprint of those bytes.
async fn build(
    source: &KubeConfigSource,
    reload: &Reload,
    request_timeout: Duration,
) -> Result<(Connection, u64), KubeApiError> {
    let mut hasher = DefaultHasher::new();
    let config = match source {
        KubeConfigSource::Kubeconfig(path) => {
            let kubeconfig_error = |source| KubeApiError::Kubeconfig {
                path: path.clone(),
                source,
            };
            let mut kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
            let file_error = |file: &Path, source| KubeApiError::CredentialFile {
                kubeconfig: path.clone(),
                path: file.to_path_buf(),
                source,
            };
            std::fs::read(path)
                .map_err(|e| file_error(path, e))?
                .hash(&mut hasher);
            for file in named_files(&kubeconfig) {
                std::fs::read(&file)
                    .map_err(|e| file_error(&file, e))?
                    .hash(&mut hasher);
            }
            // A token file's token, trimmed, as client-go reads it.
            for auth in kubeconfig
                .auth_infos
                .iter_mut()
                .filter_map(|a| a.auth_info.as_mut())
            {
                if let Some(file) = auth.token_file.take() {
                    let token = std::fs::read_to_string(&file)
                        .map_err(|e| file_error(Path::new(&file), e))?;
                    auth.token = Some(token.trim().to_string().into());
                }
            }
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(kubeconfig_error)?
        }
        KubeConfigSource::InCluster => {
            std::fs::read(IN_CLUSTER_TOKEN)
                .unwrap_or_default()
                .hash(&mut hasher);
            kube::Config::incluster().map_err(KubeApiError::InCluster)?
        }
        KubeConfigSource::Client(client) => {
            return Ok((application_client(client, request_timeout), 0));
        }
    };
    let server = config.cluster_url.to_string();
    let reload = reload.clone();
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(KubeApiError::Client)?
        .with_layer(&MapResponseLayer::new(move |response| {
            reload.on_response(&response);
            response
        }))
        .with_layer(&DeadlineLayer::new(request_timeout))
        .build();
    Ok((Connection { client, server }, hasher.finish()))
}

/// The application's `client` with `request_timeout` on every request but
/// watches, as the clients built here have it.
fn application_client(client: &kube::Client, request_timeout: Duration) -> Connection {
    let inner = client.clone();
    let send = tower::service_fn(move |request| {
        let inner = inner.clone();
        async move { inner.send(request).await }
    });
    let timed = tower::Layer::layer(&DeadlineLayer::new(request_timeout), send);
    Connection {
        client: kube::Client::new(timed, client.default_namespace()),
        server: "the application's client".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// How the test server answers.
    #[derive(Clone, Copy)]
    enum Answer {
        /// Headers and a whole body, with this status line.
        Whole(&'static str),
        /// Nothing at all.
        Silent,
        /// `200 OK` headers and part of the body, then nothing.
        Midway,
    }

    /// Enough time for any answer on a loopback, and short for a test.
    const LIMIT: Duration = Duration::from_millis(300);

    /// A server that answers every request as `answer` says, and the
    /// kubeconfig of a client of it.
    async fn server_answering(answer: Answer, dir: &Path) -> PathBuf {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":0}"#;
                    let (status, sent) = match answer {
                        Answer::Whole(status) => (status, body),
                        Answer::Midway => ("200 OK", &body[..10]),
                        Answer::Silent => {
                            std::future::pending::<()>().await;
                            return;
                        }
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{sent}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                    std::future::pending::<()>().await;
                });
            }
        });
        let kubeconfig = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
        );
        std::fs::write(&kubeconfig, text).unwrap();
        kubeconfig
    }

    async fn client_of(answer: Answer, dir: &Path) -> (Credentials, kube::Client) {
        let kubeconfig = server_answering(answer, dir).await;
        let credentials = Credentials::load(KubeConfigSource::Kubeconfig(kubeconfig), LIMIT)
            .await
            .unwrap();
        let client = credentials.subscribe().borrow().client.clone();
        (credentials, client)
    }

    #[tokio::test]
    async fn a_request_never_answered_fails_at_the_clients_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let (_credentials, client) = client_of(Answer::Silent, dir.path()).await;
        let error = client.apiserver_version().await.unwrap_err();
        assert_eq!(super::super::deadline::passed_deadline(&error), Some(LIMIT));
    }

    #[tokio::test]
    async fn a_body_that_stops_midway_fails_at_the_clients_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let (_credentials, client) = client_of(Answer::Midway, dir.path()).await;
        let error = client.apiserver_version().await.unwrap_err();
        assert_eq!(super::super::deadline::passed_deadline(&error), Some(LIMIT));
    }

    #[tokio::test]
    async fn any_request_answered_401_asks_for_the_credentials_again() {
        let dir = tempfile::tempdir().unwrap();
        let (mut credentials, client) =
            client_of(Answer::Whole("401 Unauthorized"), dir.path()).await;
        // A read no write path makes: the client's own transport notices.
        assert!(client.apiserver_version().await.is_err());
        assert!(
            credentials.reloads.try_recv().is_ok(),
            "the 401 asked for a look"
        );
    }

    #[tokio::test]
    async fn other_refusals_leave_the_credentials_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (mut credentials, client) = client_of(Answer::Whole("403 Forbidden"), dir.path()).await;
        assert!(client.apiserver_version().await.is_err());
        assert!(credentials.reloads.try_recv().is_err());
    }
}
