//! Container log files as the kubelet reads them (`cri-client`'s
//! `ReadLogs`): each line in the CRI format (`<RFC 3339 time> <stdout|stderr>
//! <tag> <message>`, tag `F` for a full line or `P` for a part, which
//! loses its newline so that the parts join) or the Docker JSON format,
//! the first line deciding; `tailLines` counted from the file's end,
//! lines older than `since` skipped, `timestamps` put before each logical
//! line (fixed nine-digit fractions), `limitBytes` cutting the output;
//! `follow` waits at the end for the file to grow, starts again from the
//! beginning when it is made again (rotation), and ends once the
//! container no longer runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use inotify::WatchMask;
use k8s_openapi::jiff::Timestamp;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, BufReader};
use tokio::sync::mpsc;

use crate::fs_watch::{FsWatch, FsWatcher};

/// How often a followed log at its end checks that its container still
/// runs (the kubelet's `stateCheckPeriod`).
const STATE_CHECK_PERIOD: Duration = Duration::from_secs(5);

/// What part of the log to give, and how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogOptions {
    /// Skip lines older than this.
    pub(crate) since: Option<Timestamp>,
    /// Only the last this many lines of the file.
    pub(crate) tail: Option<u64>,
    /// Stop after this many bytes.
    pub(crate) limit_bytes: Option<u64>,
    /// Put each line's time before it.
    pub(crate) timestamps: bool,
    /// Wait for more while the container runs.
    pub(crate) follow: bool,
}

/// One line of the file, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LogMessage {
    time: Timestamp,
    /// The seconds east of UTC the line's time was written in.
    offset_seconds: i32,
    /// What it adds to the output: the message, with its newline unless
    /// it is a part.
    log: Vec<u8>,
}

/// The two formats a file may be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Cri,
    DockerJson,
}

/// A line in neither format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadLine(String);

fn parse_time(text: &str) -> Result<(Timestamp, i32), BadLine> {
    let time: Timestamp = text
        .parse()
        .map_err(|e| BadLine(format!("unexpected timestamp format {text:?}: {e}")))?;
    let offset = if text.ends_with(['Z', 'z']) {
        0
    } else {
        let tail = text.get(text.len().saturating_sub(6)..).unwrap_or("");
        let sign = if tail.starts_with('-') { -1 } else { 1 };
        let hours: i32 = tail.get(1..3).and_then(|h| h.parse().ok()).unwrap_or(0);
        let minutes: i32 = tail.get(4..6).and_then(|m| m.parse().ok()).unwrap_or(0);
        sign * (hours * 3600 + minutes * 60)
    };
    Ok((time, offset))
}

fn parse_cri(line: &[u8]) -> Result<LogMessage, BadLine> {
    let mut fields = line.splitn(4, |b| *b == b' ');
    let (Some(time), Some(stream), Some(tag)) = (fields.next(), fields.next(), fields.next())
    else {
        return Err(BadLine(format!(
            "log line {:?} is not in the CRI format",
            String::from_utf8_lossy(line)
        )));
    };
    let (time, offset_seconds) = parse_time(&String::from_utf8_lossy(time))?;
    if stream != b"stdout" && stream != b"stderr" {
        return Err(BadLine(format!(
            "unexpected stream type {:?}",
            String::from_utf8_lossy(stream)
        )));
    }
    // More tags may follow the first after ':'.
    let partial = tag.split(|b| *b == b':').next() == Some(b"P");
    let mut log = fields.next().unwrap_or_default().to_vec();
    if !partial {
        log.push(b'\n');
    }
    Ok(LogMessage {
        time,
        offset_seconds,
        log,
    })
}

#[derive(serde::Deserialize)]
struct DockerLine {
    log: String,
    stream: String,
    time: String,
}

