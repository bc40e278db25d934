//! What the node shutdown manager is configured with, as the kubelet's
//! `shutdownGracePeriod`, `shutdownGracePeriodCriticalPods` and
//! `shutdownGracePeriodByPodPriority`, and the groups the pods are stopped
//! in: lowest priority first, each group with its own grace period.

use std::path::PathBuf;
use std::time::Duration;

/// The priority of a pod with none (`DefaultPriorityWhenNoDefaultClassExists`).
const DEFAULT_PRIORITY: i32 = 0;
/// The priority from which a pod is critical (`SystemCriticalPriority`,
/// the `system-cluster-critical` class).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// Where the kubelet writes its logind drop-in when logind would not wait
/// long enough.
pub const LOGIND_CONFIG_DIR: &str = "/etc/systemd/logind.conf.d";

/// One group of pods stopped together at node shutdown: the pods whose
/// priority is at least `priority` (and below the next group's), each
/// given at most `grace_period_seconds` (the kubelet's
/// `ShutdownGracePeriodByPodPriority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PriorityGracePeriod {
    /// The lowest priority of the group.
    pub priority: i32,
    /// How long the group's pods get, in seconds.
    pub grace_period_seconds: i64,
}

impl PriorityGracePeriod {
    /// The group from `priority` up, given `grace_period_seconds`.
    pub fn new(priority: i32, grace_period_seconds: i64) -> Self {
        Self {
            priority,
            grace_period_seconds,
        }
    }
}

/// The node shutdown manager's configuration. Off (the kubelet's
/// default) unless a grace period is set.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeShutdownConfig {
    /// The time the node's shutdown is delayed for its pods
    /// (`shutdownGracePeriod`).
    pub grace_period: Duration,
    /// The part of it kept for critical pods, stopped last
    /// (`shutdownGracePeriodCriticalPods`).
    pub critical_pods_grace_period: Duration,
    /// Groups by priority instead of the two above
    /// (`shutdownGracePeriodByPodPriority`); when set, the two are unused.
    pub by_pod_priority: Vec<PriorityGracePeriod>,
    /// Where logind's drop-in is written when its `InhibitDelayMaxSec` is
    /// below the time asked for.
    pub logind_config_dir: PathBuf,
}

impl Default for NodeShutdownConfig {
    fn default() -> Self {
        Self {
            grace_period: Duration::ZERO,
            critical_pods_grace_period: Duration::ZERO,
            by_pod_priority: Vec::new(),
            logind_config_dir: PathBuf::from(LOGIND_CONFIG_DIR),
        }
    }
}

impl NodeShutdownConfig {
    /// A shutdown of `grace_period`, the last `critical_pods_grace_period`
    /// of it for critical pods.
    pub fn new(grace_period: Duration, critical_pods_grace_period: Duration) -> Self {
        Self {
            grace_period,
            critical_pods_grace_period,
            ..Self::default()
        }
    }

    /// Groups by priority (`shutdownGracePeriodByPodPriority`).
    pub fn by_pod_priority(groups: Vec<PriorityGracePeriod>) -> Self {
        Self {
            by_pod_priority: groups,
            ..Self::default()
        }
    }

    /// The groups, lowest priority first; none when the manager is off
    /// (no grace period, or a critical part longer than the whole).
    pub fn groups(&self) -> Vec<PriorityGracePeriod> {
        let mut groups = if self.by_pod_priority.is_empty() {
            self.two_groups()
        } else {
            self.by_pod_priority.clone()
        };
        groups.sort_by_key(|g| g.priority);
        groups
    }

    /// Whether the node's shutdown is handled at all.
    pub fn enabled(&self) -> bool {
        !self.groups().is_empty()
    }

    /// `shutdownGracePeriod` and its critical part as the kubelet turns
    /// them into groups: the pods under critical priority get what the
    /// critical ones do not, whole seconds each.
    fn two_groups(&self) -> Vec<PriorityGracePeriod> {
        if self.grace_period.is_zero() || self.critical_pods_grace_period > self.grace_period {
            return Vec::new();
        }
        let default = self.grace_period - self.critical_pods_grace_period;
        let critical = self.grace_period - default;
        let seconds = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        vec![
            PriorityGracePeriod::new(DEFAULT_PRIORITY, seconds(default)),
            PriorityGracePeriod::new(SYSTEM_CRITICAL_PRIORITY, seconds(critical)),
        ]
    }

