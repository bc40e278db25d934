//! The driver's slices as the publisher knows them: what its watches last
//! said, with its own writes laid over them for a while.
//!
//! A watch lags behind the writes that cause its events, and a re-list may
//! be served from a cache older than the last write. Without the writes on
//! top, a slice created a moment ago would look missing and be created
//! twice, and an older copy would hide a newer one and make the next update
//! fail on its resourceVersion. So each write is kept for
//! [`OWN_WRITE_TTL`] and wins over what a watch says unless the watch has a
//! newer resourceVersion (the Go helper's mutation cache does the same);
//! when one expires, the publisher checks its pools again.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::ResourceExt;
use tokio::time::Instant;

/// How long the publisher's own writes are laid over what its watches say
/// (the Go helper's mutation cache TTL).
pub(super) const OWN_WRITE_TTL: Duration = Duration::from_secs(60);

/// Which watch a slice came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Scope {
    /// The node's own slices (`spec.nodeName=<node>`).
    Node,
    /// The driver's slices for other nodes (`spec.nodeName=`).
    Cluster,
}

/// A write of the publisher's own: the slice as the server returned it, or
/// its deletion (with the resourceVersion it had).
#[derive(Debug, Clone)]
struct OwnWrite {
    slice: Option<ResourceSlice>,
    resource_version: Option<u64>,
    at: Instant,
}

#[derive(Debug, Default)]
pub(super) struct Known {
    watched: BTreeMap<String, (Scope, ResourceSlice)>,
    own: BTreeMap<String, OwnWrite>,
}

fn resource_version(slice: &ResourceSlice) -> Option<u64> {
    slice.metadata.resource_version.as_deref()?.parse().ok()
}

impl Known {
    /// A watch saw `slice` added or changed.
    pub(super) fn seen(&mut self, scope: Scope, slice: ResourceSlice) {
        self.watched.insert(slice.name_any(), (scope, slice));
    }

    /// A watch saw `slice` deleted: gone, whatever was written of it before
    /// (its last resourceVersion is at least that of any earlier write).
    pub(super) fn gone(&mut self, slice: &ResourceSlice) {
        let name = slice.name_any();
        self.watched.remove(&name);
        let deleted = resource_version(slice);
        let superseded = self
            .own
            .get(&name)
            .is_some_and(|w| match (w.resource_version, deleted) {
                (Some(own), Some(deleted)) => own <= deleted,
                _ => true,
            });
        if superseded {
            self.own.remove(&name);
        }
    }

    /// A watch of `scope` listed its slices again: they replace what it
    /// had said before.
    pub(super) fn relisted(&mut self, scope: Scope, slices: Vec<ResourceSlice>) {
        self.watched.retain(|_, (s, _)| *s != scope);
        for slice in slices {
            self.watched.insert(slice.name_any(), (scope, slice));
        }
    }

    /// The publisher wrote `slice` (the server's answer) at `now`.
    pub(super) fn wrote(&mut self, slice: ResourceSlice, now: Instant) {
        let write = OwnWrite {
            resource_version: resource_version(&slice),
            slice: Some(slice),
            at: now,
        };
        if let Some(slice) = &write.slice {
            self.own.insert(slice.name_any(), write);
        }
    }

    /// The publisher deleted `slice` at `now`.
    pub(super) fn deleted(&mut self, slice: &ResourceSlice, now: Instant) {
        self.own.insert(
            slice.name_any(),
            OwnWrite {
                slice: None,
                resource_version: resource_version(slice),
                at: now,
            },
        );
    }

    /// Forgets own writes older than [`OWN_WRITE_TTL`] at `now`.
    pub(super) fn expire(&mut self, now: Instant) {
        self.own.retain(|_, w| now < w.at + OWN_WRITE_TTL);
    }

