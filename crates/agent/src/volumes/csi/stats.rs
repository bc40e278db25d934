//! The usage of the node's claimed CSI volumes, as the kubelet's volume
//! stats calculator reads it: every `volumeStatsAggPeriod` (a minute) and
//! up to as long again at random, for each volume published for a claim,
//! the driver's capabilities asked and, when it has `GET_VOLUME_STATS`,
//! `NodeGetVolumeStats` of the published path; shown on a scrape as the
//! kubelet's six `kubelet_volume_stats_*` gauges, by namespace and claim.
//! A volume whose driver cannot tell keeps no stats; one unpublished
//! drops its own. The task starts with the first claimed volume and ends
//! with the volume manager.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use nodeplugins_api::csi::v1 as csi;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::csi::CsiDriverStore;
use crate::metrics::MetricsSource;
use crate::volumes::csi::calls::DriverCalls;
use crate::volumes::csi::operations::CsiOperations;

/// How often the volumes' usage is read (`volumeStatsAggPeriod`).
pub const VOLUME_STATS_AGG_PERIOD: Duration = Duration::from_secs(60);

/// A published volume of a claim whose usage is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatsTarget {
    pub(crate) namespace: String,
    pub(crate) claim: String,
    pub(crate) driver: String,
    pub(crate) handle: String,
}

/// A volume's usage: bytes and inodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Usage {
    capacity_bytes: i64,
    available_bytes: i64,
    used_bytes: i64,
    inodes: i64,
    inodes_free: i64,
    inodes_used: i64,
}

impl Usage {
    fn of(usages: &[csi::VolumeUsage]) -> Self {
        let mut usage = Self::default();
        for u in usages {
            match csi::volume_usage::Unit::try_from(u.unit) {
                Ok(csi::volume_usage::Unit::Bytes) => {
                    usage.capacity_bytes = u.total;
                    usage.available_bytes = u.available;
                    usage.used_bytes = u.used;
                }
                Ok(csi::volume_usage::Unit::Inodes) => {
                    usage.inodes = u.total;
                    usage.inodes_free = u.available;
                    usage.inodes_used = u.used;
                }
                _ => {}
            }
        }
        usage
    }
}

/// One gauge: its name, its help, its value of a usage.
type Gauge = (&'static str, &'static str, fn(&Usage) -> i64);

/// The claimed volumes' usage, for `/metrics`. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct VolumeStats {
    /// (namespace, claim) → usage.
    usage: Arc<Mutex<BTreeMap<(String, String), Usage>>>,
}

/// The kubelet's `kubelet_volume_stats_*` gauges.
impl MetricsSource for VolumeStats {
    fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.clone()));
    }
}

impl Collector for VolumeStats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let usage = self
            .usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let gauges: [Gauge; 6] = [
            (
                "kubelet_volume_stats_capacity_bytes",
                "Capacity in bytes of the volume",
                |u| u.capacity_bytes,
            ),
            (
                "kubelet_volume_stats_available_bytes",
                "Number of available bytes in the volume",
                |u| u.available_bytes,
            ),
            (
                "kubelet_volume_stats_used_bytes",
                "Number of used bytes in the volume",
                |u| u.used_bytes,
            ),
            (
                "kubelet_volume_stats_inodes",
                "Maximum number of inodes in the volume",
                |u| u.inodes,
            ),
            (
                "kubelet_volume_stats_inodes_free",
                "Number of free inodes in the volume",
                |u| u.inodes_free,
            ),
            (
                "kubelet_volume_stats_inodes_used",
                "Number of used inodes in the volume",
                |u| u.inodes_used,
            ),
        ];
        for (name, help, value) in gauges {
            if usage.is_empty() {
                continue;
            }
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for ((namespace, claim), u) in &usage {
                let labels = [
                    ("namespace", namespace.as_str()),
                    ("persistentvolumeclaim", claim.as_str()),
                ];
                family.encode_family(&labels)?.encode_gauge(&value(u))?;
            }
        }
        Ok(())
    }
}

/// Reads the usage of the volumes tracked, on a task of its own.
pub(crate) struct StatsCollector {
    drivers: CsiDriverStore,
    operations: CsiOperations,
    period: Duration,
    targets: Mutex<BTreeMap<PathBuf, StatsTarget>>,
    stats: VolumeStats,
    started: std::sync::atomic::AtomicBool,
}

