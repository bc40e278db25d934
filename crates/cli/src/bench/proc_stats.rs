//! CPU time, context switches and memory of another process, from /proc.

use std::path::Path;

/// A sample of a process's resource use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcSample {
    /// User plus system CPU time, in clock ticks.
    pub(crate) cpu_ticks: u64,
    /// Voluntary plus involuntary context switches over all threads:
    /// each wake-up of a parked thread counts one.
    pub(crate) context_switches: u64,
    /// Resident set size in KiB.
    pub(crate) rss_kib: u64,
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
    let mut context_switches = 0;
    for task in std::fs::read_dir(base.join("task"))?.flatten() {
        if let Ok(status) = std::fs::read_to_string(task.path().join("status")) {
            context_switches += field(&status, "voluntary_ctxt_switches:")
                + field(&status, "nonvoluntary_ctxt_switches:");
        }
    }
    Ok(ProcSample {
        cpu_ticks,
        context_switches,
        rss_kib,
    })
}
