//! Starting the control plane's processes (etcd, the API server, the
//! scheduler, the controller-manager, the metrics server): spawned with their logs in
//! files, their start-up events read, a test failed with the end of the log
//! when one does not come up.

use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

/// Log lines shown when start-up fails.
const LOG_TAIL_LINES: usize = 40;
/// How often a health path is asked while a program starts.
const HEALTH_POLL: Duration = Duration::from_millis(100);

/// Spawns `command` with stdout to `stdout` and stderr to the file `log`,
/// killed when dropped.
pub(crate) fn spawn(command: &mut Command, stdout: Stdio, log: &Path) -> Child {
    let log_file = File::create(log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
    command
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(log_file)
        .kill_on_drop(true);
    command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {:?}: {e}", command.as_std()))
}

/// Reads event lines (`{"event": NAME, ...}`) until one named `name`;
/// `None` when the output ends first.
pub(crate) async fn next_event(
    lines: &mut Lines<BufReader<ChildStdout>>,
    name: &str,
) -> Option<Value> {
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(event) = serde_json::from_str::<Value>(&line)
            && event["event"] == name
        {
            return Some(event);
        }
    }
    None
}

/// Where [`free_port`] looks: below Linux's ephemeral range (32768 and
/// up by default), from which the kernel picks the source port of every
/// outgoing connection. A port the kernel handed out and took back could
/// be given to one of the many connections the tests' processes open
/// before the program it was meant for binds it (`bind: address already
/// in use`); a port below the range is never given that way.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A loopback port that was free a moment ago, below the ephemeral range.
/// The program binds it right after; another test picking the same one
/// in between is unlikely, as each starts at a point of its own.
pub(crate) fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let span = u64::from(PORTS.end - PORTS.start);
    let start = hasher.finish() % span;
    (0..span)
        .map(|i| PORTS.start + u16::try_from((start + i) % span).unwrap_or(0))
        .find(|port| TcpListener::bind((Ipv4Addr::LOCALHOST, *port)).is_ok())
        .expect("a free loopback port below the ephemeral range")
}

/// Fails the test: what went wrong, the command line and the end of its log.
pub(crate) fn startup_failed(what: &str, command: &Command, log: &Path) -> ! {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    panic!(
        "{what}\ncommand: {:?}\nlast lines of {}:\n{tail}",
        command.as_std(),
        log.display()
    );
}

/// Polls `https://127.0.0.1:<port><path>` of `child` (a health path:
/// `/healthz`, `/livez`) until it answers `ok`, or `deadline`; an error
/// says why it never did.
pub(crate) async fn wait_healthy(
    child: &mut Child,
    port: u16,
    path: &str,
    deadline: Instant,
) -> Result<(), String> {
    let url = format!("https://127.0.0.1:{port}{path}");
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited ({status})"));
        }
        let output = Command::new("curl")
            .args(["--silent", "--insecure", "--max-time", "2"])
            .arg(&url)
            .output()
            .await
            .map_err(|e| format!("run curl: {e}"))?;
        if output.status.success() && output.stdout == b"ok" {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{url} did not answer ok in time: {}",
                String::from_utf8_lossy(&output.stdout)
            ));
        }
        tokio::time::sleep(HEALTH_POLL).await;
    }
}
