//! `nodeplugins bench registrar`: the least a plugin manager can do, as a
//! baseline. For each socket created in a directory it dials (retrying a
//! refused dial as the agent does), calls GetInfo and then
//! NotifyRegistrationStatus(true) on the same connection, and nothing else:
//! no handler, no state, no service connection. A benchmark running the
//! same plugins against it and against the agent tells the plugins' own
//! cost from the agent's. Once it watches the directory it prints one JSON
//! line, `{"event":"watching","dir":DIR}`.

use std::path::PathBuf;

use anyhow::Context;
use futures::StreamExt;
use inotify::{Inotify, WatchMask};
use nodeplugins::plugin_manager::{CONNECTION_REFUSED_GRACE, DIAL_TIMEOUT, NOTIFY_TIMEOUT};
use nodeplugins_api::pluginregistration::v1::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use nodeplugins_api::transport::{UnaryConnection, connect_when_listening};
use tokio::signal::unix::{SignalKind, signal};

/// `nodeplugins bench registrar` flags.
#[derive(Debug, clap::Args)]
pub(crate) struct RegistrarArgs {
    /// The registration directory to watch (not recursively).
    #[arg(long)]
    dir: PathBuf,
}

/// NotifyRegistrationStatus's limit; GetInfo gets the same.
const CALL_TIMEOUT: std::time::Duration = NOTIFY_TIMEOUT;

/// Registers every socket created in `--dir` until SIGTERM or SIGINT.
pub(crate) async fn run_registrar(args: RegistrarArgs) -> anyhow::Result<()> {
    let inotify = Inotify::init().context("inotify")?;
    inotify
        .watches()
        .add(&args.dir, WatchMask::CREATE)
        .with_context(|| format!("watch {}", args.dir.display()))?;
    let mut events = inotify
        .into_event_stream([0u8; 4096])
        .context("inotify events")?;
    // Ready: a script starts its plugins after this line.
    let ready = serde_json::json!({"event": "watching", "dir": args.dir});
    println!("{ready}");
    let mut terminate = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    loop {
        tokio::select! {
            _ = terminate.recv() => return Ok(()),
            _ = interrupt.recv() => return Ok(()),
            event = events.next() => {
                let Some(event) = event else { return Ok(()) };
                let event = event.context("inotify")?;
                let Some(name) = event.name else { continue };
                if !name.as_encoded_bytes().ends_with(b".sock") {
                    continue;
                }
                let socket = args.dir.join(name);
                tokio::spawn(async move {
                    if let Err(error) = register(&socket).await {
                        tracing::warn!(socket = %socket.display(), %error, "registration failed");
                    }
                });
            }
        }
    }
}

async fn register(socket: &std::path::Path) -> anyhow::Result<()> {
    let mut connection = dial(socket).await?;
    get_info(&mut connection).await?;
    let status = RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    };
    let _: RegistrationStatusResponse = tokio::time::timeout(
        CALL_TIMEOUT,
        connection.call(
            "/pluginregistration.Registration/NotifyRegistrationStatus",
            &status,
        ),
    )
    .await
    .context("NotifyRegistrationStatus timed out")??;
    Ok(())
}

/// Dials a registration socket with the agent's limits, for a like-for-like
/// baseline: a refused dial is retried as the agent retries it.
pub(super) async fn dial(socket: &std::path::Path) -> anyhow::Result<UnaryConnection> {
    let (connection, _) =
        connect_when_listening(socket, DIAL_TIMEOUT, CONNECTION_REFUSED_GRACE).await;
    connection.with_context(|| format!("dial {}", socket.display()))
}

/// One GetInfo call, limited as the agent limits it.
pub(super) async fn get_info(connection: &mut UnaryConnection) -> anyhow::Result<PluginInfo> {
    let call = connection.call("/pluginregistration.Registration/GetInfo", &InfoRequest {});
    let info = tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .context("GetInfo timed out")??;
    Ok(info)
}
