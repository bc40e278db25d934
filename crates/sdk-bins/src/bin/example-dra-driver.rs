//! `example-dra-driver`: a DRA driver with N fake GPUs, serving `DRAPlugin`
//! v1 and v1beta1 plus device health, registered through
//! `<root>/plugins_registry`.
//!
//! With `--kubeconfig` it runs as in a cluster: it publishes its GPUs as a
//! ResourceSlice pool named after the node, reads each claim it prepares
//! from the API server and prepares the GPUs the scheduler allocated to it.
//! Without one it gives each claim one GPU picked from the claim UID (the
//! same on every instance). With `--cdi-dir` each claim's GPUs get a CDI spec
//! file there, and an opaque configuration for the driver with a `mode`
//! (`{"mode": "shared"}`, from the claim or its DeviceClass) sets
//! `GPU_MODE=<mode>` for the GPUs of the requests it applies to. What each claim got is recorded in the plugin directory, so
//! preparing it again, or unpreparing it after a restart, needs nothing
//! else. A claim whose name starts with `fail` is refused, to show per-claim
//! errors. SIGUSR1 marks the first healthy GPU unhealthy (with a reason),
//! SIGUSR2 marks every GPU healthy again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use nodeplugins_sdk::dra_driver::DeviceHealth;
use nodeplugins_sdk::dra_driver::{
    ApiVersions, Claim, ClaimError, ContainerEdits, DraDriver, DraDriverServer,
    HEALTH_RESEND_INTERVAL, HealthReporter, Pool, PrepareResults, PreparedClaim, PreparedDevice,
    Resources, UnprepareResults,
};
use nodeplugins_sdk::k8s_openapi::api::resource::v1::{Device, DeviceAttribute};
use nodeplugins_sdk::kube;
use nodeplugins_sdk::signals::shutdown_on_signals;
use nodeplugins_sdk_bins::LogFlags;

/// Why a GPU broken by SIGUSR1 is unhealthy.
const BROKEN: &str = "XID 79: fallen off the bus (simulated)";
use tokio::signal::unix::{SignalKind, signal};

/// A DRA driver with fake GPUs.
#[derive(Debug, Parser)]
#[command(name = "example-dra-driver", version)]
struct Flags {
    /// The kubelet root directory: registration under `<root>/plugins_registry`,
    /// service socket under `<root>/plugins/<driver>/`.
    #[arg(long, default_value = "/var/lib/kubelet")]
    root_dir: PathBuf,
    /// The driver name.
    #[arg(long, default_value = "dra.example.com")]
    driver_name: String,
    /// An instance id (such as the pod UID): per-instance socket names, so a
    /// new instance can start beside the old one during an upgrade.
    #[arg(long)]
    instance: Option<String>,
    /// How many GPUs.
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// The pool the devices belong to [default: the node name with
    /// --kubeconfig, else node-local].
    #[arg(long)]
    pool: Option<String>,
    /// DRAPlugin versions to serve, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = ["v1".to_string(), "v1beta1".to_string()])]
    api: Vec<String>,
    /// Do not serve device health.
    #[arg(long)]
    no_health: bool,
    /// Write a CDI spec file per prepared claim in this directory.
    #[arg(long)]
    cdi_dir: Option<PathBuf>,
    /// Run in a cluster: publish ResourceSlices and read claims with this
    /// kubeconfig, or `in-cluster` for the pod's service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The node this driver runs on (with --kubeconfig).
    #[arg(long)]
    node_name: Option<String>,
    #[command(flatten)]
    log: LogFlags,
}

struct ExampleDriver {
    name: String,
    pool: String,
    devices: usize,
    instance: String,
    cdi: bool,
}

impl ExampleDriver {
    /// The device for a claim without an allocation: FNV-1a of the UID, so
    /// every instance agrees.
    fn device_for(&self, uid: &str) -> String {
        let hash = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        format!("gpu-{}", hash % self.devices.max(1) as u64)
    }

    fn prepare_one(&self, claim: &Claim) -> Result<Vec<PreparedDevice>, ClaimError> {
        let c = &claim.claim;
        if c.name.starts_with("fail") {
            return Err(ClaimError::new(format!(
                "claim {}/{} refused: the example driver fails claims named fail*",
                c.namespace, c.name
            )));
        }
        let devices: Vec<(Vec<String>, String, String, Option<String>)> = match &claim.allocation {
            Some(allocation) => allocation
                .devices
                .iter()
                .map(|d| {
                    // The last configuration with a mode wins: the claim's
                    // over the class's.
                    let mode = allocation
                        .config_for(d)
                        .filter_map(|c| c.parameters["mode"].as_str())
                        .last()
                        .map(str::to_string);
                    (
                        vec![d.request.clone()],
                        d.pool.clone(),
                        d.device.clone(),
                        mode,
                    )
                })
                .collect(),
            None => vec![(
                Vec::new(),
                self.pool.clone(),
                self.device_for(c.uid.as_str()),
                None,
            )],
        };
        let prepared = devices
            .into_iter()
            .map(|(requests, pool, device, mode)| {
                tracing::info!(instance = %self.instance, claim = %c.uid, %device, ?mode, "prepared");
                let index = device.trim_start_matches("gpu-").to_string();
                let mut env = vec![format!("EXAMPLE_GPU_{index}=on")];
                env.extend(mode.map(|mode| format!("GPU_MODE={mode}")));
                PreparedDevice {
                    requests,
                    pool,
                    cdi_device_ids: if self.cdi {
                        Vec::new()
                    } else {
                        vec![format!("{}/gpu={device}", self.name)]
                    },
                    container_edits: self.cdi.then(|| ContainerEdits {
                        env,
                        ..Default::default()
                    }),
                    device,
                    share_id: None,
                    metadata: None,
                }
            })
            .collect();
        Ok(prepared)
    }
}

