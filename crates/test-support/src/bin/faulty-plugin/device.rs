//! The faulty device plugin: registers on `kubelet.sock`, lists four
//! devices, and breaks one rule when asked.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::transport::{BoundSocket, dial, serve};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::{DEVICES, RESOURCE, Stream_, async_stream};

struct Device {
    fault: String,
    busy: tokio::sync::Mutex<()>,
}

impl Device {
    fn is(&self, fault: &str) -> bool {
        crate::has(&self.fault, fault)
    }

    fn options(&self) -> dp::DevicePluginOptions {
        dp::DevicePluginOptions {
            pre_start_required: !self.is("options-disagree"),
            get_preferred_allocation_available: true,
        }
    }

    fn devices(&self) -> Vec<dp::Device> {
        (0..DEVICES)
            .map(|i| dp::Device {
                id: if self.is("duplicate-ids") && i == 1 {
                    "dev-0".into()
                } else {
                    format!("dev-{i}")
                },
                health: if self.is("bad-health") {
                    "Fine"
                } else {
                    "Healthy"
                }
                .into(),
                topology: Some(dp::TopologyInfo {
                    nodes: vec![dp::NumaNode {
                        id: if self.is("bad-topology") { -1 } else { 0 },
                    }],
                }),
            })
            .collect()
    }
}

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for Device {
    type ListAndWatchStream = Stream_<dp::ListAndWatchResponse>;

    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        let mut options = self.options();
        if self.is("options-disagree") {
            options.pre_start_required = true;
        }
        Ok(Response::new(options))
    }

    async fn list_and_watch(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let first = dp::ListAndWatchResponse {
            devices: self.devices(),
        };
        let silent = self.is("no-list");
        let once = self.is("list-once");
        let stream = async_stream(move |tx| async move {
            if !silent {
                let _ = tx.send(Ok(first)).await;
            }
            if once {
                // The stream ends after the first list.
                return;
            }
            std::future::pending::<()>().await;
        });
        Ok(Response::new(stream))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        let responses = request
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| {
                let size = usize::try_from(c.allocation_size).unwrap_or(0);
                let mut chosen: Vec<String> = c.must_include_device_i_ds.clone();
                for id in &c.available_device_i_ds {
                    if chosen.len() >= size {
                        break;
                    }
                    if !chosen.contains(id) {
                        chosen.push(id.clone());
                    }
                }
                if self.is("preferred-wrong-size") {
                    chosen.truncate(1);
                }
                dp::ContainerPreferredAllocationResponse {
                    device_i_ds: chosen,
                }
            })
            .collect();
        Ok(Response::new(dp::PreferredAllocationResponse {
            container_responses: responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let _held = if self.is("allocate-one-at-a-time") {
            let Ok(held) = self.busy.try_lock() else {
                return Err(Status::unavailable("busy with another Allocate"));
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some(held)
        } else {
            None
        };
        let known: BTreeSet<String> = self.devices().into_iter().map(|d| d.id).collect();
        let mut responses = Vec::new();
        for container in request.into_inner().container_requests {
            if let Some(unknown) = container.devices_ids.iter().find(|id| !known.contains(*id))
                && !self.is("allocate-any-id")
            {
                return Err(Status::invalid_argument(format!(
                    "unknown device {unknown}"
                )));
            }
            let bad = self.is("allocate-bad-response");
            responses.push(dp::ContainerAllocateResponse {
                envs: [(
                    "FAULTY_DEVICES".to_string(),
                    container.devices_ids.join(","),
                )]
                .into(),
                // Relative where the runtime wants an absolute path, and a
                // CDI name without vendor and class.
                mounts: vec![dp::Mount {
                    container_path: if bad { "faulty" } else { "/faulty" }.into(),
                    host_path: "/dev/null".into(),
                    read_only: true,
                }],
                cdi_devices: container
                    .devices_ids
                    .iter()
                    .map(|id| dp::CdiDevice {
                        name: if bad {
                            id.clone()
                        } else {
                            format!("example.com/faulty={id}")
                        },
                    })
                    .collect(),
                ..Default::default()
            });
        }
        if self.is("allocate-no-response") {
            responses.clear();
        }
        Ok(Response::new(dp::AllocateResponse {
            container_responses: responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        if self.is("pre-start-fails") {
            return Err(Status::internal("PreStartContainer failed on purpose"));
        }
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

/// Which file is at `path`: its inode and change time (an inode number
/// alone may be reused at once for the socket made again).
fn inode(path: &Path) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()))
}

async fn register(kubelet: &Path, options: dp::DevicePluginOptions) -> anyhow::Result<()> {
    let channel = dial(kubelet, Duration::from_secs(5)).await?;
    let mut client = dp::registration_client::RegistrationClient::new(channel);
    let version = "v1beta1".to_string();
    client
        .register(dp::RegisterRequest {
            version,
            endpoint: "faulty.sock".into(),
            resource_name: RESOURCE.into(),
            options: Some(options),
        })
        .await?;
    Ok(())
}

/// Serves the plugin at `dir/faulty.sock` until `stop`.
async fn serve_at(
    dir: &Path,
    plugin: &Arc<Device>,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let socket = BoundSocket::bind(dir.join("faulty.sock"), None).await?;
    let router = tonic::transport::Server::builder().add_service(
        dp::device_plugin_server::DevicePluginServer::from_arc(plugin.clone()),
    );
    Ok(tokio::spawn(async move {
        let _ = serve(socket, router, stop).await;
    }))
}

pub(crate) async fn device_plugin(
    dir: &Path,
    fault: &str,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let plugin = Arc::new(Device {
        fault: fault.to_string(),
        busy: tokio::sync::Mutex::new(()),
    });
    let kubelet = dir.join("kubelet.sock");
    let options = plugin.options();
    crate::refuse_stale(fault, &dir.join("faulty.sock"))?;
    let mut stop = shutdown.child_token();
    let mut server = if crate::has(fault, "serve-after-register") {
        // Serves only once Register has returned: the kubelet dials the
        // plugin inside Register, so it is refused.
        register(&kubelet, options).await?;
        serve_at(dir, &plugin, stop.clone()).await?
    } else {
        let server = serve_at(dir, &plugin, stop.clone()).await?;
        if crate::has(fault, "register-version") {
            let channel = dial(&kubelet, Duration::from_secs(5)).await?;
            dp::registration_client::RegistrationClient::new(channel)
                .register(dp::RegisterRequest {
                    version: "v1alpha1".into(),
                    endpoint: "faulty.sock".into(),
                    resource_name: RESOURCE.into(),
                    options: Some(options),
                })
                .await?;
        } else {
            register(&kubelet, options).await?;
        }
        server
    };
    // A kubelet restart removes every socket in the directory and makes
    // kubelet.sock again: serve again and register again.
    let mut seen = inode(&kubelet);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        let now = inode(&kubelet);
        if now.is_some() && now != seen && !crate::has(fault, "no-reregister") {
            if !dir.join("faulty.sock").exists() {
                stop.cancel();
                let _ = server.await;
                stop = shutdown.child_token();
                server = serve_at(dir, &plugin, stop.clone()).await?;
            }
            if register(&kubelet, options).await.is_ok() {
                seen = now;
            }
        } else if now.is_none() {
            seen = None;
        }
    }
    let _ = server.await;
    Ok(())
}
