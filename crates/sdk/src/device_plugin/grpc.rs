//! The `v1beta1.DevicePlugin` service over the author's
//! [`DevicePluginService`] and [`Devices`].

use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use tonic::{Request, Response, Status};

use super::cdi::DeviceCdi;
use super::devices::Devices;
use super::service::DevicePluginService;

type DeviceStream =
    Pin<Box<dyn futures::Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

pub(super) struct Server {
    pub(super) service: Arc<dyn DevicePluginService>,
    pub(super) devices: Devices,
    /// The CDI spec the plugin writes, if any.
    pub(super) cdi: Option<DeviceCdi>,
}

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for Server {
    type ListAndWatchStream = DeviceStream;

    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(options(self.service.as_ref())))
    }

    async fn list_and_watch(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<DeviceStream>, Status> {
        let stream = tokio_stream::wrappers::WatchStream::new(self.devices.subscribe())
            .map(|devices| Ok(dp::ListAndWatchResponse { devices }));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        let mut container_responses = Vec::new();
        for r in request.into_inner().container_requests {
            let size = usize::try_from(r.allocation_size)
                .map_err(|_| Status::invalid_argument("negative allocation size"))?;
            let ids = self
                .service
                .preferred_allocation(&r.available_device_i_ds, &r.must_include_device_i_ds, size)
                .await
                .unwrap_or_default();
            container_responses.push(dp::ContainerPreferredAllocationResponse { device_i_ds: ids });
        }
        Ok(Response::new(dp::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let request = request.into_inner();
        // Ids the plugin never listed are refused before the author's code
        // sees them: the kubelet sends only listed ids, so another one is a
        // broken caller, not a device to set up.
        {
            let listed = self.devices.borrow();
            let unknown = request
                .container_requests
                .iter()
                .flat_map(|r| &r.devices_ids)
                .find(|id| listed.iter().all(|d| &d.id != *id));
            if let Some(id) = unknown {
                return Err(Status::invalid_argument(format!(
                    "device {id:?} is not one this plugin lists"
                )));
            }
        }
        let mut container_responses = Vec::new();
        for r in request.container_requests {
            let ids = r.devices_ids;
            let mut response = self.service.allocate(ids.clone()).await?;
            if let Some(cdi) = &self.cdi {
                cdi.name_devices(self.service.as_ref(), &ids, &mut response);
            }
            container_responses.push(response);
        }
        Ok(Response::new(dp::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        request: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        self.service
            .pre_start_container(request.into_inner().devices_ids)
            .await?;
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

pub(super) fn options(service: &dyn DevicePluginService) -> dp::DevicePluginOptions {
    dp::DevicePluginOptions {
        pre_start_required: service.pre_start_required(),
        get_preferred_allocation_available: service.offers_preferred_allocation(),
    }
}
