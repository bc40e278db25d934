//! The machine as the kubelet describes it in its Node: the logical CPUs,
//! the memory, the huge pages of each size, the filesystem of the root
//! directory, and the identities and versions of `nodeInfo`. Read once at
//! start (the kubelet's cAdvisor reads them once too), each from the file
//! the kubelet reads it from; what cannot be read is empty, as it is there.

use std::collections::BTreeMap;
use std::path::Path;

/// The machine's facts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::kube_api) struct MachineInfo {
    /// Logical CPUs online.
    pub(in crate::kube_api) cpus: u64,
    /// `MemTotal`, in bytes.
    pub(in crate::kube_api) memory: u64,
    /// `SwapTotal`, in bytes.
    pub(in crate::kube_api) swap: u64,
    /// Per huge page size in bytes: the pages of that size.
    pub(in crate::kube_api) huge_pages: BTreeMap<u64, u64>,
    /// The size of the filesystem that holds the root directory, in bytes.
    pub(in crate::kube_api) ephemeral_storage: u64,
    /// `/etc/machine-id` (or dbus's).
    pub(in crate::kube_api) machine_id: String,
    /// The firmware's product UUID (else the device tree's system id or
    /// VM UUID, else the machine id: cAdvisor's order).
    pub(in crate::kube_api) system_uuid: String,
    /// This boot's id.
    pub(in crate::kube_api) boot_id: String,
    /// The kernel's release (`uname -r`).
    pub(in crate::kube_api) kernel_version: String,
    /// `PRETTY_NAME` of `/etc/os-release`.
    pub(in crate::kube_api) os_image: String,
    /// Whether the agent runs in a user namespace (its uid map is not
    /// the whole range mapped to itself).
    pub(in crate::kube_api) in_user_namespace: bool,
}

impl MachineInfo {
    /// The facts of this machine, with `root_dir` the agent's root
    /// directory.
    pub(in crate::kube_api) fn read(root_dir: &Path) -> Self {
        let first = |paths: &[&str]| {
            paths
                .iter()
                .find_map(|p| std::fs::read_to_string(p).ok())
                .map(|text| text.trim().to_string())
                .unwrap_or_default()
        };
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Self {
            cpus: online_cpus(),
            memory: meminfo_bytes(&meminfo, "MemTotal:").unwrap_or(0),
            swap: meminfo_bytes(&meminfo, "SwapTotal:").unwrap_or(0),
            huge_pages: huge_pages(Path::new("/sys/kernel/mm/hugepages")),
            ephemeral_storage: filesystem_size(root_dir),
            machine_id: first(&["/etc/machine-id", "/var/lib/dbus/machine-id"]),
            system_uuid: first(&[
                "/sys/class/dmi/id/product_uuid",
                "/proc/device-tree/system-id",
                "/proc/device-tree/vm,uuid",
                "/etc/machine-id",
            ])
            .trim_end_matches('\0')
            .trim()
            .to_string(),
            boot_id: first(&["/proc/sys/kernel/random/boot_id"]),
            kernel_version: rustix::system::uname()
                .release()
                .to_string_lossy()
                .into_owned(),
            os_image: std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|text| pretty_name(&text))
                .unwrap_or_default(),
            in_user_namespace: std::fs::read_to_string("/proc/self/uid_map")
                .is_ok_and(|map| in_user_namespace(&map)),
        }
    }
}

/// The CPUs `/sys/devices/system/cpu/online` lists (`0-3,6`), else what
/// the process may run on.
fn online_cpus() -> u64 {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|text| cpu_list_len(text.trim()))
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u64)
        })
        .unwrap_or(0)
}

/// How many CPUs a list such as `0-3,6` names.
fn cpu_list_len(list: &str) -> Option<u64> {
    let mut count = 0u64;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        count += match part.split_once('-') {
            Some((low, high)) => high
                .parse::<u64>()
                .ok()?
                .checked_sub(low.parse::<u64>().ok()?)?
                .checked_add(1)?,
            None => {
                part.parse::<u64>().ok()?;
                1
            }
        };
    }
    (count > 0).then_some(count)
}

