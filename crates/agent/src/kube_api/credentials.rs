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
//! itself; a 401 still builds a new client.

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use inotify::WatchMask;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::config::KubeConfigSource;
use super::error::KubeApiError;
use crate::fs_watch::{FsWatch, FsWatcher};

/// How often the files are looked at even without an inotify event
/// (client-go's `CertCallbackRefreshDuration`).
pub(super) const CREDENTIALS_RECHECK: Duration = Duration::from_secs(5 * 60);
/// How long after a file event the files are read, so that a rotation's
/// several steps (new file, symlink swap) are one reload.
const SETTLE: Duration = Duration::from_millis(50);
/// How soon a reload that failed (files caught half-written) is tried
/// again.
const RETRY: Duration = Duration::from_secs(1);
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
}

/// Asks for the credentials to be looked at again now (after a 401).
#[derive(Clone)]
pub(crate) struct Reload(mpsc::Sender<()>);

impl Reload {
    /// Asks for a look; several asks before it happens are one look.
    pub(crate) fn now(&self) {
        let _ = self.0.try_send(());
    }
}

impl Credentials {
    /// The client for `source`, built from what the files hold now.
    pub(crate) async fn load(source: KubeConfigSource) -> Result<Self, KubeApiError> {
        let (connection, fingerprint) = build(&source).await?;
        Ok(Self {
            source,
            current: watch::channel(connection).0,
            fingerprint,
        })
    }

    /// The current client, and every one built after it.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Connection> {
        self.current.subscribe()
    }

    /// Keeps the client current until `shutdown`; `reload` asks for an
    /// immediate look.
    pub(crate) async fn run(
        mut self,
        watcher: FsWatcher,
        mut reload: mpsc::Receiver<()>,
        shutdown: CancellationToken,
    ) {
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
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                Some(()) = reload.recv() => {}
                () = FsWatch::fired(&mut events) => {
                    // The rest of a rotation comes within the settle.
                    tokio::time::sleep(SETTLE).await;
                    if let Some(events) = events.as_mut() {
                        events.drain();
                    }
                }
                () = tokio::time::sleep_until(next_look) => {}
            }
            next_look = tokio::time::Instant::now() + CREDENTIALS_RECHECK;
            match build(&self.source).await {
                Ok((_, fingerprint)) if fingerprint == self.fingerprint => {}
                Ok((connection, fingerprint)) => {
                    tracing::info!(server = %connection.server, "API credentials changed; using the new ones");
                    self.fingerprint = fingerprint;
                    self.current.send_replace(connection);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "API credentials could not be read again; keeping the current ones");
                    next_look = tokio::time::Instant::now() + RETRY;
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
pub(crate) fn reload_channel() -> (Reload, mpsc::Receiver<()>) {
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

/// A client for `source` from what its files hold now, and a fingerprint
/// of those bytes.
async fn build(source: &KubeConfigSource) -> Result<(Connection, u64), KubeApiError> {
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
    };
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(KubeApiError::Client)?;
    Ok((Connection { client, server }, hasher.finish()))
}
