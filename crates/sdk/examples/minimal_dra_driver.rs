//! The smallest useful DRA driver: one device per claim, device health, and
//! rolling updates when started with an instance id.
//!
//! Run: `cargo run -p nodeplugins-sdk --example minimal_dra_driver -- /tmp/root [INSTANCE]`

use std::sync::Arc;

use nodeplugins_sdk::dra_driver::DeviceHealth;
use nodeplugins_sdk::dra_driver::{
    Claim, DraDriver, DraDriverServer, HealthReporter, PrepareResults, PreparedClaim,
    PreparedDevice, UnprepareResults,
};
use nodeplugins_sdk::signals::shutdown_on_signals;

struct Driver;

#[nodeplugins_sdk::async_trait]
impl DraDriver for Driver {
    async fn prepare(&self, claims: Vec<Claim>) -> PrepareResults {
        // In a cluster (the `kube` feature) `claim.allocation` holds the
        // devices the scheduler allocated; each claim here gets "gpu-0".
        claims
            .into_iter()
            .map(|claim| {
                let device = PreparedDevice {
                    pool: "node-1".into(),
                    device: "gpu-0".into(),
                    cdi_device_ids: vec!["minimal.example.com/gpu=gpu-0".into()],
                    ..Default::default()
                };
                (claim.claim.uid, Ok(vec![device]))
            })
            .collect()
    }

    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults {
        claims
            .into_iter()
            .map(|claim| (claim.claim.uid, Ok(())))
            .collect()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let root = args.next().unwrap_or_else(|| "/var/lib/kubelet".into());
    let health = HealthReporter::new();
    health.set("node-1", "gpu-0", DeviceHealth::Healthy, "");
    let mut driver = DraDriverServer::builder("minimal.example.com", Arc::new(Driver))
        .root_dir(&root)
        .health(health);
    if let Some(instance) = args.next() {
        driver = driver.instance(instance);
    }

    let server = driver.start(shutdown_on_signals()?).await?;
    eprintln!("serving {}", server.service_socket().display());
    server.wait().await?;
    Ok(())
}
