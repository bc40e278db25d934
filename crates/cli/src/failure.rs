//! How the command ends: an ordinary failure (the agent not running, a
//! refused allocation, a full disk, a busy root) is the error and its
//! causes on stderr and exit status 1, never a stack trace; a reader that
//! went away (`nodeplugins status | head -1`) ends the command quietly.

use std::io::Write;
use std::process::ExitCode;

/// The exit code for `result`, after telling the user what went wrong.
pub(crate) fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    let Err(error) = result else {
        return ExitCode::SUCCESS;
    };
    if reader_gone(&error) {
        return ExitCode::SUCCESS;
    }
    let _ = writeln!(std::io::stderr().lock(), "error: {}", describe(&error));
    ExitCode::FAILURE
}

/// Whether writing the output failed because its reader closed the pipe.
fn reader_gone(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and each cause not already part of the message before it, one
/// per line.
pub(crate) fn describe(error: &anyhow::Error) -> String {
    let mut lines: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if lines
            .last()
            .is_some_and(|previous| previous.contains(&text))
        {
            continue;
        }
        lines.push(text);
    }
    lines.join("\n  caused by: ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let io = std::io::Error::other("disk full");
        let error = anyhow::Error::new(Outer(io)).context("allocate devices");
        assert_eq!(
            describe(&error),
            "allocate devices\n  caused by: outer: disk full"
        );
    }

    #[test]
    fn a_closed_pipe_is_not_a_failure() {
        let error = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("write status");
        assert!(reader_gone(&error));
        assert_eq!(exit_code(Err(error)), ExitCode::SUCCESS);
    }
}
