//! The plugin under test, when the tool starts it (`--exec`): a shell
//! command line, started in a process group of its own, stopped with
//! SIGTERM to the whole group as a kubelet's container runtime stops a
//! container (a command line that does not `exec` its plugin leaves no
//! orphan), killed with the group after a grace period, and started again
//! for the restart rules. Its output goes to the tool's standard error, so
//! that `-o json` on standard output stays clean, and the last lines of its
//! standard error are kept to say why it exited; its standard input is a
//! pipe held open until it stops (a plugin that stops when its input ends
//! keeps running).

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, Command};

/// How long a plugin gets to exit on SIGTERM before it is killed (a pod's
/// default termination grace period is 30 s; tests want less).
const STOP_GRACE: Duration = Duration::from_secs(10);

/// What `{instance}` in the command line becomes for the first instance.
pub(crate) const FIRST_INSTANCE: &str = "conformance-1";
/// ... and for a second one started beside it.
pub(crate) const SECOND_INSTANCE: &str = "conformance-2";
/// The placeholder for an instance id (such as a pod UID) in `--exec`.
const INSTANCE: &str = "{instance}";
/// How many of the plugin's last standard error lines are kept.
const STDERR_TAIL: usize = 10;
/// How long an exited plugin's standard error may take to end.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

/// The command line of the plugin, and its process while it runs.
#[derive(Debug)]
pub(crate) struct Plugin {
    command: Option<String>,
    instance: &'static str,
    child: Option<Child>,
    /// The process group of the running command line (its first process's
    /// id), kept apart from the child: a child waited for forgets its id,
    /// while what it started may still run.
    group: Option<Pid>,
    stdin: Option<ChildStdin>,
    /// The last lines the running plugin wrote to standard error, and the
    /// task that copies them.
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
}

impl Plugin {
    /// The plugin started by `command` (`sh -c`), or one the tool does not
    /// start.
    pub(crate) fn new(command: Option<String>) -> Self {
        Self {
            command,
            instance: FIRST_INSTANCE,
            child: None,
            group: None,
            stdin: None,
            stderr_tail: Arc::default(),
            stderr_task: None,
        }
    }

    /// A second instance beside this one, when the command line has an
    /// `{instance}` to tell them apart.
    pub(crate) fn second(&self) -> Option<Self> {
        let command = self.command.as_ref().filter(|c| c.contains(INSTANCE))?;
        Some(Self {
            command: Some(command.clone()),
            instance: SECOND_INSTANCE,
            child: None,
            group: None,
            stdin: None,
            stderr_tail: Arc::default(),
            stderr_task: None,
        })
    }

    /// Whether the tool starts the plugin, so restart rules can run.
    pub(crate) fn managed(&self) -> bool {
        self.command.is_some()
    }

    /// Starts it (nothing to do when the tool does not manage it).
    pub(crate) fn start(&mut self) -> Result<(), String> {
        let Some(line) = &self.command else {
            return Ok(());
        };
        let line = &line.replace(INSTANCE, self.instance);
        let stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| format!("duplicate standard error: {e}"))?;
        let mut child = Command::new("sh")
            .args(["-c", line])
            .stdin(Stdio::piped())
            .stdout(Stdio::from(stderr))
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start {line:?}: {e}"))?;
        self.stdin = child.stdin.take();
        self.group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw);
        if let Some(stderr) = child.stderr.take() {
            self.stderr_tail = Arc::default();
            self.stderr_task = Some(tokio::spawn(pass_on(stderr, self.stderr_tail.clone())));
        }
        self.child = Some(child);
        Ok(())
    }

    /// Whether it was started and has exited (by itself, or ended by what
    /// a rule did to it).
    pub(crate) fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| child.try_wait().is_ok_and(|status| status.is_some()))
    }

    /// Stops it with SIGTERM, killing it after a grace period; says whether
    /// it exited by itself. Returns once no process of its group runs (a
    /// socket it listened on is closed then).
    pub(crate) async fn stop(&mut self) -> Result<bool, String> {
        let Some(mut child) = self.child.take() else {
            return Ok(true);
        };
        let stdin = self.stdin.take();
        // The group is the plugin's (`process_group(0)`): every process of
        // the command line gets the signal, as in a container.
        let group = self.group.take();
        if let Some(group) = group {
            let _ = kill_process_group(group, Signal::TERM);
        }
        let waited = tokio::time::timeout(STOP_GRACE, child.wait()).await;
        drop(stdin);
        let stopped = match waited {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) => Err(format!("wait for the plugin: {e}")),
            Err(_) => {
                let _ = child.kill().await;
                Ok(false)
            }
        };
        // Whatever of the group is left (a child the shell started).
        if let Some(group) = group {
            let _ = kill_process_group(group, Signal::KILL);
            group_ended(group).await;
        }
        stopped
    }

    /// Kills it and every process of its group with SIGKILL, as a crash or
    /// the OOM killer would: nothing of it runs to clean up.
    pub(crate) async fn kill(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        self.stdin = None;
        let group = self.group.take();
        if let Some(group) = group {
            let _ = kill_process_group(group, Signal::KILL);
        }
        let waited = child
            .wait()
            .await
            .map(|_| ())
            .map_err(|e| format!("wait for the killed plugin: {e}"));
        if let Some(group) = group {
            group_ended(group).await;
        }
        waited
    }

    /// Waits until it exits: its exit status and the last lines of its
    /// standard error; never, when the tool did not start it.
    pub(crate) async fn wait_exit(&mut self) -> String {
        let Some(child) = self.child.as_mut() else {
            return std::future::pending().await;
        };
        let status = match child.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => format!("cannot be waited for: {e}"),
        };
        // Its last lines are copied once its standard error ends (at
        // once, unless a process it left behind holds it).
        if let Some(task) = self.stderr_task.as_mut() {
            let _ = tokio::time::timeout(STDERR_DRAIN, task).await;
        }
        self.describe_exit(&status)
    }

    fn describe_exit(&self, status: &str) -> String {
        let tail = self
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>().join(" | "))
            .unwrap_or_default();
        match tail.is_empty() {
            true => status.to_string(),
            false => format!("{status}; its last words: {tail}"),
        }
    }
}

/// How long a killed group may take to end.
const GROUP_END: Duration = Duration::from_secs(5);

/// Waits, up to [`GROUP_END`], until no process of `group` runs: one still
/// exiting holds its sockets open, and a plugin started again at once
/// would find its socket answered and refuse it as in use. A process that
/// has exited and waits to be reaped (by an init that may never reap it)
/// holds nothing, and does not count.
async fn group_ended(group: Pid) {
    let deadline = tokio::time::Instant::now() + GROUP_END;
    while group_runs(group.as_raw_nonzero().get()) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether a process of group `group` runs (is not a zombie), from
/// `/proc/<pid>/stat`: the state and the group follow the command's
/// closing parenthesis.
fn group_runs(group: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        let Some((_, after)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next();
        let _parent = fields.next();
        let pgrp = fields.next().and_then(|g| g.parse::<i32>().ok());
        pgrp == Some(group) && state != Some("Z") && state != Some("X")
    })
}

/// Copies the plugin's standard error to the tool's, keeping the last
/// [`STDERR_TAIL`] lines.
async fn pass_on(stderr: ChildStderr, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut lines = BufReader::new(stderr).lines();
    let mut out = tokio::io::stderr();
    while let Ok(Some(line)) = lines.next_line().await {
        let _ = out.write_all(format!("{line}\n").as_bytes()).await;
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
}
