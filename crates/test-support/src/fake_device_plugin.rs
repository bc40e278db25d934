//! A device plugin: serves `v1beta1.DevicePlugin` on a socket through our
//! transport, streaming whatever device list the test sets.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nodeplugins_api::deviceplugin::v1beta1::device_plugin_server::{
    DevicePlugin, DevicePluginServer,
};
use nodeplugins_api::deviceplugin::v1beta1::{
    AllocateRequest, AllocateResponse, ContainerAllocateResponse,
    ContainerPreferredAllocationResponse, Device, DevicePluginOptions, Empty, ListAndWatchResponse,
    PreStartContainerRequest, PreStartContainerResponse, PreferredAllocationRequest,
    PreferredAllocationResponse,
};
use nodeplugins_api::transport::{BoundSocket, serve};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[derive(Clone)]
struct Service {
    options: DevicePluginOptions,
    devices: watch::Receiver<Vec<Device>>,
    hang_allocate: Arc<AtomicBool>,
    /// Lists are sent only while this is true.
    listing: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl DevicePlugin for Service {
    type ListAndWatchStream = DeviceStream;

    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(self.options))
    }

    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<DeviceStream>, Status> {
        let listing = self.listing.clone();
        let stream = WatchStream::new(self.devices.clone()).then(move |devices| {
            let mut listing = listing.clone();
            async move {
                // A closed gate only ends with the plugin; the list then
                // goes nowhere.
                let _ = listing.wait_for(|open| *open).await;
                Ok(ListAndWatchResponse { devices })
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .into_iter()
            .map(|r| {
                // Prefers the devices offered last, so tests can tell the
                // preference was used.
                let mut ids = r.must_include_device_i_ds.clone();
                for id in r.available_device_i_ds.into_iter().rev() {
                    if ids.len() >= r.allocation_size as usize {
                        break;
                    }
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
                ContainerPreferredAllocationResponse { device_i_ds: ids }
            })
            .collect();
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        if self.hang_allocate.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let container_responses = request
            .into_inner()
            .container_requests
            .into_iter()
            .map(|r| ContainerAllocateResponse {
                envs: [("FAKE_DEVICES".to_string(), r.devices_ids.join(","))].into(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// A DevicePlugin service with the given options and devices, plus the
/// sender that updates the device list; for servers that combine it with
/// other services on one socket.
pub fn device_plugin_service(
    options: DevicePluginOptions,
    devices: Vec<Device>,
) -> (
    DevicePluginServer<impl DevicePlugin>,
    watch::Sender<Vec<Device>>,
) {
    let (tx, rx) = watch::channel(devices);
    let service = Service {
        options,
        devices: rx,
        hang_allocate: Arc::default(),
        listing: watch::channel(true).1,
    };
    (DevicePluginServer::new(service), tx)
}

/// A running device plugin.
pub struct FakeDevicePlugin {
    socket: PathBuf,
    devices: watch::Sender<Vec<Device>>,
    hang_allocate: Arc<AtomicBool>,
    listing: watch::Sender<bool>,
    shutdown: CancellationToken,
}

impl FakeDevicePlugin {
    /// Serves on `socket` with the given options and initial devices.
    pub async fn serve(
        socket: impl Into<PathBuf>,
        options: DevicePluginOptions,
        devices: Vec<Device>,
    ) -> Self {
        let socket = socket.into();
        let bound = BoundSocket::bind(&socket, None)
            .await
            .expect("bind fake device plugin socket");
        let (tx, rx) = watch::channel(devices);
        let hang_allocate = Arc::new(AtomicBool::new(false));
        let (listing, listing_rx) = watch::channel(true);
        let service = Service {
            options,
            devices: rx,
            hang_allocate: hang_allocate.clone(),
            listing: listing_rx,
        };
        let shutdown = CancellationToken::new();
        let router =
            tonic::transport::Server::builder().add_service(DevicePluginServer::new(service));
        tokio::spawn(serve(bound, router, shutdown.clone()));
        Self {
            socket,
            devices: tx,
            hang_allocate,
            listing,
            shutdown,
        }
    }

    /// Holds back every device list, on open streams and new ones, until
    /// called with `false` (a plugin slow to send its first list).
    pub fn hold_lists(&self, hold: bool) {
        self.listing.send_replace(!hold);
    }

    /// Makes later Allocate calls hang (a plugin stuck or dying mid-call).
    pub fn set_hang_allocate(&self, hang: bool) {
        self.hang_allocate.store(hang, Ordering::SeqCst);
    }

    /// `n` healthy devices named `dev-0`.. without topology.
    pub fn devices(n: usize) -> Vec<Device> {
        (0..n)
            .map(|i| Device {
                id: format!("dev-{i}"),
                health: "Healthy".to_string(),
                topology: None,
            })
            .collect()
    }

    /// The plugin's socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Replaces the device list; every ListAndWatch stream sends it.
    pub fn set_devices(&self, devices: Vec<Device>) {
        self.devices.send_replace(devices);
    }

    /// Stops serving and closes open streams.
    pub fn stop(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for FakeDevicePlugin {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
