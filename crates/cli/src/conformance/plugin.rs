//! The plugin under test, when the tool starts it (`--exec`): a shell
//! command line, started, stopped with SIGTERM as a kubelet's container
//! runtime stops it, and started again for the restart rules. Its output
//! goes to the tool's standard error, so that `-o json` on standard output
//! stays clean; its standard input is a pipe held open until it stops (a
//! plugin that stops when its input ends keeps running).

use std::os::fd::AsFd;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, ChildStdin, Command};

/// How long a plugin gets to exit on SIGTERM before it is killed (a pod's
/// default termination grace period is 30 s; tests want less).
const STOP_GRACE: Duration = Duration::from_secs(10);

/// What `{instance}` in the command line becomes for the first instance.
pub(crate) const FIRST_INSTANCE: &str = "conformance-1";
/// ... and for a second one started beside it.
pub(crate) const SECOND_INSTANCE: &str = "conformance-2";
/// The placeholder for an instance id (such as a pod UID) in `--exec`.
const INSTANCE: &str = "{instance}";

/// The command line of the plugin, and its process while it runs.
#[derive(Debug)]
pub(crate) struct Plugin {
    command: Option<String>,
    instance: &'static str,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
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
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start {line:?}: {e}"))?;
        self.stdin = child.stdin.take();
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
        if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok())
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
        {
            // `sh -c` execs a simple command line: the plugin gets it.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let waited = tokio::time::timeout(STOP_GRACE, child.wait()).await;
        drop(stdin);
        match waited {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) => Err(format!("wait for the plugin: {e}")),
            Err(_) => {
                let _ = child.kill().await;
                Ok(false)
            }
        }
    }

    /// Whether it exited already (it crashed, or gave up).
    pub(crate) fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }
}
