//! A DRA driver for a cluster: four GPUs published as a ResourceSlice pool
//! named after the node, each claim prepared with the GPUs the scheduler
//! allocated to it, a CDI spec file per claim (with `GPU_MODE` from an
//! opaque configuration `{"mode": ...}` for the driver), prepared claims
//! remembered across restarts, device health. The side-by-side Go driver on the
//! upstream helper is `interop/cmd/gpu-driver`.
//!
//! Run (with `KUBECONFIG` set, or in a pod):
//! `NODE_NAME=node-1 cargo run -p nodeplugins-sdk --features kube --example cluster_dra_driver -- [ROOT] [CDI_DIR]`

use std::collections::HashMap;
use std::sync::Arc;

use nodeplugins_sdk::dra_driver::DeviceHealth;
use nodeplugins_sdk::dra_driver::{
    Claim, ContainerEdits, DraDriver, DraDriverServer, HealthReporter, Pool, PrepareResults,
    PreparedClaim, PreparedDevice, Resources, UnprepareResults,
};
use nodeplugins_sdk::k8s_openapi::api::resource::v1::Device;
use nodeplugins_sdk::signals::shutdown_on_signals;

const DRIVER: &str = "dra.example.com";
const GPUS: [&str; 4] = ["gpu-0", "gpu-1", "gpu-2", "gpu-3"];

struct Gpus;

#[nodeplugins_sdk::async_trait]
impl DraDriver for Gpus {
    async fn prepare(&self, claims: Vec<Claim>) -> PrepareResults {
        // Called once per claim: a prepared claim is answered from the
        // SDK's record, and the SDK writes the CDI spec file.
        let mut results = HashMap::new();
        for claim in claims {
            let uid = claim.claim.uid;
            let allocation = claim.allocation.unwrap_or_default();
            let devices = allocation.devices.iter().map(|d| {
                eprintln!("prepared {uid} {}", d.device);
                let mut env = vec![format!("GPU_DEVICE={}", d.device)];
                // The last configuration with a mode wins (the claim's
                // come after the class's).
                let mode = allocation
                    .config_for(d)
                    .filter_map(|c| c.parameters["mode"].as_str())
                    .last();
                env.extend(mode.map(|mode| format!("GPU_MODE={mode}")));
                PreparedDevice {
                    requests: vec![d.request.clone()],
                    container_edits: Some(ContainerEdits {
                        env,
                        ..Default::default()
                    }),
                    pool: d.pool.clone(),
                    device: d.device.clone(),
                    ..Default::default()
                }
            });
            results.insert(uid.clone(), Ok(devices.collect()));
        }
        results
    }

    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults {
        // Nothing to undo on fake GPUs; the SDK removes the CDI spec file.
        claims.into_iter().map(|c| (c.claim.uid, Ok(()))).collect()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let root = args.next().unwrap_or_else(|| "/var/lib/kubelet".into());
    let cdi_dir = args.next().unwrap_or_else(|| "/var/run/cdi".into());
    let node = std::env::var("NODE_NAME")?;

    let resources = Resources::new();
    let devices = GPUS.map(|name| Device {
        name: name.into(),
        ..Default::default()
    });
    resources.set_pool(&node, Pool::new(devices.to_vec()));
    let health = HealthReporter::new();
    for gpu in GPUS {
        health.set(&node, gpu, DeviceHealth::Healthy, "");
    }

    let server = DraDriverServer::builder(DRIVER, Arc::new(Gpus))
        .root_dir(&root)
        .kube(nodeplugins_sdk::kube::Client::try_default().await?, &node)
        .resources(resources)
        .cdi_kind(format!("{DRIVER}/gpu"))
        .cdi_dir(cdi_dir)
        .health(health)
        .start(shutdown_on_signals()?)
        .await?;
    server.wait().await?;
    Ok(())
}
