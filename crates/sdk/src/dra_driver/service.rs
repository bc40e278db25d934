//! The `DRAPlugin` services (v1, and v1beta1 converted to v1) calling the
//! author's [`DraDriver`].

use std::sync::Arc;

use nodeplugins_api::dra::{v1, v1beta1};
use tonic::{Request, Response, Status};

use super::DraDriver;
use super::serializer::Serializer;

pub(super) struct Service {
    pub(super) driver: Arc<dyn DraDriver>,
    pub(super) serializer: Serializer,
}

impl Service {
    async fn prepare(
        &self,
        request: v1::NodePrepareResourcesRequest,
    ) -> Result<v1::NodePrepareResourcesResponse, Status> {
        let _guard = self.serializer.acquire().await?;
        let results = self.driver.prepare(request.claims).await;
        Ok(v1::NodePrepareResourcesResponse {
            claims: results
                .into_iter()
                .map(|(uid, result)| {
                    let response = match result {
                        Ok(devices) => v1::NodePrepareResourceResponse {
                            devices,
                            error: String::new(),
                        },
                        Err(error) => v1::NodePrepareResourceResponse {
                            devices: Vec::new(),
                            error,
                        },
                    };
                    (uid, response)
                })
                .collect(),
        })
    }

    async fn unprepare(
        &self,
        request: v1::NodeUnprepareResourcesRequest,
    ) -> Result<v1::NodeUnprepareResourcesResponse, Status> {
        let _guard = self.serializer.acquire().await?;
        let results = self.driver.unprepare(request.claims).await;
        Ok(v1::NodeUnprepareResourcesResponse {
            claims: results
                .into_iter()
                .map(|(uid, result)| {
                    let error = result.err().unwrap_or_default();
                    (uid, v1::NodeUnprepareResourceResponse { error })
                })
                .collect(),
        })
    }
}

pub(super) struct V1(pub(super) Arc<Service>);
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
