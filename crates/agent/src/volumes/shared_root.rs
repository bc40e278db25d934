//! The node's root made a shared mount all the way down before any volume
//! is set up, as the kubelet makes its root directory (`MakeRShared`): a
//! volume a driver mounts under it then reaches the containers that mount
//! it with `HostToContainer` or `Bidirectional` propagation, and a mount a
//! privileged container makes there reaches the host. A root already on a
//! shared mount is left as it is; otherwise it is bind-mounted onto itself
//! and that mount made recursively shared.

use std::path::Path;

use rustix::mount::MountPropagationFlags;

/// Makes `root` a shared mount, recursively, unless it already is on one.
/// A root not made yet is made first, as the kubelet makes its data
/// directories before it.
pub(crate) fn make_rshared(root: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(root)?;
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    if on_shared_mount(&table, root) {
        return Ok(());
    }
    tracing::info!(root = %root.display(), "bind-mounting the node's root with shared mount propagation");
    rustix::mount::mount_bind(root, root)?;
    rustix::mount::mount_change(
        root,
        MountPropagationFlags::SHARED | MountPropagationFlags::REC,
    )?;
    Ok(())
}

/// Whether the mount `path` is on (the last one of `table`, a mountinfo,
/// whose mount point holds it) propagates as shared.
fn on_shared_mount(table: &str, path: &Path) -> bool {
    table
        .lines()
        .rev()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = fields.get(4)?.replace("\\040", " ");
            path.starts_with(&point).then(|| {
                fields
                    .iter()
                    .skip(6)
                    .take_while(|f| **f != "-")
                    .any(|f| f.starts_with("shared:"))
            })
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_holding_a_path_tells_whether_it_is_shared() {
        let table = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 27 254:0 /var/lib/kubelet /var/lib/kubelet rw,relatime shared:7 - ext4 /dev/vda rw
41 27 0:50 / /data rw master:3 - tmpfs tmpfs rw
";
        assert!(!on_shared_mount(table, Path::new("/tmp/node")));
        assert!(on_shared_mount(table, Path::new("/var/lib/kubelet/pods")));
        assert!(!on_shared_mount(table, Path::new("/data/x")));
        assert!(!on_shared_mount("", Path::new("/")));
    }
}
