//! The static pod path followed as the kubelet's file source follows it:
//! read at start, again when inotify says a manifest changed, and every
//! `fileCheckFrequency` (20 s by default) whatever it says (a watch can
//! miss what happens while it is made again). Each read that changes what
//! the path holds publishes the whole set; a pod keeps the time it was
//! first seen (`kubernetes.io/config.seen`) while its UID stays, as the
//! kubelet's pod config keeps it. A refused manifest is said once, at
//! warning, until its reason changes. A manifest refused on a read that
//! inotify woke (a file caught half written) keeps the pod it held until
//! the next periodic read, as the kubelet's watch keeps it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use inotify::WatchMask;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::manifest::{DUPLICATE, Manifests, StaticPod, read};
use crate::fs_watch::{FsWatch, FsWatcher};
use crate::pods::admit::spec::CONFIG_SEEN_ANNOTATION;

/// The kubelet's `fileCheckFrequency` default.
pub const DEFAULT_FILE_CHECK_FREQUENCY: Duration = Duration::from_secs(20);

/// The static pods the path holds, by UID; `None` until it was read once.
pub(crate) type StaticPods = Option<Arc<BTreeMap<String, Arc<Pod>>>>;

/// Where static pods come from, and how often the path is read again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticPodsConfig {
    /// A manifest, or a directory of them (`staticPodPath`).
    pub path: PathBuf,
    /// How often the path is read again (`fileCheckFrequency`).
    pub check_frequency: Duration,
}

/// Follows `config`'s path for node `node`, publishing on `pods`, until
/// `shutdown`.
pub(crate) async fn follow(
    config: StaticPodsConfig,
    node: String,
    fs: FsWatcher,
    pods: watch::Sender<StaticPods>,
    shutdown: CancellationToken,
) {
    let mut follower = Follower {
        config,
        node,
        seen: HashMap::new(),
        said: HashMap::new(),
        by_file: HashMap::new(),
    };
    tracing::info!(path = %follower.config.path.display(), "following the static pod path");
    let mut watch = None;
    let mut periodic = true;
    loop {
        if watch.is_none() {
            watch = watch_of(&fs, &follower.config.path);
        }
        if let Some(w) = &mut watch {
            w.drain();
        }
        if let Some(set) = follower.look(periodic) {
            pods.send_if_modified(|current| {
                if current.as_deref() == Some(&set) {
                    return false;
                }
                *current = Some(Arc::new(set));
                true
            });
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = FsWatch::fired(&mut watch) => periodic = false,
            () = tokio::time::sleep(follower.config.check_frequency) => periodic = true,
        }
    }
}

/// A watch of what changes `path`'s manifests: the directory's entries, or
/// the one file's name in its directory. `None` while there is nothing to
/// watch (the path, or its directory, is missing); the next read tries
/// again.
fn watch_of(fs: &FsWatcher, path: &Path) -> Option<FsWatch> {
    let mask = WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF;
    if path.is_dir() {
        return fs.watch(path, None, mask).ok();
    }
    let dir = path.parent()?;
    fs.watch(dir, path.file_name(), mask).ok()
}

struct Follower {
    config: StaticPodsConfig,
    node: String,
    /// When each UID was first seen, as the annotation says it.
    seen: HashMap<String, String>,
    /// Each refused manifest's reason last said.
    said: HashMap<PathBuf, String>,
    /// Each file's pod as last read.
    by_file: HashMap<PathBuf, Pod>,
}

impl Follower {
    /// The pods the path holds now; `None` when it cannot be read (what
    /// was read before stays). Unless `periodic`, a refused manifest keeps
    /// the pod it held.
    fn look(&mut self, periodic: bool) -> Option<BTreeMap<String, Arc<Pod>>> {
        let Manifests { mut pods, refused } = match read(&self.config.path, &self.node) {
            Ok(manifests) => manifests,
            Err(e) => {
                tracing::warn!(path = %self.config.path.display(), error = %e, "cannot read the static pod path; reading it again later");
                return None;
            }
        };
        let mut reasons = HashMap::new();
        for refused in refused {
            if self.said.get(&refused.file) != Some(&refused.error) {
                tracing::warn!(path = %refused.file.display(), error = %refused.error, "a static pod manifest is refused");
            }
            if !periodic
                && !refused.error.starts_with(DUPLICATE)
                && let Some(pod) = self.by_file.get(&refused.file)
            {
                pods.push(StaticPod {
                    file: refused.file.clone(),
                    pod: pod.clone(),
                });
            }
            reasons.insert(refused.file, refused.error);
        }
        self.said = reasons;
        self.by_file = pods
            .iter()
            .map(|p| (p.file.clone(), p.pod.clone()))
            .collect();
        let now = seen_stamp(SystemTime::now());
        let mut seen = HashMap::new();
        let mut set = BTreeMap::new();
        for read in pods {
            let mut pod = read.pod;
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let stamp = self.seen.get(&uid).cloned().unwrap_or_else(|| {
                tracing::info!(path = %read.file.display(), pod = pod.metadata.name.as_deref().unwrap_or(""), %uid, "a static pod is read");
                now.clone()
            });
            pod.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(CONFIG_SEEN_ANNOTATION.into(), stamp.clone());
            seen.insert(uid.clone(), stamp);
            set.insert(uid, Arc::new(pod));
        }
        for uid in self.seen.keys() {
            if !seen.contains_key(uid) {
                tracing::info!(%uid, "a static pod is gone from the static pod path");
            }
        }
        self.seen = seen;
        Some(set)
    }
}

/// `time` as the kubelet stamps a pod first seen (RFC 3339 with
/// nanoseconds, trailing zeros cut, in UTC).
fn seen_stamp(time: SystemTime) -> String {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = since.as_secs();
    let nanos = since.subsec_nanos();
    let stamp = k8s_openapi::jiff::Timestamp::from_second(seconds as i64)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_default();
    if nanos == 0 {
        return format!("{stamp}Z");
    }
    let fraction = format!("{nanos:09}");
    format!("{stamp}.{}Z", fraction.trim_end_matches('0'))
}

/// Resolves when the static pods changed; never without a static pod path
/// (or once its follower ended).
pub(crate) async fn static_changed(receiver: &mut Option<watch::Receiver<StaticPods>>) {
    let Some(r) = receiver else {
        return std::future::pending().await;
    };
    if r.changed().await.is_err() {
        *receiver = None;
        std::future::pending::<()>().await;
    }
}
