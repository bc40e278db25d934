//! Starting the control plane's processes (etcd, the API server, the
//! scheduler and the controller-manager): spawned with their logs in
//! files, their start-up events read, a test failed with the end of the log
//! when one does not come up.

use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;
use tokio::io::{BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// Log lines shown when start-up fails.
const LOG_TAIL_LINES: usize = 40;

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

/// A loopback port that was free a moment ago. The API server binds it
/// right after, so another process taking it in between is unlikely.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("bind a free loopback port")
        .port()
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
