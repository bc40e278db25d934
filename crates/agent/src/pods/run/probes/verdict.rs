//! What a probe's handler answers (success, a success with a warning, a
//! failure, each with its output; or an error), and the words the
//! handlers share with Go's: addresses, connection errors, durations.

use std::time::Duration;

/// The most of a probe's output (a command's, a response body) kept.
pub(super) const MAX_OUTPUT: usize = 10 * 1024;

/// A handler's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Success,
    /// A success the kubelet warns of.
    Warning,
    Failure,
}

/// A handler's answer and its output, or its error: the result it had
/// (`unknown`, or `failure` for a response whose body cannot be read)
/// and why.
pub(super) type Handled = Result<(Verdict, String), (&'static str, String)>;

/// `host:port`, an IPv6 address in brackets, as Go's `JoinHostPort`.
pub(crate) fn join_host_port(host: &str, port: impl std::fmt::Display) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A failed connection in Go's words (`connect: connection refused`).
pub(super) fn connect_error(error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    let what = match error.kind() {
        ErrorKind::ConnectionRefused => "connection refused".to_string(),
        ErrorKind::HostUnreachable => "no route to host".to_string(),
        ErrorKind::NetworkUnreachable => "network is unreachable".to_string(),
        ErrorKind::ConnectionReset => "connection reset by peer".to_string(),
        ErrorKind::TimedOut => return "i/o timeout".to_string(),
        _ => {
            let text = error.to_string();
            let text = text.split(" (os error").next().unwrap_or(&text);
            text.to_lowercase()
        }
    };
    format!("connect: {what}")
}

/// Go's `%v` of a timeout in whole seconds (`1s`).
pub(super) fn seconds(timeout: Duration) -> String {
    crate::pods::run::pod_sync::go_duration(timeout)
}
