//! What a runtime or a kubelet leaves mounted under a test's directory.

use std::path::Path;

/// Unmounts everything mounted at or below `dir`, deepest first and
/// lazily (a container's root or a sandbox's shm may still be busy).
pub fn unmount_below(dir: &Path) {
    let dir = dir.to_string_lossy().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(&dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for point in points {
        let _ = std::process::Command::new("umount")
            .args(["-l", point])
            .status();
    }
}