/// The line `key` (`MemTotal:`) of `/proc/meminfo`, in bytes.
fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Per page size, the pages configured: the `hugepages-<size>kB`
/// directories under `dir`, with their `nr_hugepages`.
fn huge_pages(dir: &Path) -> BTreeMap<u64, u64> {
    let mut sizes = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return sizes;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(kib) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hugepages-"))
            .and_then(|n| n.strip_suffix("kB"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let pages = std::fs::read_to_string(entry.path().join("nr_hugepages"))
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .unwrap_or(0);
        sizes.insert(kib.saturating_mul(1024), pages);
    }
    sizes
}

/// The size of the filesystem holding `path` (or its nearest existing
/// parent), in bytes.
fn filesystem_size(path: &Path) -> u64 {
    let existing = path.ancestors().find(|p| p.exists()).unwrap_or(path);
    rustix::fs::statvfs(existing)
        .map(|fs| fs.f_blocks.saturating_mul(fs.f_frsize))
        .unwrap_or(0)
}

/// Whether a uid map (`/proc/self/uid_map`) is a user namespace's: any
/// map but the whole range mapped to itself.
fn in_user_namespace(uid_map: &str) -> bool {
    let fields: Vec<&str> = uid_map.split_whitespace().collect();
    fields != ["0", "0", "4294967295"]
}

/// `PRETTY_NAME` of an os-release file, unquoted.
fn pretty_name(os_release: &str) -> Option<String> {
    let value = os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))?
        .trim();
    let unquoted = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(value);
    Some(unquoted.to_string())
}

/// Go's name of the machine's architecture (`GOARCH`), as the Node's
/// `kubernetes.io/arch` and `nodeInfo.architecture` give it.
pub(in crate::kube_api) fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "riscv64" => "riscv64",
        "s390x" => "s390x",
        "loongarch64" => "loong64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn cpu_lists_count_ranges_and_single_cpus() {
        assert_eq!(cpu_list_len("0-3"), Some(4));
        assert_eq!(cpu_list_len("0-3,6,8-9"), Some(7));
        assert_eq!(cpu_list_len("0"), Some(1));
        assert_eq!(cpu_list_len(""), None);
        assert_eq!(cpu_list_len("3-1"), None);
        assert_eq!(cpu_list_len("x"), None);
    }

    #[test]
    fn meminfo_lines_are_read_in_bytes() {
        let meminfo = "MemTotal:       24684396 kB\nMemFree:        16282700 kB\nSwapTotal: 0 kB\n";
        assert_eq!(meminfo_bytes(meminfo, "MemTotal:"), Some(24_684_396 * 1024));
        assert_eq!(meminfo_bytes(meminfo, "SwapTotal:"), Some(0));
        assert_eq!(meminfo_bytes("MemFree: 1 kB\n", "MemTotal:"), None);
    }

    #[test]
    fn only_the_whole_identity_uid_map_is_the_initial_namespace() {
        assert!(!in_user_namespace("         0          0 4294967295\n"));
        assert!(in_user_namespace("         0     100000      65536\n"));
    }

    #[test]
    fn pretty_name_is_unquoted() {
        let release = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n";
        assert_eq!(
            pretty_name(release).as_deref(),
            Some("Debian GNU/Linux 13 (trixie)")
        );
        assert_eq!(pretty_name("PRETTY_NAME=Plain\n").as_deref(), Some("Plain"));
        assert_eq!(pretty_name("NAME=x\n"), None);
    }

    #[test]
    fn huge_page_sizes_are_read_from_their_directories() {
        let dir = tempfile::tempdir().unwrap();
        for (name, pages) in [("hugepages-2048kB", "3\n"), ("hugepages-1048576kB", "0\n")] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            std::fs::write(dir.path().join(name).join("nr_hugepages"), pages).unwrap();
        }
        std::fs::create_dir(dir.path().join("other")).unwrap();
        let sizes = huge_pages(dir.path());
        assert_eq!(
            sizes,
            BTreeMap::from([(2 * 1024 * 1024, 3), (1024 * 1024 * 1024, 0)])
        );
    }

    #[test]
    fn this_machine_has_cpus_memory_a_kernel_and_a_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let machine = MachineInfo::read(&dir.path().join("not-yet-made"));
        assert!(machine.cpus >= 1);
        assert!(machine.memory > 0);
        assert!(machine.ephemeral_storage > 0);
        assert!(!machine.kernel_version.is_empty());
        assert!(!machine.boot_id.is_empty());
    }
}
