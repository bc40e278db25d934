//! The smallest useful DRA driver: one device per claim, device health, and
//! rolling updates when started with an instance id.
//!
//! Run: `cargo run -p nodeplugins-sdk --example minimal_dra_driver -- /tmp/root [INSTANCE]`

use std::collections::HashMap;
use std::sync::Arc;

use nodeplugins_sdk::api::dra::v1::{Claim, Device};
use nodeplugins_sdk::api::dra_health::v1::HealthStatus;
use nodeplugins_sdk::dra_driver::{DraDriver, DraDriverServer, HealthReporter};
use nodeplugins_sdk::signals::shutdown_on_signals;

struct Driver;

#[async_trait::async_trait]
impl DraDriver for Driver {
    async fn prepare(&self, claims: Vec<Claim>) -> HashMap<String, Result<Vec<Device>, String>> {
        // A real driver reads the claim's allocation from the API server and
        // sets the device up; each claim here gets "gpu-0".
        claims
            .into_iter()
            .map(|claim| {
                let device = Device {
                    request_names: Vec::new(),
                    pool_name: "node-1".into(),
                    device_name: "gpu-0".into(),
                    cdi_device_ids: vec!["minimal.example.com/gpu=gpu-0".into()],
                    share_id: None,
                };
                (claim.uid, Ok(vec![device]))
            })
            .collect()
    }

    async fn unprepare(&self, claims: Vec<Claim>) -> HashMap<String, Result<(), String>> {
        claims
            .into_iter()
            .map(|claim| (claim.uid, Ok(())))
            .collect()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let root = args.next().unwrap_or_else(|| "/var/lib/kubelet".into());
    let health = HealthReporter::new();
    health.set("node-1", "gpu-0", HealthStatus::Healthy, "");
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
