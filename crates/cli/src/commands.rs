//! The command line: flags → config → wiring.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use nodeplugins::device::AllocationRequest;
use nodeplugins::dra::{ClaimPod, ClaimRef};
use nodeplugins_api::constants::layout::DEFAULT_ROOT_DIR;

use crate::config::{RunArgs, Settings};
use crate::output::{self, Format};
use nodeplugins_sdk::logging::{self, LogFormat};

/// The kubelet's node plugin system: plugin manager, device manager and DRA, as one agent.
#[derive(Debug, Parser)]
#[command(name = "nodeplugins", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Benchmarks (figures quoted in BENCHMARKS.md).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Dynamic Resource Allocation: drivers, prepare, unprepare.
    #[command(subcommand)]
    Dra(DraCommand),
    /// See it work: the agent and the example CSI, device and DRA plugins on
    /// a scratch root, narrated.
    Demo(crate::demo::DemoArgs),
    /// Run the node agent until SIGTERM or SIGINT.
    Run(Box<RunArgs>),
    /// Run the node agent as the kubelet: the kubelet's flags and its
    /// KubeletConfiguration file (also when the binary is run as `kubelet`).
    #[command(disable_help_flag = true)]
    Kubelet {
        /// The kubelet's command line (`--help` lists what is honoured).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Show device plugin resources: capacity, allocatable, allocated, devices, plugins.
    Resources {
        /// Root directory of the agent to ask.
        #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
        root_dir: PathBuf,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Allocate devices to a container, all or nothing, and show what it gets.
    Allocate {
        /// Root directory of the agent to ask.
        #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
        root_dir: PathBuf,
        /// Pod UID.
        #[arg(long)]
        pod: String,
        /// The pod's name, as the pod-resources API reports it [default: the UID].
        #[arg(long)]
        pod_name: Option<String>,
        /// The pod's namespace.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Container name.
        #[arg(long)]
        container: String,
        /// Requests as RESOURCE=COUNT, such as example.com/device=2.
        #[arg(required = true, value_parser = parse_request)]
        requests: Vec<(String, usize)>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Free every device a pod holds.
    Release {
        /// Root directory of the agent to ask.
        #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
        root_dir: PathBuf,
        /// Pod UID.
        #[arg(long)]
        pod: String,
    },
    /// Show the agent's recent events (registrations, failures, DRA
    /// connections and cleanups); with --follow, keep printing new ones.
    Events {
        /// Root directory of the agent to ask.
        #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
        root_dir: PathBuf,
        /// Keep printing events as they happen, until interrupted.
        #[arg(short, long)]
        follow: bool,
        /// Output format (json: one JSON object per line).
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Show the pods bound to the node as the agent serves them (with
    /// --kubeconfig): each pod's phase (admitted, waiting, failed,
    /// releasing) and, for one pod or with -o json, what each container
    /// got: devices, device nodes, mounts, environment, annotations and CDI
    /// devices, as a container runtime is given them.
    Pods {
        /// Root directory of the agent to ask.
        #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
        root_dir: PathBuf,
        /// Only this pod (NAMESPACE/NAME), shown container by container, or
        /// the pods of a namespace (NAMESPACE).
        pod: Option<String>,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Show what the pod-resources socket serves (as monitoring agents read
    /// it): the devices and DRA claims of every pod's containers, one pod,
    /// or the allocatable devices.
    PodResources(crate::pod_resources::PodResourcesArgs),
    /// Check a plugin's registration socket the way the agent would talk to
    /// it: GetInfo, name and version rules, the endpoint and the type's
    /// service. Exits 1 if any check fails. Needs no running agent.
    Check {
        /// The plugin's registration socket.
        socket: PathBuf,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Certify a device plugin or DRA driver against the kubelet's
    /// contract, rule by rule, without a cluster or a kubelet: PASS, FAIL
    /// (with what was seen) or SKIP (with why). Exits 1 if any rule fails.
    Conformance(crate::conformance::ConformanceArgs),
    /// Show the plugins the running agent knows.
    Status {
        /// Root directory of the agent to ask.
        #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
        root_dir: PathBuf,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
}

#[derive(Debug, Subcommand)]
enum DraCommand {
    /// Show DRA drivers: instances, the service chosen, connection, pending cleanup, device health.
    Drivers {
        /// Root directory of the agent to ask.
        #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
        root_dir: PathBuf,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Prepare claims with a driver and show their devices and CDI ids; exits 1 if any claim failed.
    Prepare(ClaimArgs),
    /// Unprepare claims, with the driver given or else every driver that
    /// prepared each; exits 1 if any claim failed.
    Unprepare(UnprepareArgs),
    /// Show the prepared claims (kept across agent restarts), a row per
    /// claim and driver that prepared it: devices, CDI ids.
    Claims {
        /// Root directory of the agent to ask.
        #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
        root_dir: PathBuf,
        /// Output format.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
        output: Format,
    },
}

#[derive(Debug, clap::Args)]
struct UnprepareArgs {
    /// Root directory of the agent to ask.
    #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
    root_dir: PathBuf,
    /// The DRA driver name; without it, each claim goes to every driver
    /// that prepared it, as the agent recorded.
    #[arg(long, requires = "claims")]
    driver: Option<String>,
    /// A claim as NAMESPACE/NAME/UID; repeat for several.
    #[arg(
        long = "claim",
        required_unless_present = "pod",
        conflicts_with = "pod"
    )]
    claims: Vec<ClaimRef>,
    /// A pod as NAMESPACE/NAME: unprepare what it uses, as the agent
    /// recorded when it prepared it (a claim other pods still use is only
    /// released by this one).
    #[arg(long, value_parser = parse_pod)]
    pod: Option<(String, String)>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

#[derive(Debug, clap::Args)]
struct ClaimArgs {
    /// Root directory of the agent to ask.
    #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
    root_dir: PathBuf,
    /// The DRA driver name (with `--claim`).
    #[arg(long, requires = "claims")]
    driver: Option<String>,
    /// A claim as NAMESPACE/NAME/UID; repeat for several.
    #[arg(long = "claim", requires = "driver", required_unless_present = "pod")]
    claims: Vec<ClaimRef>,
    /// A pod as NAMESPACE/NAME, whose claims the agent reads from the
    /// Kubernetes API and prepares as the kubelet does (it needs
    /// `--kubeconfig`), giving each container its CDI ids.
    #[arg(long, value_parser = parse_pod, conflicts_with_all = ["driver", "claims"])]
    pod: Option<(String, String)>,
    /// With `--driver` and `--claim`: the UID of the pod the claims are
    /// prepared for (in their namespace), used by the containers given
    /// with `--container`; the pod-resources API then lists them under
    /// those containers.
    #[arg(long = "pod-uid", requires = "claims")]
    pod_uid: Option<String>,
    /// The pod's name [default: its UID].
    #[arg(long, requires = "pod_uid")]
    pod_name: Option<String>,
    /// A container of the pod that uses the claims; repeat for several.
    #[arg(long = "container", requires = "pod_uid")]
    containers: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Registration latency of a fleet of plugins, measured from the plugin side.
    Fleet(crate::bench::FleetArgs),
    /// Register/deregister cycles against a running agent, with its open fds and RSS before and after.
    Soak(crate::bench::SoakArgs),
    /// A bare registrar (dial, GetInfo, NotifyRegistrationStatus; nothing
    /// else) for sockets created in a directory: a benchmark's baseline.
    Registrar(crate::bench::RegistrarArgs),
    /// What one plugin's registration server costs the agent's client: new
    /// connections, each with two GetInfo calls.
    Probe(crate::bench::ProbeArgs),
}

/// For `run`, the threads its settings ask for (settings that do not
/// resolve give 1: `dispatch` reports why); one for `bench registrar` and
/// `bench probe`, which stand for the agent; `None` (a thread per core)
/// for the others.
pub(crate) fn agent_threads(cli: &Cli) -> Option<usize> {
    match &cli.command {
        Command::Run(args) => Some(Settings::resolve(args).map_or(1, |s| s.worker_threads)),
        Command::Kubelet { .. } => Some(1),
        Command::Bench(BenchCommand::Registrar(_) | BenchCommand::Probe(_)) => Some(1),
        _ => None,
    }
}

pub(crate) async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo(args) => crate::demo::run(args).await,
        Command::Kubelet { args } => crate::kubelet::run(&args).await,
        Command::Run(args) => {
            let settings = Settings::resolve(&args)?;
            if args.print_config {
                let mut out = std::io::stdout().lock();
                std::io::Write::write_all(&mut out, settings.to_toml().as_bytes())?;
                return Ok(());
            }
            logging::init(settings.log_format, &settings.log_level);
            crate::agent_run::run(settings.agent, settings.kube).await
        }
        Command::Dra(DraCommand::Drivers { root_dir, output }) => {
            let status = nodeplugins::admin::status(&root_dir).await?;
            output::dra::drivers(&status.dra_drivers, output, &mut std::io::stdout().lock())
        }
        Command::Dra(DraCommand::Prepare(args)) => {
            if let Some((namespace, name)) = &args.pod {
                let reply = nodeplugins::admin::dra_prepare_pod(&args.root_dir, namespace, name)
                    .await
                    .with_context(|| format!("prepare pod {namespace}/{name}"))?;
                output::dra::prepared_pod(&reply, args.output, &mut std::io::stdout().lock())?;
                if reply.failed() {
                    anyhow::bail!("pod {namespace}/{name}: not every claim could be prepared");
                }
                return Ok(());
            }
            let Some(driver) = args.driver.clone() else {
                anyhow::bail!("--claim needs --driver");
            };
            let total = args.claims.len();
            let pod = claim_pod(&args)?;
            let reply = nodeplugins::admin::dra_prepare(&args.root_dir, &driver, args.claims, pod)
                .await
                .with_context(|| format!("prepare claims with DRA driver {driver}"))?;
            output::dra::prepared(&reply.claims, args.output, &mut std::io::stdout().lock())?;
            let failed = reply.claims.iter().filter(|c| c.error.is_some()).count();
            if failed > 0 {
                anyhow::bail!("{failed} of {total} claim(s) could not be prepared");
            }
            Ok(())
        }
        Command::Dra(DraCommand::Unprepare(args)) => {
            if let Some((namespace, name)) = &args.pod {
                let reply = nodeplugins::admin::dra_unprepare_pod(&args.root_dir, namespace, name)
                    .await
                    .with_context(|| format!("unprepare pod {namespace}/{name}"))?;
                output::dra::unprepared_pod(&reply, args.output, &mut std::io::stdout().lock())?;
                if reply.failed() {
                    anyhow::bail!("pod {namespace}/{name}: not every claim could be unprepared");
                }
                return Ok(());
            }
            let total = args.claims.len();
            let driver = args.driver.as_deref();
            let reply = nodeplugins::admin::dra_unprepare(&args.root_dir, driver, args.claims)
                .await
                .with_context(|| match driver {
                    Some(driver) => format!("unprepare claims with DRA driver {driver}"),
                    None => "unprepare claims".to_string(),
                })?;
            output::dra::unprepared(&reply.claims, args.output, &mut std::io::stdout().lock())?;
            let failed = reply.claims.iter().filter(|c| c.error.is_some()).count();
            if failed > 0 {
                anyhow::bail!("{failed} of {total} claim(s) could not be unprepared");
            }
            Ok(())
        }
        Command::Dra(DraCommand::Claims { root_dir, output }) => {
            let reply = nodeplugins::admin::dra_claims(&root_dir).await?;
            output::dra::claims(&reply, output, &mut std::io::stdout().lock())
        }
        Command::Bench(BenchCommand::Soak(args)) => {
            logging::init(LogFormat::Text, "warn");
            crate::bench::run_soak(args).await
        }
        Command::Bench(BenchCommand::Fleet(args)) => {
            logging::init(LogFormat::Text, "warn");
            crate::bench::run_fleet(args).await
        }
        Command::Bench(BenchCommand::Registrar(args)) => {
            logging::init(LogFormat::Text, "warn");
            crate::bench::run_registrar(args).await
        }
        Command::Bench(BenchCommand::Probe(args)) => {
            logging::init(LogFormat::Text, "warn");
            crate::bench::run_probe(args).await
        }
        Command::Pods {
            root_dir,
            pod,
            output,
        } => {
            let (namespace, name) = match pod.as_deref().map(|p| p.split_once('/')) {
                None => (None, None),
                Some(Some((namespace, name))) => (Some(namespace), Some(name)),
                Some(None) => (pod.as_deref(), None),
            };
            let reply = nodeplugins::admin::pods(&root_dir, namespace, name).await?;
            let detail = name.is_some();
            output::pods::pods(&reply, detail, output, &mut std::io::stdout().lock())?;
            if detail && reply.pods.is_empty() {
                anyhow::bail!("pod {} is not bound to the node", pod.unwrap_or_default());
            }
            Ok(())
        }
        Command::Resources { root_dir, output } => {
            let status = nodeplugins::admin::status(&root_dir).await?;
            output::resources(&status.resources, output, &mut std::io::stdout().lock())
        }
        Command::Allocate {
            root_dir,
            pod,
            pod_name,
            namespace,
            container,
            requests,
            output,
        } => {
            let name = pod_name.unwrap_or_else(|| pod.clone());
            let mut request = AllocationRequest::new(&pod, &namespace, &name, &container);
            request.resources = requests.into_iter().collect();
            let reply = nodeplugins::admin::allocate(&root_dir, &request)
                .await
                .with_context(|| format!("allocate devices to pod {pod} container {container}"))?;
            output::allocations(&reply.allocations, output, &mut std::io::stdout().lock())
        }
        Command::Release { root_dir, pod } => {
            let reply = nodeplugins::admin::release(&root_dir, &pod).await?;
            let mut out = std::io::stdout().lock();
            std::io::Write::write_fmt(
                &mut out,
                format_args!("released {} allocation(s) of pod {pod}\n", reply.released),
            )?;
            Ok(())
        }
        Command::Events {
            root_dir,
            follow,
            output,
        } => {
            let mut events = nodeplugins::admin::events_with(&root_dir, true, follow).await?;
            output::events::header(output, &mut std::io::stdout().lock())?;
            while let Some(event) = events.next().await? {
                let mut out = std::io::stdout().lock();
                output::events::event(&event, output, &mut out)?;
                std::io::Write::flush(&mut out)?;
            }
            Ok(())
        }
        Command::PodResources(args) => crate::pod_resources::run(args).await,
        Command::Check { socket, output } => {
            let report = nodeplugins_conformance::check::check(&socket).await;
            let mut out = std::io::stdout().lock();
            output::check::report(&report, output, &mut out)?;
            match report.failures() {
                0 => Ok(()),
                n => anyhow::bail!("{n} of {} checks failed", report.checks.len()),
            }
        }
        Command::Conformance(args) => crate::conformance::run(args).await,
        Command::Status { root_dir, output } => {
            let status = nodeplugins::admin::status(&root_dir).await?;
            output::status(&status, output, &mut std::io::stdout().lock())
        }
    }
}

/// `NAMESPACE/NAME` of a pod.
fn parse_pod(text: &str) -> Result<(String, String), String> {
    match text.split_once('/') {
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok((namespace.to_string(), name.to_string()))
        }
        _ => Err(format!("{text:?} is not a pod as NAMESPACE/NAME")),
    }
}

/// The pod of `dra prepare --driver D --claim C --pod-uid UID`, in the
/// namespace all its claims share.
fn claim_pod(args: &ClaimArgs) -> anyhow::Result<Option<ClaimPod>> {
    let Some(uid) = &args.pod_uid else {
        return Ok(None);
    };
    if args.containers.is_empty() {
        anyhow::bail!("--pod-uid {uid} needs the containers that use the claims (--container)");
    }
    if let Some(first) = args.claims.first()
        && let Some(other) = args.claims.iter().find(|c| c.namespace != first.namespace)
    {
        anyhow::bail!(
            "the claims of pod {uid} must share its namespace: {} and {} differ",
            first,
            other
        );
    }
    Ok(Some(ClaimPod::new(
        uid.clone(),
        args.pod_name.clone().unwrap_or_else(|| uid.clone()),
        args.containers.clone(),
    )))
}

fn parse_request(text: &str) -> Result<(String, usize), String> {
    let (resource, count) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("expected RESOURCE=COUNT, got {text:?}"))?;
    let count = count
        .parse()
        .map_err(|_| format!("not a device count in {text:?}"))?;
    Ok((resource.to_string(), count))
}