impl StatsCollector {
    /// A collector calling `drivers` (measured in `operations`) every
    /// `period` (up to twice as long).
    pub(crate) fn new(
        drivers: CsiDriverStore,
        operations: CsiOperations,
        period: Duration,
        stats: VolumeStats,
    ) -> Arc<Self> {
        Arc::new(Self {
            drivers,
            operations,
            period,
            targets: Mutex::new(BTreeMap::new()),
            stats,
            started: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Reads the usage of `target`, published at `path`, from now on.
    pub(crate) fn track(self: &Arc<Self>, path: &Path, target: StatsTarget) {
        self.targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_path_buf(), target);
        if !self.started.swap(true, std::sync::atomic::Ordering::SeqCst) {
            tokio::spawn(run(Arc::downgrade(self), self.period));
        }
    }

    /// Stops reading the volume published at `path`, and drops its stats.
    pub(crate) fn forget(&self, path: &Path) {
        let gone = self
            .targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(path);
        if let Some(gone) = gone {
            self.stats
                .usage
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&(gone.namespace, gone.claim));
        }
    }

    /// Reads every tracked volume's usage once.
    async fn collect(&self) {
        let targets = self
            .targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (path, target) in targets {
            let key = (target.namespace.clone(), target.claim.clone());
            let usage = async {
                let calls =
                    DriverCalls::of(&self.drivers, &target.driver, &self.operations).ok()?;
                if !calls.capabilities().await.ok()?.volume_stats {
                    return None;
                }
                match calls.volume_stats(&target.handle, &path.to_string_lossy()).await {
                    Ok(usage) => Some(Usage::of(&usage)),
                    Err(e) => {
                        tracing::debug!(driver = %target.driver, volume = %target.handle, error = %e, "cannot read a volume's usage");
                        None
                    }
                }
            }
            .await;
            let still = self
                .targets
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key(&path);
            let mut stats = self
                .stats
                .usage
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match usage {
                Some(usage) if still => {
                    stats.insert(key, usage);
                }
                _ => {
                    stats.remove(&key);
                }
            }
        }
    }
}

/// Every `period`, up to twice as long (the kubelet's jitter of 1.0),
/// until the collector is gone.
async fn run(collector: Weak<StatsCollector>, period: Duration) {
    loop {
        let wait = period.mul_f64(1.0 + rand::random::<f64>());
        tokio::time::sleep(wait).await;
        let Some(collector) = collector.upgrade() else {
            return;
        };
        collector.collect().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_inodes_become_the_kubelets_six_gauges() {
        let usage = Usage::of(&[
            csi::VolumeUsage {
                available: 6,
                total: 10,
                used: 4,
                unit: csi::volume_usage::Unit::Bytes as i32,
            },
            csi::VolumeUsage {
                available: 90,
                total: 100,
                used: 10,
                unit: csi::volume_usage::Unit::Inodes as i32,
            },
        ]);
        let stats = VolumeStats::default();
        stats
            .usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(("ns".into(), "data".into()), usage);
        let mut registry = Registry::default();
        stats.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap_or_default();
        for line in [
            "kubelet_volume_stats_capacity_bytes{namespace=\"ns\",persistentvolumeclaim=\"data\"} 10",
            "kubelet_volume_stats_available_bytes{namespace=\"ns\",persistentvolumeclaim=\"data\"} 6",
            "kubelet_volume_stats_used_bytes{namespace=\"ns\",persistentvolumeclaim=\"data\"} 4",
            "kubelet_volume_stats_inodes{namespace=\"ns\",persistentvolumeclaim=\"data\"} 100",
            "kubelet_volume_stats_inodes_free{namespace=\"ns\",persistentvolumeclaim=\"data\"} 90",
            "kubelet_volume_stats_inodes_used{namespace=\"ns\",persistentvolumeclaim=\"data\"} 10",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
        assert!(
            text.contains(
                "# HELP kubelet_volume_stats_inodes Maximum number of inodes in the volume"
            ),
            "{text}"
        );
    }
}
