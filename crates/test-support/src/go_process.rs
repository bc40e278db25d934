//! A running `interop/` program, followed through the JSON event lines it
//! prints (`{"event": NAME, "ts": UNIX_NS, ...}`) and driven through the
//! JSON requests it reads on stdin (answered by a `result` event with the
//! request's `id`).

use std::ffi::OsStr;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::go_programs::go_program;
use crate::process::ChildProcess;

/// One `interop/bin/<name>` process.
pub struct GoProcess {
    name: String,
    process: ChildProcess,
    /// Events read while waiting for another, in order, not yet matched.
    pending: Vec<Value>,
    next_id: u64,
}

impl GoProcess {
    /// Starts `interop/bin/<name> ARGS...` (built first if needed).
    pub fn start<I, S>(name: &str, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(go_program(name));
        command.args(args);
        Self {
            name: name.to_string(),
            process: ChildProcess::spawn_with_stdin(name, command),
            pending: Vec::new(),
            next_id: 0,
        }
    }

    /// The first event named `event` for which `pred` holds, read before or
    /// now; it is consumed, other events stay for later calls. Fails the
    /// test after `timeout` or when the program exits first.
    pub async fn event(
        &mut self,
        timeout: Duration,
        event: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let matches = |v: &Value| v["event"] == event && pred(v);
        if let Some(i) = self.pending.iter().position(matches) {
            return self.pending.remove(i);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = self.process.wait_for_line(left, |_| true).await;
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{}: not a JSON event line ({e}): {line}", self.name));
            if matches(&value) {
                return value;
            }
            self.pending.push(value);
        }
    }

    /// Every event named `event` read so far and not consumed.
    pub fn seen(&self, event: &str) -> Vec<&Value> {
        self.pending
            .iter()
            .filter(|v| v["event"] == event)
            .collect()
    }

    /// Sends request `op` with the fields of `args` (an object) and returns
    /// the program's `result` event for it.
    pub async fn request(&mut self, timeout: Duration, op: &str, mut args: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id.to_string();
        args["op"] = op.into();
        args["id"] = id.clone().into();
        self.process.send_line(&args.to_string()).await;
        self.event(timeout, "result", |v| v["id"] == id.as_str())
            .await
    }

    /// Closes stdin, which asks the program to stop.
    pub fn close_stdin(&mut self) {
        self.process.close_stdin();
    }

    /// Waits for the program to exit and returns its exit code.
    pub async fn wait(&mut self, timeout: Duration) -> Option<i32> {
        self.process.wait(timeout).await
    }

    /// Kills the program with SIGKILL.
    pub async fn kill(&mut self) {
        self.process.kill().await;
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }
}

/// The event's `ts` field: when it happened, in Unix nanoseconds.
pub fn ts(event: &Value) -> i64 {
    event["ts"].as_i64().expect("an event has a ts")
}
