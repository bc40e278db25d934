//! A container's termination message, as the kubelet's runtime manager
//! adds it to an exited container's status: what the container wrote to
//! the file mounted at its `terminationMessagePath` (the last 4 KiB), or,
//! under `FallbackToLogsOnError` when it failed and wrote nothing there,
//! the last 80 lines of its log (at most its last 2 KiB). It follows the
//! runtime's own message, after ": ".

use std::io::{Read, Seek, SeekFrom};

/// The kubelet's `MaxContainerTerminationMessageLength`.
const MAX_MESSAGE: u64 = 4096;
/// The kubelet's `MaxContainerTerminationMessageLogLines`.
const MAX_LOG_LINES: usize = 80;
/// The kubelet's `MaxContainerTerminationMessageLogLength`.
const MAX_LOG_BYTES: usize = 2048;

/// What of an exited container its termination message is read from.
pub(crate) struct Exited<'a> {
    /// Its `io.kubernetes.container.terminationMessagePath` annotation.
    pub(crate) path: Option<&'a str>,
    /// Whether its policy is `FallbackToLogsOnError`.
    pub(crate) fallback_to_logs: bool,
    pub(crate) exit_code: i32,
    /// The runtime's reason.
    pub(crate) reason: &'a str,
    /// Its mounts: (container path, host path).
    pub(crate) mounts: Vec<(&'a str, &'a str)>,
    /// Its log file.
    pub(crate) log_path: &'a str,
}

/// The runtime's `message` with the termination message added.
pub(crate) fn with_termination_message(message: String, exited: &Exited<'_>) -> String {
    let fallback =
        exited.fallback_to_logs && exited.exit_code != 0 && exited.reason != "ContainerCannotRun";
    let (mut text, check_logs) = from_file(exited, fallback);
    if check_logs {
        text = last_log_lines(exited.log_path);
    }
    if text.is_empty() {
        return message;
    }
    if message.is_empty() {
        text
    } else {
        format!("{message}: {text}")
    }
}

/// The file's message, and whether the logs are to be read instead.
fn from_file(exited: &Exited<'_>, fallback: bool) -> (String, bool) {
    let Some(path) = exited.path.filter(|p| !p.is_empty()) else {
        return (String::new(), fallback);
    };
    let Some((_, host)) = exited.mounts.iter().find(|(c, _)| *c == path) else {
        return (String::new(), fallback);
    };
    match read_at_most(host, MAX_MESSAGE) {
        Ok(data) => {
            let empty = data.is_empty();
            (
                String::from_utf8_lossy(&data).into_owned(),
                fallback && empty,
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), fallback),
        Err(e) => (
            format!("Error on reading termination log {host}: {e}"),
            false,
        ),
    }
}

/// The last `max` bytes of file `path`.
fn read_at_most(path: &str, max: u64) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(max)))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}

/// The last lines of a log in the CRI format, as their text (a partial
/// line's part joined to the next), at most its last 2 KiB.
fn last_log_lines(path: &str) -> String {
    let data = match std::fs::read(path) {
        Ok(data) => data,
        Err(e) => return format!("Error on reading termination message from logs: {e}"),
    };
    let lines: Vec<&[u8]> = data
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let mut out = Vec::new();
    for line in &lines[lines.len().saturating_sub(MAX_LOG_LINES)..] {
        // `<time> <stream> <tag> <text>`
        let mut fields = line.splitn(4, |b| *b == b' ');
        let (_, _, tag) = (fields.next(), fields.next(), fields.next());
        let text = fields.next().unwrap_or_default();
        out.extend_from_slice(text);
        if tag != Some(b"P".as_slice()) {
            out.push(b'\n');
        }
    }
    let start = out.len().saturating_sub(MAX_LOG_BYTES);
    String::from_utf8_lossy(&out[start..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited<'a>(dir: &'a str, log: &'a str, code: i32, fallback: bool) -> Exited<'a> {
        Exited {
            path: Some("/dev/termination-log"),
            fallback_to_logs: fallback,
            exit_code: code,
            reason: "Error",
            mounts: vec![("/dev/termination-log", dir)],
            log_path: log,
        }
    }

    #[test]
    fn the_file_is_read_and_the_logs_only_when_it_is_empty_and_the_container_failed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("term");
        let log = dir.path().join("0.log");
        std::fs::write(
            &log,
            "2026-01-01T00:00:00.1Z stdout F one\n2026-01-01T00:00:00.2Z stderr P tw\n2026-01-01T00:00:00.3Z stderr F o\n",
        )
        .unwrap();
        let (file_s, log_s) = (file.to_str().unwrap(), log.to_str().unwrap());
        std::fs::write(&file, "").unwrap();
        assert_eq!(
            with_termination_message(String::new(), &exited(file_s, log_s, 2, true)),
            "one\ntwo\n"
        );
        assert_eq!(
            with_termination_message(String::new(), &exited(file_s, log_s, 0, true)),
            ""
        );
        assert_eq!(
            with_termination_message(String::new(), &exited(file_s, log_s, 2, false)),
            ""
        );
        std::fs::write(&file, "done").unwrap();
        assert_eq!(
            with_termination_message("oom".into(), &exited(file_s, log_s, 2, true)),
            "oom: done"
        );
        let big = "x".repeat(5000) + "end";
        std::fs::write(&file, &big).unwrap();
        let message = with_termination_message(String::new(), &exited(file_s, log_s, 0, false));
        assert_eq!(message.len(), 4096);
        assert!(message.ends_with("end"));
    }
}
