//! What the node shutdown manager asks of systemd-logind over the system
//! bus (`DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket), as the
//! kubelet asks it: the longest delay a lock may hold a shutdown
//! (`InhibitDelayMaxUSec`), a `delay` lock on `shutdown` (a file
//! descriptor: the shutdown waits while it is open), the
//! `PrepareForShutdown` signal, and, when the delay is too short, a
//! drop-in of logind's configuration and logind told to read it again.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use futures::{Stream, StreamExt};
use zbus::message::Type;
use zbus::{Connection, MatchRule, MessageStream, OwnedVariant};

const LOGIND_SERVICE: &str = "org.freedesktop.login1";
const LOGIND_OBJECT: &str = "/org/freedesktop/login1";
const LOGIND_INTERFACE: &str = "org.freedesktop.login1.Manager";
/// The drop-in the kubelet writes (and so the one its agent replaces).
const LOGIND_DROP_IN: &str = "99-kubelet.conf";

/// Why logind could not be asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogindError {
    /// The system bus, or logind on it, did not answer as it should.
    #[error("{what}: {source}")]
    Bus {
        what: &'static str,
        #[source]
        source: zbus::Error,
    },
    /// The drop-in could not be written.
    #[error("failed writing logind shutdown inhibit override file {path}: {source}")]
    DropIn {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn bus(what: &'static str) -> impl FnOnce(zbus::Error) -> LogindError {
    move |source| LogindError::Bus { what, source }
}

/// A connection to the system bus, where logind is.
pub(crate) struct Logind {
    connection: Connection,
}

impl Logind {
    /// Connects to the system bus.
    pub(crate) async fn connect() -> Result<Self, LogindError> {
        let connection = Connection::system()
            .await
            .map_err(bus("cannot connect to the system bus"))?;
        Ok(Self { connection })
    }

    /// The longest delay logind lets a lock hold a shutdown.
    pub(crate) async fn inhibit_delay(&self) -> Result<Duration, LogindError> {
        let what = "failed reading InhibitDelayMaxUSec property from logind";
        let reply = self
            .connection
            .call_method(
                Some(LOGIND_SERVICE),
                LOGIND_OBJECT,
                Some("org.freedesktop.DBus.Properties"),
                "Get",
                &(LOGIND_INTERFACE, "InhibitDelayMaxUSec"),
            )
            .await
            .map_err(bus(what))?;
        let value: OwnedVariant = reply.body().deserialize().map_err(bus(what))?;
        let micros = u64::try_from(value).map_err(|e| LogindError::Bus {
            what: "InhibitDelayMaxUSec from logind is not a uint64 as expected",
            source: e,
        })?;
        Ok(Duration::from_micros(micros))
    }

    /// Takes a `delay` lock on the shutdown, named as the kubelet names its
    /// own: the shutdown waits (up to the delay) until it is dropped.
    pub(crate) async fn inhibit(&self) -> Result<OwnedFd, LogindError> {
        let what = "failed creating systemd inhibitor";
        let reply = self
            .connection
            .call_method(
                Some(LOGIND_SERVICE),
                LOGIND_OBJECT,
                Some(LOGIND_INTERFACE),
                "Inhibit",
                &(
                    "shutdown",
                    "kubelet",
                    "Kubelet needs time to handle node shutdown",
                    "delay",
                ),
            )
            .await
            .map_err(bus(what))?;
        let fd: zbus::OwnedFd = reply
            .body()
            .deserialize()
            .map_err(bus("failed storing inhibit lock file descriptor"))?;
        Ok(fd.into())
    }

    /// Tells logind to read its configuration again (SIGHUP through
    /// systemd, as the kubelet does).
    pub(crate) async fn reload(&self) -> Result<(), LogindError> {
        self.connection
            .call_method(
                Some("org.freedesktop.systemd1"),
                "/org/freedesktop/systemd1",
                Some("org.freedesktop.systemd1.Manager"),
                "KillUnit",
                &("systemd-logind.service", "all", 1i32),
            )
            .await
            .map_err(bus("unable to reload logind conf"))?;
        Ok(())
    }

    /// logind's `PrepareForShutdown` signals from now on: `true` when the
    /// node starts shutting down, `false` when that is cancelled. The
    /// stream ends with the connection.
    pub(crate) async fn shutdown_signals(
        &self,
    ) -> Result<impl Stream<Item = bool> + Unpin + use<>, LogindError> {
        let what = "cannot watch logind's PrepareForShutdown signal";
        let rule = MatchRule::builder()
            .msg_type(Type::Signal)
            .interface(LOGIND_INTERFACE)
            .member("PrepareForShutdown")
            .path(LOGIND_OBJECT)
            .build()
            .map_err(bus(what))?;
        let messages = MessageStream::for_match_rule(rule, &self.connection, None)
            .await
            .map_err(bus(what))?;
        Ok(messages
            .take_while(|m| std::future::ready(m.is_ok()))
            .filter_map(|message| async move {
                let message = message.ok()?;
                match message.body().deserialize::<bool>() {
                    Ok(active) => Some(active),
                    Err(e) => {
                        tracing::error!(error = %e, "Failed obtaining shutdown event, PrepareForShutdown event was not bool type as expected");
                        None
                    }
                }
            })
            .boxed())
    }
}

/// Writes logind's drop-in raising `InhibitDelayMaxSec` to `delay` in
/// `dir`, as the kubelet writes it.
pub(crate) fn write_drop_in(dir: &Path, delay: Duration) -> Result<(), LogindError> {
    let path = dir.join(LOGIND_DROP_IN);
    let failed = |source| LogindError::DropIn {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    let text = format!(
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={}\n",
        delay.as_secs_f64().round()
    );
    std::fs::write(&path, text).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_is_the_kubelets() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("logind.conf.d");
        write_drop_in(&conf, Duration::from_secs(45)).unwrap();
        assert_eq!(
            std::fs::read_to_string(conf.join("99-kubelet.conf")).unwrap(),
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=45\n"
        );
    }
}
