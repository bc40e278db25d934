//! `nodeplugins demo`: the agent on a scratch root with the example CSI,
//! device plugin and DRA plugins as child processes, narrated step by step:
//! registration, an allocation, a prepared claim, and a plugin killed and
//! restarted.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use nodeplugins::admin::{self, AgentStatus};
use nodeplugins::agent::{Agent, AgentConfig};
use nodeplugins::device::AllocationRequest;
use nodeplugins::dra::{ClaimPod, ClaimRef};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long any step may take before the demo gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// The pod the demo allocates devices and prepares a claim for.
const DEMO_POD_UID: &str = "7d1e-demo-pod";

/// `demo` flags.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Root directory to use (default: a new temporary directory, removed at the end).
    #[arg(long)]
    root_dir: Option<PathBuf>,
    /// Keep everything running at the end until Ctrl-C, to explore with other commands.
    #[arg(long)]
    keep: bool,
}

/// Finds an example binary next to this one (as `cargo build` and installs
/// place them), else on PATH.
fn example(name: &str) -> anyhow::Result<PathBuf> {
    let here = std::env::current_exe().context("locate the nodeplugins binary")?;
    if let Some(dir) = here.parent() {
        let beside = dir.join(name);
        if beside.is_file() {
            return Ok(beside);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join(name).is_file() {
                return Ok(dir.join(name));
            }
        }
    }
    bail!(
        "{name} not found next to {} or on PATH; build the examples with \
         `cargo build --release --workspace` and run target/release/nodeplugins demo",
        here.display()
    )
}

struct Say {
    started: Instant,
}

impl Say {
    #[allow(clippy::print_stdout)]
    fn line(&self, text: impl std::fmt::Display) {
        let t = self.started.elapsed().as_secs_f64();
        println!("[{t:6.3}s] {text}");
    }
}

/// Starts a child quietly (its logs would drown the narration).
fn spawn(program: &Path, args: &[&str]) -> anyhow::Result<Child> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("start {}", program.display()))
}

