//! CPU time, context switches and memory of another process, from /proc.

use std::collections::BTreeMap;
use std::path::Path;

/// A sample of a process's resource use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcSample {
    /// User plus system CPU time, in clock ticks.
    pub(crate) cpu_ticks: u64,
    /// Voluntary plus involuntary context switches of each thread (by id):
    /// each wake-up of a parked thread counts one.
    pub(crate) context_switches: BTreeMap<u64, u64>,
    /// Resident set size in KiB.
    pub(crate) rss_kib: u64,
}

impl ProcSample {
    /// Context switches since `before`, over the threads alive now: a
    /// thread that ended meanwhile (a runtime's idle blocking thread, say)
    /// takes its count with it, and one that started counts from zero.
    pub(crate) fn context_switches_since(&self, before: &ProcSample) -> u64 {
        self.context_switches
            .iter()
            .map(|(tid, n)| {
                n.saturating_sub(before.context_switches.get(tid).copied().unwrap_or(0))
            })
            .sum()
    }
}

/// Clock ticks per second on Linux (USER_HZ); fixed at 100 on every
/// architecture the kernel ABI exposes through /proc.
pub(crate) const TICKS_PER_SECOND: u64 = 100;

fn field(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Samples process `pid`.
pub(crate) fn sample(pid: u32) -> anyhow::Result<ProcSample> {
    let base = Path::new("/proc").join(pid.to_string());
    let stat = std::fs::read_to_string(base.join("stat"))?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th overall.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let cpu_ticks = ticks(11) + ticks(12);
    let status = std::fs::read_to_string(base.join("status"))?;
    let rss_kib = field(&status, "VmRSS:");
    let mut context_switches = BTreeMap::new();
    for task in std::fs::read_dir(base.join("task"))?.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        if let Ok(status) = std::fs::read_to_string(task.path().join("status")) {
            let switches = field(&status, "voluntary_ctxt_switches:")
                + field(&status, "nonvoluntary_ctxt_switches:");
            context_switches.insert(tid, switches);
        }
    }
    Ok(ProcSample {
        cpu_ticks,
        context_switches,
        rss_kib,
    })
}
