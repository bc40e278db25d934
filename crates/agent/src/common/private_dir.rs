//! The agent's own directories under the root (its admin socket's, its
//! state's): created private to the agent's user.

/// Creates `dir` (and its parents) with mode 0700, and sets 0700 on it if it
/// existed.
pub(crate) fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    crate::common::served_socket::create_dir_with_mode(dir, 0o700)
}
