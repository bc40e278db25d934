//! What the kubelet's server asks a runtime for a user's session with a
//! container: a command run in it (`Exec`, `ExecSync`), its own process's
//! streams (`Attach`) and the pod's ports (`PortForward`). For the three
//! streaming calls the runtime answers with a URL of its own streaming
//! server, where the session's bytes go; the kubelet's server proxies the
//! user's upgraded connection there.

use std::time::Duration;

/// A command to run in a container, with the streams the session carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    /// The container's runtime id.
    pub container_id: String,
    /// The command and its arguments.
    pub cmd: Vec<String>,
    /// Whether the command gets a terminal (then stderr is stdout).
    pub tty: bool,
    /// Whether the session carries the command's stdin.
    pub stdin: bool,
    /// Whether it carries its stdout.
    pub stdout: bool,
    /// Whether it carries its stderr.
    pub stderr: bool,
}

/// The streams of a container's own process to attach to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachRequest {
    /// The container's runtime id.
    pub container_id: String,
    /// Whether the container has a terminal (from its spec, not the
    /// user's request, as the kubelet fills it).
    pub tty: bool,
    /// Whether the session carries stdin.
    pub stdin: bool,
    /// Whether it carries stdout.
    pub stdout: bool,
    /// Whether it carries stderr.
    pub stderr: bool,
}

/// What a command run to its end in a container gave.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecSyncOutput {
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
    /// Its exit code.
    pub exit_code: i32,
}

/// How long an `ExecSync` may run when its caller sets no limit: the
/// kubelet's `/run` passes none, and the runtime then waits for the
/// command; the call's own deadline is this.
pub const EXEC_SYNC_DEFAULT_DEADLINE: Duration = Duration::from_secs(60 * 60);
