//! The publisher's requests to the API server: each bounded by the request
//! timeout, and each failure a typed `PublishError` naming the pool, which
//! is logged, counted in the driver's `PublishStats` and handed to its
//! error handler.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, ResourceExt};

use super::super::error::{PublishError, PublishErrorHandler};
use super::super::resources::Resources;
use crate::dra_driver::resource_api::{ResourceApi, ResourceVersion, ResourceVersions};
use crate::dra_driver::{DraDriverError, DraDriverErrorHandler};

/// Sends the publisher's requests and reports their failures.
pub(super) struct Requests {
    versions: ResourceVersions,
    /// The version of the API the server serves, once discovered.
    version: ResourceVersion,
    nodes: Api<Node>,
    node: String,
    timeout: Duration,
    resources: Resources,
    on_error: Option<PublishErrorHandler>,
    on_driver_error: Option<DraDriverErrorHandler>,
}

impl Requests {
    /// Requests with `client` for the driver publishing on `node`.
    pub(super) fn new(
        versions: ResourceVersions,
        node: &str,
        timeout: Duration,
        resources: Resources,
        on_error: Option<PublishErrorHandler>,
        on_driver_error: Option<DraDriverErrorHandler>,
    ) -> Self {
        Self {
            nodes: Api::all(versions.client().clone()),
            versions,
            version: ResourceVersion::V1,
            node: node.to_string(),
            timeout,
            resources,
            on_error,
            on_driver_error,
        }
    }

    /// Asks which version of the API the server serves.
    pub(super) async fn discover(&mut self) -> Result<(), PublishError> {
        let version = self.versions.get();
        self.version = self
            .request("", "discover the resource.k8s.io API", version)
            .await?;
        Ok(())
    }

    /// Every ResourceSlice, in the version the server serves.
    pub(super) fn slices(&self) -> ResourceApi<ResourceSlice> {
        ResourceApi::all(self.versions.client().clone(), self.version)
    }

    /// Creates `slice` for pool `pool`: the slice as stored.
    pub(super) async fn create(
        &self,
        pool: &str,
        slice: &ResourceSlice,
    ) -> Result<ResourceSlice, PublishError> {
        let slices = self.slices();
        self.request(pool, "create ResourceSlice", slices.create(slice))
            .await
    }

    /// Replaces `slice` of pool `pool`: the slice as stored.
    pub(super) async fn replace(
        &self,
        pool: &str,
        slice: &ResourceSlice,
    ) -> Result<ResourceSlice, PublishError> {
        let name = slice.name_any();
        let slices = self.slices();
        self.request(pool, "update ResourceSlice", slices.replace(&name, slice))
            .await
    }

    /// Deletes `slice` of pool `pool` if it is still the version seen:
    /// whether it was there to delete.
    pub(super) async fn delete(
        &self,
        pool: &str,
        slice: &ResourceSlice,
    ) -> Result<bool, PublishError> {
        let name = slice.name_any();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: slice.metadata.uid.clone(),
                resource_version: slice.metadata.resource_version.clone(),
            }),
            ..Default::default()
        };
        let slices = self.slices();
        self.request(pool, "delete ResourceSlice", async {
            match slices.delete(&name, &params).await {
                Ok(()) => Ok(true),
                Err(kube::Error::Api(status)) if status.is_not_found() => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// The UID of the Node, read for pool `pool`.
    pub(super) async fn node_uid(&self, pool: &str) -> Result<String, PublishError> {
        let node = self
            .request(pool, "read the Node", self.nodes.get(&self.node))
            .await?;
        Ok(node.metadata.uid.unwrap_or_default())
    }

    /// `request`, given up after the timeout.
    async fn request<T>(
        &self,
        pool: &str,
        operation: &'static str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, PublishError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(result) => result.map_err(|source| PublishError::Api {
                pool: pool.to_string(),
                operation,
                source,
            }),
            Err(_) => Err(PublishError::Timeout {
                pool: pool.to_string(),
                operation,
                timeout: self.timeout,
            }),
        }
    }

    /// Logs `error`, counts it, and hands it to the driver.
    pub(super) fn report(&self, error: PublishError) {
        tracing::warn!(error = %error, "publishing ResourceSlices");
        let text = error.to_string();
        self.resources.stats.send_modify(|s| {
            s.failures += 1;
            s.last_error = Some(text);
        });
        if let Some(handler) = &self.on_error {
            handler(&error);
        }
        if let Some(handler) = &self.on_driver_error {
            handler(&DraDriverError::Publish(error));
        }
    }
}
