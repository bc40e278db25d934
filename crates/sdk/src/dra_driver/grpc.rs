//! The `DRAPlugin` gRPC services, v1 and v1beta1 (converted to v1), each
//! serving the one [`Service`].

use std::sync::Arc;

use nodeplugins_api::dra::{v1, v1beta1};
use tonic::{Request, Response, Status};

use super::service::Service;

/// `v1.DRAPlugin`.
pub(super) struct V1(pub(super) Arc<Service>);
/// `v1beta1.DRAPlugin`, converted to and from v1.
pub(super) struct V1beta1(pub(super) Arc<Service>);

#[tonic::async_trait]
impl v1::dra_plugin_server::DraPlugin for V1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1::NodePrepareResourcesResponse>, Status> {
        self.0
            .prepare(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1::NodeUnprepareResourcesResponse>, Status> {
        self.0
            .unprepare(request.into_inner())
            .await
            .map(Response::new)
    }
}

#[tonic::async_trait]
impl v1beta1::dra_plugin_server::DraPlugin for V1beta1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1beta1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodePrepareResourcesResponse>, Status> {
        let response = self.0.prepare(request.into_inner().into()).await?;
        Ok(Response::new(response.into()))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1beta1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodeUnprepareResourcesResponse>, Status> {
        let response = self.0.unprepare(request.into_inner().into()).await?;
        Ok(Response::new(response.into()))
    }
}
