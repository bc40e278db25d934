//! The node's own usage, as the kubelet's cAdvisor reads it from the root
//! cgroup: its cumulative CPU time and its memory working set (usage less
//! the inactive file cache, never below zero). Cgroup v1 reads
//! `cpuacct.usage` and `memory.usage_in_bytes`; on cgroup v2, whose root
//! has no `memory.current`, the usage is `MemTotal - MemFree` of
//! `/proc/meminfo`, as runc's cgroup library takes it for the root. The
//! swap in use is `memory.memsw.usage_in_bytes` less the memory usage on
//! cgroup v1 (none when swap is not accounted), `SwapTotal - SwapFree`
//! on cgroup v2.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::runtime::Sample;

/// Where the cgroup filesystem is mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// What the node uses now, each part when it could be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeUsage {
    /// Cumulative CPU time, in nanoseconds.
    pub(crate) cpu: Option<Sample>,
    /// Memory working set, in bytes.
    pub(crate) memory_working_set: Option<Sample>,
    /// Swap in use, in bytes.
    pub(crate) swap: Option<Sample>,
}

/// The node's usage now.
pub(crate) fn node_usage() -> NodeUsage {
    usage_below(Path::new(CGROUP_ROOT), Path::new("/proc/meminfo"))
}

fn usage_below(cgroup: &Path, meminfo: &Path) -> NodeUsage {
    let at = SystemTime::now();
    let sample = |value: Option<u64>| value.map(|value| Sample { at, value });
    if cgroup.join("cgroup.controllers").exists() {
        let cpu = read(&cgroup.join("cpu.stat"))
            .and_then(|stat| field(&stat, "usage_usec"))
            .map(|usec| usec.saturating_mul(1000));
        let info = read(meminfo).unwrap_or_default();
        let kib = |key| meminfo_kib(&info, key).map(|k: u64| k.saturating_mul(1024));
        let memory = kib("MemTotal").zip(kib("MemFree")).map(|(total, free)| {
            let inactive = read(&cgroup.join("memory.stat"))
                .and_then(|stat| field(&stat, "inactive_file"))
                .unwrap_or(0);
            total.saturating_sub(free).saturating_sub(inactive)
        });
        let swap = kib("SwapTotal")
            .zip(kib("SwapFree"))
            .map(|(total, free)| total.saturating_sub(free));
        NodeUsage {
            cpu: sample(cpu),
            memory_working_set: sample(memory),
            swap: sample(swap),
        }
    } else {
        let cpu = first_existing(cgroup, &["cpuacct", "cpu,cpuacct", "cpuacct,cpu"])
            .and_then(|dir| read(&dir.join("cpuacct.usage")))
            .and_then(|text| text.trim().parse().ok());
        let number = |name: &str| {
            read(&cgroup.join("memory").join(name)).and_then(|text| text.trim().parse::<u64>().ok())
        };
        let usage = number("memory.usage_in_bytes");
        let memory = usage.map(|usage| {
            let inactive = read(&cgroup.join("memory/memory.stat"))
                .and_then(|stat| field(&stat, "total_inactive_file"))
                .unwrap_or(0);
            usage.saturating_sub(inactive)
        });
        // Memory and swap together, when swap is accounted; none in use
        // otherwise.
        let swap = usage.map(|usage| {
            number("memory.memsw.usage_in_bytes").map_or(0, |both| both.saturating_sub(usage))
        });
        NodeUsage {
            cpu: sample(cpu),
            memory_working_set: sample(memory),
            swap: sample(swap),
        }
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn first_existing(root: &Path, names: &[&str]) -> Option<PathBuf> {
    names.iter().map(|n| root.join(n)).find(|p| p.exists())
}

/// The value of `key` in a flat keyed file (`key value` lines).
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok())?
    })
}

/// A `/proc/meminfo` entry, in KiB.
fn meminfo_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name != key {
            return None;
        }
        rest.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test with a precise location.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn cgroup_v1_is_read_from_cpuacct_and_memory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("cpu,cpuacct")).unwrap();
        std::fs::create_dir_all(root.join("memory")).unwrap();
        std::fs::write(root.join("cpu,cpuacct/cpuacct.usage"), "5000000000\n").unwrap();
        std::fs::write(root.join("memory/memory.usage_in_bytes"), "1000\n").unwrap();
        std::fs::write(
            root.join("memory/memory.stat"),
            "cache 10\ninactive_file 1\ntotal_inactive_file 300\n",
        )
        .unwrap();
        let usage = usage_below(root, &root.join("none"));
        assert_eq!(usage.cpu.unwrap().value, 5_000_000_000);
        assert_eq!(usage.memory_working_set.unwrap().value, 700);
        assert_eq!(usage.swap.unwrap().value, 0, "swap not accounted: none");
        std::fs::write(root.join("memory/memory.memsw.usage_in_bytes"), "1500\n").unwrap();
        assert_eq!(
            usage_below(root, &root.join("none")).swap.unwrap().value,
            500
        );
    }

    #[test]
    fn cgroup_v2_takes_the_roots_memory_from_meminfo() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory\n").unwrap();
        std::fs::write(root.join("cpu.stat"), "usage_usec 2500\nuser_usec 1\n").unwrap();
        std::fs::write(root.join("memory.stat"), "anon 5\ninactive_file 1024\n").unwrap();
        let meminfo = root.join("meminfo");
        std::fs::write(
            &meminfo,
            "MemTotal:  10 kB\nMemFree:    4 kB\nSwapTotal: 8 kB\nSwapFree: 5 kB\n",
        )
        .unwrap();
        let usage = usage_below(root, &meminfo);
        assert_eq!(usage.cpu.unwrap().value, 2_500_000);
        assert_eq!(usage.memory_working_set.unwrap().value, 6 * 1024 - 1024);
        assert_eq!(usage.swap.unwrap().value, 3 * 1024);
    }
}