#[nodeplugins_sdk::async_trait]
impl DraDriver for ExampleDriver {
    async fn prepare(&self, claims: Vec<Claim>) -> PrepareResults {
        claims
            .iter()
            .map(|claim| (claim.claim.uid.clone(), self.prepare_one(claim)))
            .collect()
    }

    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults {
        claims
            .into_iter()
            .map(|c| {
                // Nothing to release on fake GPUs; a real driver releases
                // the devices given, also those of an interrupted prepare.
                let devices: Vec<&str> = c.devices.iter().map(|d| d.device.as_str()).collect();
                tracing::info!(instance = %self.instance, claim = %c.claim.uid, ?devices, state = ?c.state, "unprepared");
                (c.claim.uid, Ok(()))
            })
            .collect()
    }
}

/// The GPUs as ResourceSlice devices.
fn published(names: &[String]) -> Vec<Device> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| Device {
            name: name.clone(),
            attributes: Some(BTreeMap::from([(
                "index".to_string(),
                DeviceAttribute {
                    int: Some(i as i64),
                    ..Default::default()
                },
            )])),
            ..Default::default()
        })
        .collect()
}

async fn kube_client(path: &PathBuf) -> anyhow::Result<kube::Client> {
    let config = if path.as_os_str() == "in-cluster" {
        kube::Config::incluster()?
    } else {
        let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
    };
    Ok(kube::Client::try_from(config)?)
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    flags.log.init();
    let mut versions = ApiVersions {
        v1: false,
        v1beta1: false,
    };
    for api in &flags.api {
        match api.as_str() {
            "v1" => versions.v1 = true,
            "v1beta1" => versions.v1beta1 = true,
            other => anyhow::bail!("unknown DRAPlugin version {other:?} (v1, v1beta1)"),
        }
    }
    let node_name = match (&flags.kubeconfig, &flags.node_name) {
        (Some(_), None) => anyhow::bail!("--kubeconfig needs --node-name"),
        (_, name) => name.clone(),
    };
    let pool = flags
        .pool
        .clone()
        .or_else(|| node_name.clone())
        .unwrap_or_else(|| "node-local".into());
    let health = (!flags.no_health).then(HealthReporter::new);
    let names: Vec<String> = (0..flags.devices).map(|i| format!("gpu-{i}")).collect();
    if let Some(health) = &health {
        for name in &names {
            health.set(&pool, name, DeviceHealth::Healthy, "");
        }
    }
    let driver = Arc::new(ExampleDriver {
        name: flags.driver_name.clone(),
        pool: pool.clone(),
        devices: flags.devices,
        instance: flags.instance.clone().unwrap_or_else(|| "-".into()),
        cdi: flags.cdi_dir.is_some(),
    });
    let mut server = DraDriverServer::builder(&flags.driver_name, driver)
        .root_dir(&flags.root_dir)
        .api_versions(versions);
    if let Some(instance) = &flags.instance {
        server = server.instance(instance);
    }
    if let Some(health) = &health {
        server = server.health(health.clone());
    }
    if let Some(dir) = &flags.cdi_dir {
        server = server
            .cdi_kind(format!("{}/gpu", flags.driver_name))
            .cdi_dir(dir);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let shutdown = shutdown_on_signals()?;
        if let (Some(path), Some(node)) = (&flags.kubeconfig, &node_name) {
            let resources = Resources::new();
            resources.set_pool(&pool, Pool::new(published(&names)));
            server = server
                .kube(kube_client(path).await?, node)
                .resources(resources);
        }
        if let Some(health) = health {
            let mut unhealthy = signal(SignalKind::user_defined1())?;
            let mut healthy = signal(SignalKind::user_defined2())?;
            let pool = pool.clone();
            tokio::spawn(async move {
                // The simulated health checker: every device checked at
                // each tick; the signals break and mend them.
                let mut check = tokio::time::interval(HEALTH_RESEND_INTERVAL);
                let mut broken = 0;
                loop {
                    tokio::select! {
                        _ = check.tick() => {
                            for (i, name) in names.iter().enumerate() {
                                if i >= broken {
                                    health.set(&pool, name, DeviceHealth::Healthy, "");
                                } else {
                                    health.set(&pool, name, DeviceHealth::Unhealthy, BROKEN);
                                }
                            }
                        }
                        _ = unhealthy.recv() => {
                            if let Some(name) = names.get(broken) {
                                health.set(&pool, name, DeviceHealth::Unhealthy, BROKEN);
                                tracing::info!(device = %name, "marked unhealthy");
                                broken += 1;
                            }
                        }
                        _ = healthy.recv() => {
                            for name in &names {
                                health.set(&pool, name, DeviceHealth::Healthy, "");
                            }
                            broken = 0;
                            tracing::info!("all devices healthy");
                        }
                    }
                }
            });
        }
        let server = server.start(shutdown).await?;
        tracing::info!(
            service = %server.service_socket().display(),
            registration = ?server.registration_socket(),
            "example DRA driver ready"
        );
        server.wait().await?;
        anyhow::Ok(())
    })
}