    /// When the oldest own write expires.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.own.values().map(|w| w.at + OWN_WRITE_TTL).min()
    }

    /// The slices as best known: each watched one, unless an own write of
    /// it is newer, and each own write the watches have not caught up with.
    pub(super) fn slices(&self) -> Vec<(Scope, ResourceSlice)> {
        let mut slices: BTreeMap<&str, (Scope, &ResourceSlice)> = self
            .watched
            .iter()
            .map(|(name, (scope, slice))| (name.as_str(), (*scope, slice)))
            .collect();
        for (name, write) in &self.own {
            let watched = self.watched.get(name);
            let watch_is_newer = watched.is_some_and(|(_, w)| {
                match (resource_version(w), write.resource_version) {
                    (Some(watched), Some(own)) => watched > own,
                    // Not comparable: the watch's word stands.
                    _ => true,
                }
            });
            if watch_is_newer {
                continue;
            }
            match &write.slice {
                Some(slice) => {
                    let scope = match slice.spec.node_name {
                        Some(_) => Scope::Node,
                        None => Scope::Cluster,
                    };
                    slices.insert(name, (scope, slice));
                }
                None => {
                    slices.remove(name.as_str());
                }
            }
        }
        slices
            .into_values()
            .map(|(scope, slice)| (scope, slice.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn slice(name: &str, version: u64, devices: usize) -> ResourceSlice {
        ResourceSlice {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.to_string()),
                ..Default::default()
            },
            spec: k8s_openapi::api::resource::v1::ResourceSliceSpec {
                node_name: Some("node-1".into()),
                devices: Some(vec![Default::default(); devices]),
                ..Default::default()
            },
        }
    }

    fn view(known: &Known) -> Vec<(String, String, usize)> {
        known
            .slices()
            .into_iter()
            .map(|(_, s)| {
                (
                    s.name_any(),
                    s.metadata.resource_version.clone().unwrap_or_default(),
                    s.spec.devices.map_or(0, |d| d.len()),
                )
            })
            .collect()
    }

    #[test]
    fn a_stale_relist_neither_loses_a_new_slice_nor_hides_a_newer_version() {
        let now = Instant::now();
        let mut known = Known::default();
        known.relisted(Scope::Node, vec![slice("a", 10, 1)]);
        known.wrote(slice("a", 12, 2), now);
        known.wrote(slice("b", 13, 1), now);
        // A re-list from before both writes.
        known.relisted(Scope::Node, vec![slice("a", 10, 1)]);
        assert_eq!(
            view(&known),
            [("a".into(), "12".into(), 2), ("b".into(), "13".into(), 1)]
        );
        // The watch catches up, and then goes further.
        known.seen(Scope::Node, slice("a", 15, 3));
        assert_eq!(view(&known)[0], ("a".into(), "15".into(), 3));
    }

    #[test]
    fn a_deleted_slice_stays_gone_over_a_stale_relist_until_the_write_expires() {
        let now = Instant::now();
        let mut known = Known::default();
        let old = slice("a", 10, 1);
        known.relisted(Scope::Node, vec![old.clone()]);
        known.deleted(&old, now);
        known.relisted(Scope::Node, vec![old]);
        assert!(view(&known).is_empty());
        assert_eq!(known.next_expiry(), Some(now + OWN_WRITE_TTL));
        known.expire(now + OWN_WRITE_TTL);
        assert_eq!(view(&known).len(), 1, "the watch's word once expired");
        assert_eq!(known.next_expiry(), None);
    }

    #[test]
    fn a_slice_someone_else_deletes_is_gone_though_it_was_written_a_moment_ago() {
        let now = Instant::now();
        let mut known = Known::default();
        known.wrote(slice("a", 12, 1), now);
        known.gone(&slice("a", 12, 1));
        assert!(view(&known).is_empty());
    }

    #[test]
    fn a_relist_of_one_scope_leaves_the_others_slices() {
        let mut known = Known::default();
        known.relisted(Scope::Node, vec![slice("a", 1, 1)]);
        known.relisted(Scope::Cluster, vec![slice("x", 2, 1)]);
        known.relisted(Scope::Node, Vec::new());
        assert_eq!(view(&known), [("x".into(), "2".into(), 1)]);
    }
}
