//! Child processes for end-to-end tests: killed when dropped, with their
//! output readable line by line.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// A running child process whose stdout is read line by line.
pub struct ChildProcess {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl ChildProcess {
    /// Spawns `command` with piped stdout; stderr goes to the test's stderr.
    pub fn spawn(name: &str, command: Command) -> Self {
        Self::spawn_with(name, command, Stdio::null())
    }

    /// Spawns `command` with piped stdin as well, for a program that takes
    /// requests there (see [`ChildProcess::send_line`]).
    pub fn spawn_with_stdin(name: &str, command: Command) -> Self {
        Self::spawn_with(name, command, Stdio::piped())
    }

    fn spawn_with(name: &str, mut command: Command, stdin: Stdio) -> Self {
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .stdin(stdin)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        Self {
            name: name.to_string(),
            stdin: child.stdin.take(),
            child,
            stdout: BufReader::new(stdout).lines(),
            seen: Vec::new(),
        }
    }

    /// Reads lines until one satisfies `pred` and returns it; fails on EOF or timeout.
    pub async fn wait_for_line(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let name = self.name.clone();
        let result = tokio::time::timeout(timeout, async {
            loop {
                match self.stdout.next_line().await {
                    Ok(Some(line)) => {
                        self.seen.push(line.clone());
                        if pred(&line) {
                            return line;
                        }
                    }
                    Ok(None) => panic!("{name} exited; its output was:\n{}", self.seen.join("\n")),
                    Err(e) => panic!("reading {name} output: {e}"),
                }
            }
        })
        .await;
        result.unwrap_or_else(|_| {
            panic!(
                "timed out waiting for {name}; output so far:\n{}",
                self.seen.join("\n")
            )
        })
    }

    /// Writes `line` and a newline to the process's stdin.
    pub async fn send_line(&mut self, line: &str) {
        let name = &self.name;
        let stdin = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("{name} has no stdin to write to"));
        let mut data = line.as_bytes().to_vec();
        data.push(b'\n');
        stdin
            .write_all(&data)
            .await
            .unwrap_or_else(|e| panic!("write to {name}: {e}"));
    }

    /// Closes the process's stdin (programs that read requests take EOF
    /// as the signal to stop).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the process to exit and returns its exit code.
    pub async fn wait(&mut self, timeout: Duration) -> Option<i32> {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit", self.name))
            .expect("wait for child");
        status.code()
    }

    /// Kills the process with SIGKILL and reaps it.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("kill child");
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Every stdout line read so far.
    pub fn output(&self) -> &[String] {
        &self.seen
    }
}
