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
        if let Some(stderr) = child.stderr.take() {
            self.stderr_tail = Arc::default();
            self.stderr_task = Some(tokio::spawn(pass_on(stderr, self.stderr_tail.clone())));
        }
        self.child = Some(child);
        Ok(())
    }

    /// Stops it with SIGTERM, killing it after a grace period; says whether
    /// it exited by itself.
    pub(crate) async fn stop(&mut self) -> Result<bool, String> {
        let Some(mut child) = self.child.take() else {
            return Ok(true);
        };
        let stdin = self.stdin.take();
        // The group is the plugin's (`process_group(0)`): every process of
        // the command line gets the signal, as in a container.
        let group = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw);
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
        if let Some(group) = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
        {
            let _ = kill_process_group(group, Signal::KILL);
        }
        child
            .wait()
            .await
            .map(|_| ())
            .map_err(|e| format!("wait for the killed plugin: {e}"))
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
