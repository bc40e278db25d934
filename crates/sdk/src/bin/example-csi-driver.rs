//! `example-csi-driver`: a minimal CSI node driver (Identity and the node
//! registration part of Node), for trying the CSI registrar and agent.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::Parser;
use nodeplugins_sdk::api::csi::v1 as csi;
use nodeplugins_sdk::api::transport::{BoundSocket, serve};
use nodeplugins_sdk::signals::shutdown_on_signals;
use tonic::{Request, Response, Status};

/// A minimal CSI node driver.
#[derive(Debug, Parser)]
#[command(name = "example-csi-driver", version)]
struct Flags {
    /// Where to serve CSI, as unix://PATH.
    #[arg(long)]
    endpoint: String,
    /// This node's identifier in the driver.
    #[arg(long)]
    node_id: String,
    /// The driver name.
    #[arg(long, default_value = "csi.example.com")]
    driver_name: String,
    /// Volumes the node can attach (0 means no limit).
    #[arg(long, default_value_t = 8)]
    max_volumes: i64,
    /// The node's zone, reported as accessible topology.
    #[arg(long, default_value = "zone-a")]
    zone: String,
}

#[derive(Clone)]
struct Driver {
    name: String,
    node_id: String,
    max_volumes: i64,
    topology: HashMap<String, String>,
}

#[tonic::async_trait]
impl csi::identity_server::Identity for Driver {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: self.name.clone(),
            vendor_version: env!("CARGO_PKG_VERSION").into(),
            manifest: HashMap::new(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        use csi::plugin_capability::{Service, Type, service};
        let accessibility = csi::PluginCapability {
            r#type: Some(Type::Service(Service {
                r#type: service::Type::VolumeAccessibilityConstraints as i32,
            })),
        };
        Ok(Response::new(csi::GetPluginCapabilitiesResponse {
            capabilities: vec![accessibility],
        }))
    }

    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        Ok(Response::new(csi::ProbeResponse { ready: Some(true) }))
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for Driver {
    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities: vec![],
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: self.max_volumes,
            accessible_topology: Some(csi::Topology {
                segments: self.topology.clone(),
            }),
        }))
    }
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let path = PathBuf::from(
        flags
            .endpoint
            .strip_prefix("unix://")
            .unwrap_or(&flags.endpoint),
    );
    let topology = [(
        format!("topology.{}/zone", flags.driver_name),
        flags.zone.clone(),
    )]
    .into();
    let driver = Driver {
        name: flags.driver_name,
        node_id: flags.node_id,
        max_volumes: flags.max_volumes,
        topology,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let shutdown = shutdown_on_signals()?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let socket = BoundSocket::bind(&path, None).await?;
        tracing::info!(socket = %path.display(), driver = %driver.name, "CSI driver serving");
        let router = tonic::transport::Server::builder()
            .add_service(csi::identity_server::IdentityServer::new(driver.clone()))
            .add_service(csi::node_server::NodeServer::new(driver));
        serve(socket, router, shutdown).await?;
        anyhow::Ok(())
    })
}
