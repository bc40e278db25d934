//! A system bus of the test's own (a real `dbus-daemon`, on a socket in a
//! temporary directory) and, on it, a stand-in for the part of
//! systemd-logind a node's shutdown manager uses: the
//! `org.freedesktop.login1.Manager` property `InhibitDelayMaxUSec`, its
//! `Inhibit` method (the lock is a pipe's writing end: held while the
//! caller keeps it open), and the `PrepareForShutdown` signal sent when the
//! test says. A kubelet and an agent pointed at it with
//! `DBUS_SYSTEM_BUS_ADDRESS` take their locks from it and hear the signal.

use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tempfile::TempDir;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};

use crate::wait::{TIMEOUT, eventually};

/// A `dbus-daemon` of the test's own.
pub struct SystemBus {
    _daemon: Child,
    address: String,
    _dir: TempDir,
}

impl SystemBus {
    /// Starts the bus; panics when `dbus-daemon` is not installed (the
    /// Debian package `dbus-daemon`, which `scripts/install-runtime-deps`
    /// installs).
    pub async fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("system-bus-")
            .tempdir()
            .expect("a directory for the bus");
        let socket = dir.path().join("bus");
        let config = dir.path().join("bus.conf");
        // Everyone may own names, send and receive: the test's processes
        // all run as one user.
        let text = format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
"#,
            socket.display()
        );
        std::fs::write(&config, text).expect("write the bus's configuration");
        let daemon = Command::new("dbus-daemon")
            .arg("--nofork")
            .arg("--nopidfile")
            .arg(format!("--config-file={}", config.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start dbus-daemon (Debian package dbus-daemon)");
        eventually("the system bus's socket", TIMEOUT, || async {
            socket.exists().then_some(())
        })
        .await;
        Self {
            _daemon: daemon,
            address: format!("unix:path={}", socket.display()),
            _dir: dir,
        }
    }

    /// Its address, for `DBUS_SYSTEM_BUS_ADDRESS`.
    pub fn address(&self) -> &str {
        &self.address
    }
}

/// One `Inhibit` call: its arguments, its caller's process, and the
/// lock's reading end.
struct Lock {
    call: InhibitCall,
    pid: Option<u32>,
    held: pipe::Receiver,
}

/// What an `Inhibit` call asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InhibitCall {
    pub what: String,
    pub who: String,
    pub why: String,
    pub mode: String,
}

struct Manager {
    delay: Duration,
    locks: Arc<Mutex<Vec<Lock>>>,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl Manager {
    #[zbus(property, name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> u64 {
        u64::try_from(self.delay.as_micros()).unwrap_or(u64::MAX)
    }

    async fn inhibit(
        &self,
        what: String,
        who: String,
        why: String,
        mode: String,
        #[zbus(header)] header: zbus::message::Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
    ) -> zbus::fdo::Result<zbus::OwnedFd> {
        let pid = match header.sender() {
            Some(sender) => connection
                .call_method(
                    Some("org.freedesktop.DBus"),
                    "/org/freedesktop/DBus",
                    Some("org.freedesktop.DBus"),
                    "GetConnectionUnixProcessID",
                    &(sender.as_str(),),
                )
                .await
                .ok()
                .and_then(|reply| reply.body().deserialize::<u32>().ok()),
            None => None,
        };
        let (sender, receiver) =
            pipe::pipe().map_err(|e| zbus::fdo::Error::IOError(e.to_string()))?;
        let fd: OwnedFd = sender
            .into_blocking_fd()
            .map_err(|e| zbus::fdo::Error::IOError(e.to_string()))?;
        let call = InhibitCall {
            what,
            who,
            why,
            mode,
        };
        self.locks
            .lock()
            .map_err(|_| zbus::fdo::Error::Failed("poisoned".into()))?
            .push(Lock {
                call,
                pid,
                held: receiver,
            });
        Ok(fd.into())
    }
}

/// Whether lock `lock`'s writing end is open somewhere.
fn is_held(lock: &Lock) -> bool {
    let mut byte = [0u8; 1];
    // Nothing is ever written: 0 is the end (every writer gone),
    // WouldBlock a writer still there.
    matches!(lock.held.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// The stand-in logind, serving on a [`SystemBus`].
pub struct Logind {
    connection: zbus::Connection,
    locks: Arc<Mutex<Vec<Lock>>>,
}

const PATH: &str = "/org/freedesktop/login1";
const INTERFACE: &str = "org.freedesktop.login1.Manager";

impl Logind {
    /// Serves `org.freedesktop.login1` on `bus`, with `delay` as the
    /// longest a lock may hold a shutdown.
    pub async fn serve(bus: &SystemBus, delay: Duration) -> Self {
        let locks = Arc::new(Mutex::new(Vec::new()));
        let manager = Manager {
            delay,
            locks: locks.clone(),
        };
        let connection = zbus::connection::Builder::address(bus.address())
            .name("org.freedesktop.login1")
            .serve_at(PATH, manager)
            .build()
            .await
            .expect("logind on the bus");
        Self { connection, locks }
    }

    /// Every `Inhibit` call made.
    pub fn calls(&self) -> Vec<InhibitCall> {
        let locks = self.locks.lock().expect("the locks");
        locks.iter().map(|l| l.call.clone()).collect()
    }

    /// The locks still held: their writing end open somewhere.
    pub fn held(&self) -> Vec<InhibitCall> {
        let locks = self.locks.lock().expect("the locks");
        locks
            .iter()
            .filter(|l| is_held(l))
            .map(|l| l.call.clone())
            .collect()
    }

    /// How many `Inhibit` calls process `pid` made, and how many of its
    /// locks it still holds.
    pub fn locks_of(&self, pid: u32) -> (usize, usize) {
        let locks = self.locks.lock().expect("the locks");
        let mine: Vec<&Lock> = locks.iter().filter(|l| l.pid == Some(pid)).collect();
        let held = mine.iter().filter(|l| is_held(l)).count();
        (mine.len(), held)
    }

    /// Sends `PrepareForShutdown(active)`, as logind does when a shutdown
    /// starts (`true`) or is cancelled (`false`).
    pub async fn prepare_for_shutdown(&self, active: bool) {
        self.connection
            .emit_signal(
                Option::<&str>::None,
                PATH,
                INTERFACE,
                "PrepareForShutdown",
                &(active,),
            )
            .await
            .expect("send PrepareForShutdown");
    }
}