    /// The whole time asked of logind: every group's grace period.
    pub(crate) fn period_requested(&self) -> Duration {
        let seconds: i64 = self
            .groups()
            .iter()
            .map(|g| g.grace_period_seconds.max(0))
            .fold(0i64, i64::saturating_add);
        Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
    }
}

/// The group of `groups` (sorted, not empty) a pod of `priority` belongs
/// to: the one with the highest priority not above it, the lowest group
/// for a pod below them all.
pub(crate) fn group_of(groups: &[PriorityGracePeriod], priority: i32) -> usize {
    // The first group whose priority is at least the pod's...
    let index = groups.partition_point(|g| g.priority < priority);
    if index == groups.len() {
        return groups.len().saturating_sub(1);
    }
    // ...or the one before it, when that one is above the pod.
    if index > 0 && groups[index].priority > priority {
        index - 1
    } else {
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_periods_become_the_kubelets_two_groups() {
        let config = NodeShutdownConfig::new(Duration::from_secs(30), Duration::from_secs(10));
        assert_eq!(
            config.groups(),
            vec![
                PriorityGracePeriod::new(0, 20),
                PriorityGracePeriod::new(SYSTEM_CRITICAL_PRIORITY, 10)
            ]
        );
        assert_eq!(config.period_requested(), Duration::from_secs(30));
        // No critical part: the critical pods get nothing of their own.
        let config = NodeShutdownConfig::new(Duration::from_secs(30), Duration::ZERO);
        assert_eq!(config.groups()[1].grace_period_seconds, 0);
    }

    #[test]
    fn without_a_period_or_with_a_critical_part_too_long_it_is_off() {
        assert!(!NodeShutdownConfig::default().enabled());
        let config = NodeShutdownConfig::new(Duration::from_secs(10), Duration::from_secs(20));
        assert!(!config.enabled());
    }

    #[test]
    fn groups_by_priority_are_sorted_and_win_over_the_two_periods() {
        let mut config = NodeShutdownConfig::by_pod_priority(vec![
            PriorityGracePeriod::new(100_000, 10),
            PriorityGracePeriod::new(1, 5),
            PriorityGracePeriod::new(SYSTEM_CRITICAL_PRIORITY, 20),
        ]);
        config.grace_period = Duration::from_secs(99);
        let priorities: Vec<i32> = config.groups().iter().map(|g| g.priority).collect();
        assert_eq!(priorities, vec![1, 100_000, SYSTEM_CRITICAL_PRIORITY]);
        assert_eq!(config.period_requested(), Duration::from_secs(35));
    }

    #[test]
    fn a_pod_goes_to_the_highest_group_not_above_its_priority() {
        // The kubelet's search: the first group at or above the
        // priority, one back when that one is above it.
        let groups = [
            PriorityGracePeriod::new(1, 10),
            PriorityGracePeriod::new(2, 20),
            PriorityGracePeriod::new(10, 30),
            PriorityGracePeriod::new(100, 40),
        ];
        for (priority, group) in [
            (0, 0),
            (1, 0),
            (2, 1),
            (5, 1),
            (10, 2),
            (99, 2),
            (100, 3),
            (1000, 3),
        ] {
            assert_eq!(group_of(&groups, priority), group, "priority {priority}");
        }
        let two =
            NodeShutdownConfig::new(Duration::from_secs(30), Duration::from_secs(10)).groups();
        assert_eq!(group_of(&two, -5), 0);
        assert_eq!(group_of(&two, 1_000_000), 0);
        assert_eq!(group_of(&two, SYSTEM_CRITICAL_PRIORITY), 1);
        assert_eq!(group_of(&two, SYSTEM_CRITICAL_PRIORITY + 1000), 1);
    }
}
