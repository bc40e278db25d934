//! `example-dra-driver`: a DRA driver with N fake GPUs, serving `DRAPlugin`
//! v1 and v1beta1 plus device health, registered through
//! `<root>/plugins_registry`.
//!
//! Without an API server it cannot read a claim's allocation, so it gives
//! each claim one device picked from the claim UID (the same on every
//! instance, since instances must keep no state). A claim whose name starts
//! with `fail` is refused, to show per-claim errors. SIGUSR1 marks the first
//! healthy device unhealthy, SIGUSR2 marks every device healthy again.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use nodeplugins_sdk::api::dra::v1;
use nodeplugins_sdk::api::dra_health::v1::HealthStatus;
use nodeplugins_sdk::dra_driver::{ApiVersions, DraDriver, DraDriverServer, HealthReporter};
use nodeplugins_sdk::signals::shutdown_on_signals;
use nodeplugins_sdk_bins::LogFlags;
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
    /// The pool the devices belong to (by convention, the node name).
    #[arg(long, default_value = "node-local")]
    pool: String,
    /// DRAPlugin versions to serve, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = ["v1".to_string(), "v1beta1".to_string()])]
    api: Vec<String>,
    /// Do not serve device health.
    #[arg(long)]
    no_health: bool,
    #[command(flatten)]
    log: LogFlags,
}

struct ExampleDriver {
    name: String,
    pool: String,
    devices: usize,
    instance: String,
}

impl ExampleDriver {
    /// The device for a claim: FNV-1a of the UID, so every instance agrees.
    fn device_for(&self, uid: &str) -> String {
        let hash = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        format!("gpu-{}", hash % self.devices.max(1) as u64)
    }
}

#[async_trait::async_trait]
impl DraDriver for ExampleDriver {
    async fn prepare(
        &self,
        claims: Vec<v1::Claim>,
    ) -> HashMap<String, Result<Vec<v1::Device>, String>> {
        claims
            .into_iter()
            .map(|claim| {
                let result = if claim.name.starts_with("fail") {
                    Err(format!(
                        "claim {}/{} refused: the example driver fails claims named fail*",
                        claim.namespace, claim.name
                    ))
                } else {
                    let device = self.device_for(&claim.uid);
                    tracing::info!(instance = %self.instance, claim = %claim.uid, %device, "prepared");
                    Ok(vec![v1::Device {
                        request_names: Vec::new(),
                        pool_name: self.pool.clone(),
                        cdi_device_ids: vec![format!("{}/gpu={device}", self.name)],
                        device_name: device,
                        share_id: None,
                    }])
                };
                (claim.uid, result)
            })
            .collect()
    }

    async fn unprepare(&self, claims: Vec<v1::Claim>) -> HashMap<String, Result<(), String>> {
        claims
            .into_iter()
            .map(|claim| {
                tracing::info!(instance = %self.instance, claim = %claim.uid, "unprepared");
                (claim.uid, Ok(()))
            })
            .collect()
    }
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
    let health = (!flags.no_health).then(HealthReporter::new);
    let names: Vec<String> = (0..flags.devices).map(|i| format!("gpu-{i}")).collect();
    if let Some(health) = &health {
        for name in &names {
            health.set(&flags.pool, name, HealthStatus::Healthy, "");
        }
    }
    let driver = Arc::new(ExampleDriver {
        name: flags.driver_name.clone(),
        pool: flags.pool.clone(),
        devices: flags.devices,
        instance: flags.instance.clone().unwrap_or_else(|| "-".into()),
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let shutdown = shutdown_on_signals()?;
        if let Some(health) = health {
            let mut unhealthy = signal(SignalKind::user_defined1())?;
            let mut healthy = signal(SignalKind::user_defined2())?;
            let pool = flags.pool.clone();
            tokio::spawn(async move {
                let mut broken = 0;
                loop {
                    tokio::select! {
                        _ = unhealthy.recv() => {
                            if let Some(name) = names.get(broken) {
                                health.set(&pool, name, HealthStatus::Unhealthy, "XID 79: fallen off the bus (simulated)");
                                tracing::info!(device = %name, "marked unhealthy");
                                broken += 1;
                            }
                        }
                        _ = healthy.recv() => {
                            for name in &names {
                                health.set(&pool, name, HealthStatus::Healthy, "");
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