fn parse_docker(line: &[u8]) -> Result<LogMessage, BadLine> {
    let parsed: DockerLine = serde_json::from_slice(line)
        .map_err(|e| BadLine(format!("failed with {e} to unmarshal log")))?;
    let (time, offset_seconds) = parse_time(&parsed.time)?;
    if parsed.stream != "stdout" && parsed.stream != "stderr" {
        return Err(BadLine(format!(
            "unexpected stream type {:?}",
            parsed.stream
        )));
    }
    Ok(LogMessage {
        time,
        offset_seconds,
        log: parsed.log.into_bytes(),
    })
}

fn parse(format: Format, line: &[u8]) -> Result<LogMessage, BadLine> {
    match format {
        Format::Cri => parse_cri(line),
        Format::DockerJson => parse_docker(line),
    }
}

/// The format the first line is in.
fn detect(line: &[u8]) -> Option<Format> {
    if parse_cri(line).is_ok() {
        Some(Format::Cri)
    } else if parse_docker(line).is_ok() {
        Some(Format::DockerJson)
    } else {
        None
    }
}

/// `time` as the kubelet prints it: `2006-01-02T15:04:05.000000000Z07:00`
/// in the zone it was written in.
fn format_time(time: Timestamp, offset_seconds: i32) -> String {
    let offset = k8s_openapi::jiff::tz::Offset::from_seconds(offset_seconds)
        .unwrap_or(k8s_openapi::jiff::tz::Offset::UTC);
    let civil = offset.to_datetime(time);
    let zone = if offset_seconds == 0 {
        "Z".to_string()
    } else {
        let sign = if offset_seconds < 0 { '-' } else { '+' };
        let abs = offset_seconds.unsigned_abs();
        format!("{sign}{:02}:{:02}", abs / 3600, (abs % 3600) / 60)
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}{zone}",
        civil.year(),
        civil.month(),
        civil.day(),
        civil.hour(),
        civil.minute(),
        civil.second(),
        civil.subsec_nanosecond()
    )
}

/// The offset of the first of the last `lines` lines of `content` (a
/// final line without its newline counts).
fn tail_start(content: &[u8], lines: u64) -> usize {
    if lines == 0 {
        return content.len();
    }
    let mut seen = 0;
    // A final newline ends the last line; it does not start another.
    let end = content
        .len()
        .saturating_sub(usize::from(content.ends_with(b"\n")));
    for i in (0..end).rev() {
        if content[i] == b'\n' {
            seen += 1;
            if seen == lines {
                return i + 1;
            }
        }
    }
    0
}

/// Writes what the options let through, and says when to stop.
struct Writer {
    options: LogOptions,
    format: Option<Format>,
    /// The next message begins a line (timestamps go there).
    at_line_start: bool,
    written: u64,
    /// Without `follow`, how many more lines a tail gives: the file may
    /// grow while it is read, and a tail of N gives N lines however
    /// much was appended since it was measured.
    lines_left: Option<u64>,
    out: mpsc::Sender<Bytes>,
}

/// Why the reading stopped early.
enum Stop {
    /// The limit is reached, or the reader went.
    Done,
}

