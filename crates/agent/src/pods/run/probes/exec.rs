//! The exec probe: the command run in the container through the runtime's
//! `ExecSync` with the probe's timeout; exit 0 is success, another exit
//! code a failure whose message is the command's output (its standard
//! output, then its error, at most 10 KiB), the runtime's deadline a
//! failure in the kubelet's words, any other runtime error the handler's
//! error.

use std::time::Duration;

use super::verdict::{Handled, MAX_OUTPUT, Verdict};
use crate::pods::run::pod_sync::go_duration;
use crate::runtime::{ContainerRuntime, RuntimeError};

/// Runs `command` in container `id` within `timeout`.
pub(super) async fn exec_probe(
    runtime: &dyn ContainerRuntime,
    id: &str,
    command: &[String],
    timeout: Duration,
) -> Handled {
    match runtime.exec_sync(id, command, Some(timeout)).await {
        Ok(out) => {
            let mut data = out.stdout;
            data.extend_from_slice(&out.stderr);
            data.truncate(MAX_OUTPUT);
            let text = String::from_utf8_lossy(&data).into_owned();
            let verdict = if out.exit_code == 0 {
                Verdict::Success
            } else {
                Verdict::Failure
            };
            Ok((verdict, text))
        }
        Err(e) if timed_out(&e) => Ok((
            Verdict::Failure,
            format!(
                "command timed out: {:?} timed out after {}",
                command.join(" "),
                go_duration(timeout)
            ),
        )),
        Err(e) => Err(("unknown", e.to_string())),
    }
}

/// Whether the runtime gave up on the command at its timeout.
fn timed_out(error: &RuntimeError) -> bool {
    error.code() == Some(tonic::Code::DeadlineExceeded)
}