/// Re-reads the agent's status until `pred` holds.
async fn until<T>(
    root: &Path,
    what: &str,
    pred: impl Fn(&AgentStatus) -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        if let Some(value) = admin::status(root).await.ok().as_ref().and_then(&pred) {
            return Ok(value);
        }
        if Instant::now() > deadline {
            bail!("gave up after {STEP_TIMEOUT:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Now, in Unix milliseconds (the agent's status uses them).
fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn ms(since: Instant) -> String {
    format!("{:.1} ms", since.elapsed().as_secs_f64() * 1000.0)
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let say = Say {
        started: Instant::now(),
    };
    // Declared first, so dropped last: removed after the children it holds
    // are gone, also when a step fails.
    let scratch = match &args.root_dir {
        Some(_) => None,
        None => Some(Scratch(tempdir()?)),
    };
    let root = match (&args.root_dir, &scratch) {
        (Some(dir), _) => dir.clone(),
        (None, Some(dir)) => dir.0.clone(),
        (None, None) => bail!("no root directory"),
    };
    let csi_driver = example("example-csi-driver")?;
    let registrar = example("nodeplugins-csi-registrar")?;
    let device_plugin = example("example-device-plugin")?;
    let dra_driver = example("example-dra-driver")?;

    say.line(format!("starting the agent on {}", root.display()));
    let shutdown = CancellationToken::new();
    let mut config = AgentConfig::new(&root);
    config.dra.cleanup_grace = Duration::from_secs(30);
    let agent = Agent::new(config);
    let agent = tokio::spawn(agent.run(shutdown.clone()));
    until(&root, "the agent", |_| Some(())).await?;
    say.line("  agent up: watching plugins_registry/, serving device-plugins/kubelet.sock and its admin socket");

    let root_str = root.display().to_string();
    let csi_socket = root.join("plugins/csi.example.com/csi.sock");
    std::fs::create_dir_all(root.join("plugins/csi.example.com"))?;
    let csi_socket_str = csi_socket.display().to_string();
    say.line("starting example-csi-driver and nodeplugins-csi-registrar (the node-driver-registrar replacement)");
    let t = Instant::now();
    let _csi = spawn(
        &csi_driver,
        &[
            "--endpoint",
            &format!("unix://{csi_socket_str}"),
            "--node-id",
            "demo-node",
        ],
    )?;
    let registry = root.join("plugins_registry").display().to_string();
    let _registrar = spawn(
        &registrar,
        &[
            &format!("--csi-address={csi_socket_str}"),
            &format!("--kubelet-registration-path={csi_socket_str}"),
            &format!("--plugin-registration-path={registry}"),
        ],
    )?;
    let node_id = until(&root, "the CSI driver", |s| {
        s.csi_drivers
            .iter()
            .find(|d| d.name == "csi.example.com" && !d.node_id.is_empty())
            .map(|d| d.node_id.clone())
    })
    .await?;
    say.line(format!(
        "  CSI driver csi.example.com registered, node id {node_id:?} ({} after start)",
        ms(t)
    ));

    say.line("starting example-device-plugin (4 fake devices on 2 NUMA nodes), registering through kubelet.sock");
    let t = Instant::now();
    let _devices = spawn(&device_plugin, &["--root-dir", &root_str, "--devices", "4"])?;
    until(&root, "the device plugin", |s| {
        s.resources
            .iter()
            .find(|r| r.name == "example.com/device" && r.allocatable == 4)
            .map(|_| ())
    })
    .await?;
    say.line(format!(
        "  resource example.com/device: capacity 4, allocatable 4 ({})",
        ms(t)
    ));

    let request = AllocationRequest::new(DEMO_POD_UID, "default", "demo-pod", "main")
        .resource("example.com/device", 2);
    let allocation = admin::allocate(&root, &request).await?;
    if let Some(a) = allocation.allocations.first() {
        say.line(format!(
            "  allocated {} to pod demo-pod container main (same NUMA node); CDI {}",
            a.devices.join(" and "),
            a.cdi_devices.join(", ")
        ));
    }

    say.line("starting example-dra-driver as instance pod-a (4 fake GPUs with device health)");
    let t = Instant::now();
    let dra_args = ["--root-dir", root_str.as_str(), "--instance", "pod-a"];
    let mut dra = spawn(&dra_driver, &dra_args)?;
    let connected = |s: &AgentStatus| {
        s.dra_drivers
            .iter()
            .find(|d| d.name == "dra.example.com")
            .filter(|d| d.instances.iter().any(|i| i.connected))
            .cloned()
    };
    let d = until(&root, "the DRA driver", connected).await?;
    let service = d
        .instances
        .first()
        .map(|i| i.service.to_string())
        .unwrap_or_default();
    say.line(format!(
        "  DRA driver dra.example.com connected over {service} ({})",
        ms(t)
    ));

    let claim = ClaimRef {
        namespace: "default".into(),
        name: "demo-claim".into(),
        uid: "0f2c-demo".into(),
    };
    let pod = ClaimPod::new(DEMO_POD_UID, "demo-pod", vec!["main".into()]);
    let prepared =
        admin::dra_prepare(&root, "dra.example.com", vec![claim.clone()], Some(pod)).await?;
    if let Some(c) = prepared.claims.first() {
        let cdi: Vec<String> = c
            .devices
            .iter()
            .flat_map(|d| d.cdi_device_ids.clone())
            .collect();
        say.line(format!(
            "  prepared claim {}: CDI {}",
            c.claim,
            cdi.join(", ")
        ));
    }
    let socket = root
        .join(nodeplugins_api::constants::pod_resources::DIR)
        .join(nodeplugins_api::constants::pod_resources::SOCKET);
    let pod = crate::pod_resources::get(&socket, "default", "demo-pod").await?;
    if let Some(main) = pod.containers.first() {
        let devices: Vec<String> = main
            .devices
            .iter()
            .flat_map(|d| d.device_ids.clone())
            .collect();
        let claims: Vec<&str> = main
            .dynamic_resources
            .iter()
            .map(|r| r.claim_name.as_str())
            .collect();
        say.line(format!(
            "  pod-resources API: pod default/demo-pod container {} holds {} and claim {}",
            main.name,
            devices.join(", "),
            claims.join(", ")
        ));
    }

    say.line("killing the DRA driver with SIGKILL (its sockets stay behind)");
    let t = Instant::now();
    dra.kill().await?;
    let pending = until(&root, "the drop", |s| {
        s.dra_drivers
            .iter()
            .find(|d| d.name == "dra.example.com")
            .and_then(|d| d.pending_cleanup.clone())
    })
    .await?;
    say.line(format!(
        "  connection drop seen at once ({}), no call needed; cleanup scheduled in {:.0} s unless it comes back",
        ms(t),
        pending.in_ms as f64 / 1000.0
    ));
    say.line("restarting it");
    let t = Instant::now();
    let restarted_at = unix_ms_now();
    let _dra = spawn(&dra_driver, &dra_args)?;
    // The old instance's monitor may reach the new socket before the
    // re-created registration socket is handled (its instance is then
    // deregistered and the new one registered, as the kubelet does): only an
    // instance registered since the restart, connected and in use, is the
    // restarted driver.
    until(&root, "the restarted DRA driver", |s| {
        s.dra_drivers
            .iter()
            .find(|d| d.name == "dra.example.com" && d.pending_cleanup.is_none())
            .filter(|d| {
                d.instances
                    .iter()
                    .any(|i| i.connected && i.in_use && i.registered_at_unix_ms >= restarted_at)
            })
            .cloned()
    })
    .await?;
    say.line(format!(
        "  registered again, reconnected and cleanup cancelled ({} after restart)",
        ms(t)
    ));
    let prepared = admin::dra_prepare(&root, "dra.example.com", vec![claim], None).await?;
    let again = prepared.claims.first().is_some_and(|c| c.error.is_none());
    say.line(format!("  prepare works again: {again}"));

    let status = admin::status(&root).await?;
    say.line(format!(
        "done: {} registration sockets, {} CSI driver, {} device resource, {} DRA driver",
        status.plugins.len(),
        status.csi_drivers.len(),
        status.resources.len(),
        status.dra_drivers.len()
    ));
    if args.keep {
        say.line(format!(
            "still running; try `nodeplugins status --root-dir {}` or `nodeplugins events --root-dir {} --follow`; Ctrl-C stops",
            root.display(),
            root.display()
        ));
        tokio::signal::ctrl_c().await?;
    } else {
        say.line(format!(
            "explore it yourself: `nodeplugins demo --keep`, then `nodeplugins status --root-dir {}`",
            if scratch.is_some() { "DIR" } else { root_str.as_str() }
        ));
    }
    shutdown.cancel();
    let _ = agent.await;
    Ok(())
}

/// The demo's own temporary root, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh directory under the system temporary directory.
fn tempdir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    for n in 0..1000u32 {
        let dir = base.join(format!("nodeplugins-demo-{}-{n}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("create {}", dir.display())),
        }
    }
    bail!("cannot create a directory under {}", base.display())
}
