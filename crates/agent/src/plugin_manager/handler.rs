//! The interface between the plugin manager and the code that knows a
//! plugin type (CSI, device plugin, DRA, or an embedder's own).

/// Why a handler refused or failed a plugin. The message is sent to the
/// plugin in `NotifyRegistrationStatus`, so it should say what to fix.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct HandlerError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl HandlerError {
    /// An error with a message only.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// An error that says what `source` says, keeping it as the cause.
    pub fn from_error(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }

    /// An error with a message and its cause; the cause is appended when the
    /// error is shown to the plugin.
    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let source: Box<dyn std::error::Error + Send + Sync> = Box::new(source);
        Self {
            message: format!("{}: {source}", message.into()),
            source: Some(source),
        }
    }
}

/// Handles the plugins of one type. The plugin manager calls it, for each
/// socket path, strictly in the order validate → register, and later
/// deregister; calls for one socket path never overlap.
#[async_trait::async_trait]
pub trait PluginHandler: Send + Sync + 'static {
    /// Checks a plugin before registration (names, versions). An error is
    /// sent to the plugin and the registration is retried with backoff.
    async fn validate(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError>;

    /// Takes the plugin into use. On error the handler must leave no trace
    /// of the plugin: the manager will retry the whole registration.
    async fn register(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), HandlerError>;

    /// Stops using the plugin registered with `name` at `endpoint`.
    async fn deregister(&self, name: &str, endpoint: &str);

    /// The plugin registered with `name` at `endpoint` was told it is
    /// registered. Work the plugin need not wait for (such as connecting to
    /// its service) can start here rather than in
    /// [`register`](Self::register), so the plugin hears back sooner. Called
    /// once per successful registration, once no other registration is in
    /// progress (during a burst, at most a second after the plugin was
    /// told), so that such work does not compete with registrations plugins
    /// wait for; it should return at once. The default does nothing.
    async fn notified(&self, name: &str, endpoint: &str) {
        let _ = (name, endpoint);
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn an_error_with_a_source_tells_the_plugin_both_and_keeps_the_cause() {
        let cause = std::io::Error::new(std::io::ErrorKind::NotFound, "no such socket");
        let error = HandlerError::with_source("cannot reach the driver", cause);
        assert_eq!(error.to_string(), "cannot reach the driver: no such socket");
        let source = error.source().expect("the cause is kept");
        assert_eq!(source.to_string(), "no such socket");
    }
}
