//! How the command ends: an ordinary failure (the agent not running, a
//! refused allocation, a full disk, a busy root) is the error and its
//! causes on stderr and exit status 1, never a stack trace; a conformance
//! run that could not be made at all (its plugin would not start, its
//! claims file cannot be read) exits 3, so that a CI job tells "the plugin
//! fails" (1) from "the tool could not run" (3) and bad flags (2); a reader
//! that went away (`nodeplugins status | head -1`) ends the command
//! quietly.

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
    if error
        .chain()
        .any(|cause| cause.is::<nodeplugins_conformance::RunError>())
    {
        return ExitCode::from(COULD_NOT_RUN);
    }
    ExitCode::FAILURE
}

/// The exit status of a conformance run that could not be made.
pub(crate) const COULD_NOT_RUN: u8 = 3;

/// Whether writing the output failed because its reader closed the pipe:
/// an I/O error, or one that JSON output wraps (serde_json keeps the I/O
/// error's kind but gives no source).
fn reader_gone(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let kind = cause
            .downcast_ref::<std::io::Error>()
            .map(std::io::Error::kind)
            .or_else(|| {
                cause
                    .downcast_ref::<serde_json::Error>()
                    .and_then(serde_json::Error::io_error_kind)
            });
        kind == Some(std::io::ErrorKind::BrokenPipe)
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

    /// A reader that has gone away.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_under_json_or_text_output_is_the_end_not_a_failure() {
        let json = serde_json::to_writer(ClosedPipe, &serde_json::json!({"a": 1})).unwrap_err();
        assert!(reader_gone(&anyhow::Error::new(json).context("print")));
        let text = writeln!(ClosedPipe, "row").unwrap_err();
        assert!(reader_gone(&anyhow::Error::new(text)));
        let other = std::io::Error::other("disk full");
        assert!(!reader_gone(&anyhow::Error::new(other)));
    }

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
