//! `faulty-plugin`: a device plugin or DRA driver that keeps the kubelet's
//! contract except for one fault, chosen with `--fault`, so each
//! conformance rule can be shown to catch its fault (and only it).
//!
//! ```text
//! faulty-plugin device --kubelet-dir DIR [--fault F]
//! faulty-plugin dra --registry-dir DIR --plugin-dir DIR [--instance ID] [--fault F]
//! ```
//!
//! Without `--fault` it follows every rule. `--fault a,b` breaks several
//! at once, for a kubelet that must first be brought to make a call
//! again. SIGTERM stops it and removes its sockets (unless the fault is
//! `stale-socket`).

mod device;
mod dra;

use std::path::PathBuf;
use std::pin::Pin;

use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::Status;

/// A server stream of the generated services.
pub(crate) type Stream_<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

pub(crate) const RESOURCE: &str = "example.com/faulty";
pub(crate) const DRIVER: &str = "faulty.example.com";
pub(crate) const DEVICES: usize = 4;

/// Whether `fault` is among `faults` (comma-separated).
pub(crate) fn has(faults: &str, fault: &str) -> bool {
    faults.split(',').any(|f| f == fault)
}

/// Flags: `--name value` pairs after the mode.
fn flag(args: &[String], name: &str) -> Option<String> {
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let fault = flag(&args, "--fault").unwrap_or_default();
    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            term.recv().await;
            shutdown.cancel();
        });
    }
    match args.first().map(String::as_str) {
        Some("device") => {
            let dir = PathBuf::from(flag(&args, "--kubelet-dir").unwrap_or_default());
            device::device_plugin(&dir, &fault, shutdown).await
        }
        Some("dra") => {
            let registry = PathBuf::from(flag(&args, "--registry-dir").unwrap_or_default());
            let plugin_dir = PathBuf::from(flag(&args, "--plugin-dir").unwrap_or_default());
            // Per-instance socket names, so a second instance can start
            // beside the first; the fault keeps the names fixed.
            let instance = flag(&args, "--instance").filter(|_| !has(&fault, "ignores-instance"));
            dra::dra_driver(
                &registry,
                &plugin_dir,
                instance.as_deref(),
                &fault,
                shutdown,
            )
            .await
        }
        _ => anyhow::bail!("usage: faulty-plugin device|dra ... [--fault F]"),
    }
}

/// For the `no-unlink-on-start` fault: refuses to start over a socket
/// file an earlier, killed instance left, as a server that binds without
/// removing it first does.
pub(crate) fn refuse_stale(fault: &str, socket: &std::path::Path) -> anyhow::Result<()> {
    if has(fault, "no-unlink-on-start") && socket.exists() {
        anyhow::bail!("bind {}: address already in use", socket.display());
    }
    Ok(())
}

/// A stream fed by `body` through a channel.
pub(crate) fn async_stream<T, F, Fut>(body: F) -> Stream_<T>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<Result<T, Status>>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(body(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
