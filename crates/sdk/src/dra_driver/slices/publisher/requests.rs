//! The publisher's requests to the API server: each bounded by the request
//! timeout and reported as a typed `PublishError` naming the pool; deletes,
//! and the Node's UID for the slices' owner reference.

use super::*;

impl Task {
    /// Deletes `slice` if it is still the version seen.
    pub(super) async fn delete(
        &mut self,
        pool: &str,
        slice: &ResourceSlice,
    ) -> Result<(), PublishError> {
        let name = slice.name_any();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: slice.metadata.uid.clone(),
                resource_version: slice.metadata.resource_version.clone(),
            }),
            ..Default::default()
        };
        let deleted = self
            .request(pool, "delete ResourceSlice", async {
                match self.slices.delete(&name, &params).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(status)) if status.is_not_found() => Ok(false),
                    Err(e) => Err(e),
                }
            })
            .await?;
        if deleted {
            tracing::info!(slice = %name, %pool, "ResourceSlice deleted");
            self.settings
                .resources
                .stats
                .send_modify(|s| s.deletes += 1);
        }
        self.accepted.remove(&name);
        self.known.deleted(slice, Instant::now());
        Ok(())
    }

    /// The UID of the node, for the slices' owner reference.
    pub(super) async fn node_uid(&mut self, pool: &str) -> Result<String, PublishError> {
        if let Some(uid) = &self.node_uid {
            return Ok(uid.clone());
        }
        let node = self
            .request(pool, "read the Node", self.nodes.get(&self.settings.node))
            .await?;
        let uid = node.metadata.uid.unwrap_or_default();
        self.node_uid = Some(uid.clone());
        Ok(uid)
    }

    /// `request`, given up after the timeout.
    pub(super) async fn request<T>(
        &self,
        pool: &str,
        operation: &'static str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, PublishError> {
        match tokio::time::timeout(self.settings.timeout, request).await {
            Ok(result) => result.map_err(|source| PublishError::Api {
                pool: pool.to_string(),
                operation,
                source,
            }),
            Err(_) => Err(PublishError::Timeout {
                pool: pool.to_string(),
                operation,
                timeout: self.settings.timeout,
            }),
        }
    }

    /// Logs `error`, counts it, and hands it to the driver.
    pub(super) fn report(&self, error: PublishError) {
        tracing::warn!(error = %error, "publishing ResourceSlices");
        let text = error.to_string();
        self.settings.resources.stats.send_modify(|s| {
            s.failures += 1;
            s.last_error = Some(text);
        });
        if let Some(handler) = &self.settings.on_error {
            handler(&error);
        }
    }
}
