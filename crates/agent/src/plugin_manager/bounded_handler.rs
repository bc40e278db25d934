//! Every handler the plugin manager calls, under one deadline per call
//! (upstream's 150 s handler timeout by default): a handler that hangs
//! fails the registration it holds up, or is logged and left behind when
//! it does not finish forgetting a plugin or hearing it was told, and the
//! manager goes on. Call sites write no timeout; the registration's span
//! names the socket.

use std::sync::Arc;
use std::time::Duration;

use crate::plugin_manager::handler::{HandlerError, PluginHandler};

/// `inner`, each of whose calls ends within `limit`.
pub(crate) struct BoundedHandler {
    inner: Arc<dyn PluginHandler>,
    plugin_type: String,
    limit: Duration,
}

impl BoundedHandler {
    /// `inner`, the handler of `plugin_type`, bounded by `limit`.
    pub(crate) fn new(inner: Arc<dyn PluginHandler>, plugin_type: String, limit: Duration) -> Self {
        Self {
            inner,
            plugin_type,
            limit,
        }
    }

    fn overdue(&self) -> HandlerError {
        HandlerError::new(format!(
            "the {} handler did not answer within {:?}",
            self.plugin_type, self.limit
        ))
    }
}

#[async_trait::async_trait]
impl PluginHandler for BoundedHandler {
    async fn validate(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError> {
        tokio::time::timeout(self.limit, self.inner.validate(name, endpoint, versions))
            .await
            .unwrap_or_else(|_| Err(self.overdue()))
    }

    async fn register(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError> {
        tokio::time::timeout(self.limit, self.inner.register(name, endpoint, versions))
            .await
            .unwrap_or_else(|_| Err(self.overdue()))
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        if tokio::time::timeout(self.limit, self.inner.deregister(name, endpoint))
            .await
            .is_err()
        {
            tracing::error!(plugin_type = %self.plugin_type, %name, %endpoint,
                "plugin handler did not finish deregistering within {:?}", self.limit);
        }
    }

    async fn notified(&self, name: &str, endpoint: &str) {
        if tokio::time::timeout(self.limit, self.inner.notified(name, endpoint))
            .await
            .is_err()
        {
            tracing::error!(plugin_type = %self.plugin_type, %name, %endpoint,
                "plugin handler did not take the notification within {:?}", self.limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handler that never answers.
    struct Hangs;

    #[async_trait::async_trait]
    impl PluginHandler for Hangs {
        async fn validate(&self, _: &str, _: &str, _: &[String]) -> Result<(), HandlerError> {
            std::future::pending().await
        }
        async fn register(&self, _: &str, _: &str, _: &[String]) -> Result<(), HandlerError> {
            std::future::pending().await
        }
        async fn deregister(&self, _: &str, _: &str) {
            std::future::pending::<()>().await;
        }
        async fn notified(&self, _: &str, _: &str) {
            std::future::pending::<()>().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_handler_fails_within_the_limit_and_never_holds_the_manager() {
        let limit = Duration::from_secs(150);
        let bounded = BoundedHandler::new(Arc::new(Hangs), "DRAPlugin".into(), limit);
        let error = bounded.validate("d", "/e", &[]).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "the DRAPlugin handler did not answer within 150s"
        );
        assert!(bounded.register("d", "/e", &[]).await.is_err());
        bounded.deregister("d", "/e").await;
        bounded.notified("d", "/e").await;
    }
}