impl Writer {
    /// One line of the file (without its newline).
    async fn line(&mut self, line: &[u8]) -> Result<(), Stop> {
        if line.is_empty() {
            return Ok(());
        }
        let format = match self.format {
            Some(format) => format,
            None => match detect(line) {
                Some(format) => *self.format.insert(format),
                None => {
                    tracing::warn!(line = %String::from_utf8_lossy(line), "log line in no known format: skipped");
                    return Ok(());
                }
            },
        };
        let message = match parse(format, line) {
            Ok(message) => message,
            Err(e) => {
                tracing::warn!(error = %e, "log line skipped");
                return Ok(());
            }
        };
        // A parsed line counts toward the tail even when `since` skips it.
        let last = match &mut self.lines_left {
            Some(left) => {
                *left = left.saturating_sub(1);
                *left == 0
            }
            None => false,
        };
        if self.options.since.is_some_and(|since| message.time < since) {
            return if last { Err(Stop::Done) } else { Ok(()) };
        }
        let mut chunk = Vec::with_capacity(message.log.len() + 36);
        if self.options.timestamps && self.at_line_start {
            chunk.extend_from_slice(format_time(message.time, message.offset_seconds).as_bytes());
            chunk.push(b' ');
        }
        self.at_line_start = message.log.ends_with(b"\n");
        chunk.extend_from_slice(&message.log);
        let mut done = false;
        if let Some(limit) = self.options.limit_bytes {
            let room = limit.saturating_sub(self.written);
            if (chunk.len() as u64) >= room {
                chunk.truncate(usize::try_from(room).unwrap_or(usize::MAX));
                done = true;
            }
        }
        self.written += chunk.len() as u64;
        if !chunk.is_empty() && self.out.send(Bytes::from(chunk)).await.is_err() {
            return Err(Stop::Done);
        }
        if done || last {
            Err(Stop::Done)
        } else {
            Ok(())
        }
    }
}

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogError {
    #[error("failed to open log file {path:?}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read log file {path:?}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Reads the log at `path` into `out` as `options` say; while following,
/// `running` says whether the container still runs. Returns when the
/// log is done, the limit reached, or `out`'s reader gone.
pub(crate) async fn read_logs<F, Fut>(
    path: &Path,
    options: LogOptions,
    watcher: &FsWatcher,
    running: F,
    out: mpsc::Sender<Bytes>,
) -> Result<(), LogError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let open_failed = |source| LogError::Open {
        path: path.to_path_buf(),
        source,
    };
    let read_failed = |source| LogError::Read {
        path: path.to_path_buf(),
        source,
    };
    // Watched before the file is read: growth after the read is seen.
    let mut watch: Option<FsWatch> = match (options.follow, path.parent(), path.file_name()) {
        (true, Some(dir), Some(name)) => watcher
            .watch(
                dir,
                Some(name),
                WatchMask::MODIFY | WatchMask::CREATE | WatchMask::MOVED_TO,
            )
            .ok(),
        _ => None,
    };
    let mut file = tokio::fs::File::open(path).await.map_err(open_failed)?;
    let mut start = 0;
    if let Some(lines) = options.tail {
        let mut content = Vec::new();
        file.read_to_end(&mut content).await.map_err(read_failed)?;
        start = tail_start(&content, lines) as u64;
    }
    file.seek(std::io::SeekFrom::Start(start))
        .await
        .map_err(read_failed)?;
    let follow = options.follow;
    let lines_left = options.tail.filter(|_| !follow);
    if lines_left == Some(0) {
        return Ok(());
    }
    let mut writer = Writer {
        options,
        format: None,
        at_line_start: true,
        written: 0,
        lines_left,
        out,
    };
    let mut reader = BufReader::new(file);
    let mut pending = Vec::new();
    loop {
        let read = reader
            .read_until(b'\n', &mut pending)
            .await
            .map_err(read_failed)?;
        if read > 0 && pending.ends_with(b"\n") {
            pending.pop();
            let line = std::mem::take(&mut pending);
            if writer.line(&line).await.is_err() {
                return Ok(());
            }
            continue;
        }
        // At the end, perhaps within a line still being written.
        if !follow {
            if !pending.is_empty() {
                let line = std::mem::take(&mut pending);
                let _ = writer.line(&line).await;
            }
            return Ok(());
        }
        if !running().await {
            return Ok(());
        }
        let woken = tokio::select! {
            () = FsWatch::fired(&mut watch) => true,
            () = tokio::time::sleep(STATE_CHECK_PERIOD) => false,
            () = writer.out.closed() => return Ok(()),
        };
        if woken && reopened(path, reader.get_ref()).await {
            // Rotated: the new file from its beginning.
            let file = tokio::fs::File::open(path).await.map_err(open_failed)?;
            reader = BufReader::new(file);
            pending.clear();
        }
    }
}

/// Whether the file at `path` is another than `open`.
async fn reopened(path: &Path, open: &tokio::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (tokio::fs::metadata(path).await, open.metadata().await) {
        (Ok(now), Ok(open)) => now.ino() != open.ino() || now.dev() != open.dev(),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
