//! `example-device-plugin`: a device plugin with N fake devices spread over
//! two NUMA nodes, registering through `kubelet.sock` or `plugins_registry`.
//!
//! Health can be flipped while it runs: SIGUSR1 marks the first healthy
//! device unhealthy, SIGUSR2 marks every device healthy again.
//!
//! With `--cdi-dir`, it writes a CDI spec of its devices there (kind: the
//! resource name; each device an environment variable) and Allocate names
//! those CDI devices; without, Allocate names CDI devices it never writes a
//! spec for, as plugins that leave specs to another component do.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use nodeplugins_sdk::api::constants::layout::DEVICE_PLUGINS_DIR;
use nodeplugins_sdk::api::deviceplugin::v1beta1 as dp;
use nodeplugins_sdk::cdi::ContainerEdits;
use nodeplugins_sdk::device_plugin::{DevicePluginServer, DevicePluginService, Devices};
use nodeplugins_sdk::signals::shutdown_on_signals;
use nodeplugins_sdk::tonic::Status;
use nodeplugins_sdk_bins::LogFlags;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Via {
    KubeletSock,
    Registry,
}

/// A device plugin with fake devices.
#[derive(Debug, Parser)]
#[command(name = "example-device-plugin", version)]
struct Flags {
    /// The kubelet root directory; the plugin uses `<root>/device-plugins`.
    #[arg(long, default_value = "/var/lib/kubelet")]
    root_dir: PathBuf,
    /// The extended resource name.
    #[arg(long, default_value = "example.com/device")]
    resource: String,
    /// How many devices (spread over NUMA nodes 0 and 1).
    #[arg(long, default_value_t = 4)]
    devices: usize,
    /// How to register.
    #[arg(long, value_enum, default_value_t = Via::KubeletSock)]
    via: Via,
    /// Ask for PreStartContainer before each container start.
    #[arg(long)]
    pre_start: bool,
    /// Write a CDI spec of the devices in this directory (one the container
    /// runtime reads, such as /var/run/cdi), named in each Allocate answer.
    #[arg(long, value_name = "DIR")]
    cdi_dir: Option<PathBuf>,
    #[command(flatten)]
    log: LogFlags,
}

struct Example {
    resource: String,
    pre_start: bool,
    numa: Vec<(String, i64)>,
    /// Whether the SDK writes the CDI spec and names its devices.
    cdi: bool,
}

#[nodeplugins_sdk::async_trait]
impl DevicePluginService for Example {
    async fn allocate(
        &self,
        devices: Vec<String>,
    ) -> Result<dp::ContainerAllocateResponse, Status> {
        tracing::info!(?devices, "allocated");
        let vendor = self.resource.split('/').next().unwrap_or("example.com");
        let kind = self.resource.rsplit('/').next().unwrap_or("device");
        Ok(dp::ContainerAllocateResponse {
            envs: [("EXAMPLE_DEVICES".to_string(), devices.join(","))].into(),
            mounts: vec![dp::Mount {
                container_path: "/var/run/example-device".into(),
                host_path: "/var/run/example-device".into(),
                read_only: true,
            }],
            devices: devices
                .iter()
                .map(|id| dp::DeviceSpec {
                    container_path: format!("/dev/{id}"),
                    host_path: "/dev/null".into(),
                    permissions: "rw".into(),
                })
                .collect(),
            annotations: [(format!("{vendor}/devices"), devices.join(","))].into(),
            // With a CDI spec, the SDK names its devices.
            cdi_devices: match self.cdi {
                true => Vec::new(),
                false => devices
                    .iter()
                    .map(|id| dp::CdiDevice {
                        name: format!("{vendor}/{kind}={id}"),
                    })
                    .collect(),
            },
        })
    }

    fn container_edits(&self, device: &str) -> Option<ContainerEdits> {
        Some(ContainerEdits {
            env: vec![format!(
                "EXAMPLE_DEVICE_{}=1",
                device.replace('-', "_").to_uppercase()
            )],
            ..Default::default()
        })
    }

    fn offers_preferred_allocation(&self) -> bool {
        true
    }

    /// Prefers devices on one NUMA node.
    async fn preferred_allocation(
        &self,
        available: &[String],
        must_include: &[String],
        size: usize,
    ) -> Option<Vec<String>> {
        let node_of = |id: &String| self.numa.iter().find(|(d, _)| d == id).map(|(_, n)| *n);
        let mut chosen: Vec<String> = must_include.to_vec();
        for node in [0, 1] {
            if chosen.len() >= size {
                break;
            }
            let on_node: Vec<&String> = available
                .iter()
                .filter(|id| node_of(id) == Some(node) && !chosen.contains(id))
                .collect();
            if on_node.len() + chosen.len() >= size {
                chosen.extend(on_node.into_iter().take(size - chosen.len()).cloned());
            }
        }
        for id in available {
            if chosen.len() >= size {
                break;
            }
            if !chosen.contains(id) {
                chosen.push(id.clone());
            }
        }
        Some(chosen)
    }

    fn pre_start_required(&self) -> bool {
        self.pre_start
    }

    async fn pre_start_container(&self, devices: Vec<String>) -> Result<(), Status> {
        tracing::info!(?devices, "pre-started");
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    flags.log.init();
    let numa: Vec<(String, i64)> = (0..flags.devices)
        .map(|i| (format!("dev-{i}"), (i % 2) as i64))
        .collect();
    let devices = Devices::new(
        numa.iter()
            .map(|(id, node)| dp::Device {
                id: id.clone(),
                health: "Healthy".into(),
                topology: Some(dp::TopologyInfo {
                    nodes: vec![dp::NumaNode { id: *node }],
                }),
            })
            .collect(),
    );
    let service = Example {
        resource: flags.resource.clone(),
        pre_start: flags.pre_start,
        numa,
        cdi: flags.cdi_dir.is_some(),
    };
    let mut plugin = DevicePluginServer::builder(&flags.resource, service)
        .dir(flags.root_dir.join(DEVICE_PLUGINS_DIR))
        .devices(devices.clone());
    if let Some(dir) = &flags.cdi_dir {
        plugin = plugin.cdi(&flags.resource).cdi_dir(dir);
    }
    let plugin = match flags.via {
        Via::KubeletSock => plugin,
        Via::Registry => plugin.register_in_registry(&flags.root_dir),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let shutdown = shutdown_on_signals()?;
        let mut unhealthy = signal(SignalKind::user_defined1())?;
        let mut healthy = signal(SignalKind::user_defined2())?;
        let flips = devices.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = unhealthy.recv() => {
                        if let Some(d) = flips.get().into_iter().find(|d| d.health == "Healthy") {
                            flips.set_health(&d.id, false);
                            tracing::info!(device = %d.id, "marked unhealthy");
                        }
                    }
                    _ = healthy.recv() => {
                        for d in flips.get() {
                            flips.set_health(&d.id, true);
                        }
                        tracing::info!("all devices healthy");
                    }
                }
            }
        });
        plugin.start(shutdown).await?.wait().await?;
        anyhow::Ok(())
    })
}
