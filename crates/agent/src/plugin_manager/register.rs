//! One registration, as the kubelet performs it: dial the socket, GetInfo,
//! pick the handler by type, default the endpoint, validate, register, and
//! tell the plugin the outcome.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nodeplugins_api::call::{self, CallError};
use nodeplugins_api::pluginregistration::v1::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use nodeplugins_api::transport::{
    TransportError, UnaryConnection, connect_when_listening, root_cause,
};
use tokio::time::Instant;

use super::config::PluginManagerConfig;
use super::handler_table::HandlerTable;
use crate::plugin_description::PluginDescription;
use crate::plugin_manager::handler::{HandlerError, PluginHandler};

/// Where a registration failed; the message is what the plugin is told.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegisterError {
    /// The socket could not be dialed.
    #[error(
        "RegisterPlugin error -- dial failed at socket {socket}, err: {}",
        root_cause(source)
    )]
    Dial {
        /// The registration socket.
        socket: String,
        /// The cause.
        #[source]
        source: TransportError,
    },
    /// GetInfo failed or timed out.
    #[error(
        "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {socket}, err: {}",
        go_style(source)
    )]
    GetInfo {
        /// The registration socket.
        socket: String,
        /// The cause.
        #[source]
        source: CallError,
    },
    /// No handler for the plugin's type.
    #[error(
        "RegisterPlugin error -- no handler registered for plugin type: {plugin_type} at socket {socket}"
    )]
    NoHandler {
        /// The type the plugin reported.
        plugin_type: String,
        /// The registration socket.
        socket: String,
    },
    /// The handler rejected the plugin.
    #[error("RegisterPlugin error -- plugin validation failed with err: {0}")]
    Validation(#[source] HandlerError),
    /// The handler could not take the plugin into use.
    #[error("RegisterPlugin error -- plugin registration failed with err: {0}")]
    Registration(#[source] HandlerError),
    /// NotifyRegistrationStatus(true) did not reach the plugin; the handler
    /// was told to forget it again.
    #[error(
        "RegisterPlugin error -- failed to send registration status at socket {socket}, err: {}",
        go_style(source)
    )]
    Notify {
        /// The registration socket.
        socket: String,
        /// The cause.
        #[source]
        source: CallError,
    },
}

/// A successful registration: the handler took the plugin and the plugin
/// was told so.
pub(crate) struct Registered {
    pub(crate) info: PluginDescription,
    pub(crate) handler: Arc<dyn PluginHandler>,
}

/// A failed registration, with what GetInfo said if it got that far.
pub(crate) struct Failed {
    pub(crate) error: RegisterError,
    pub(crate) info: Option<PluginDescription>,
}

/// Reports progress to the reconciler so status can show a plugin's name
/// while its registration is still running.
pub(crate) type Progress = Box<dyn FnOnce(PluginDescription) + Send>;

/// Performs one registration of the plugin at `socket`.
pub(crate) async fn register(
    socket: PathBuf,
    handlers: HandlerTable,
    config: Arc<PluginManagerConfig>,
    progress: Progress,
    seen_at: Instant,
) -> Result<Registered, Failed> {
    let socket_str = socket.display().to_string();
    let mut steps = Steps::new(seen_at);
    let (dialed, refused) = dial_with_grace(&socket, &config).await;
    steps.mark("dial");
    let mut client = dialed.map_err(|e| Failed {
        error: RegisterError::Dial {
            socket: socket_str.clone(),
            source: e,
        },
        info: None,
    })?;

    let get_info = client.call::<_, PluginInfo>(GET_INFO, &InfoRequest {});
    let info = match call::within(config.get_info_timeout, get_info).await {
        Ok(info) => {
            steps.mark("get_info");
            info
        }
        Err(source) => {
            return Err(Failed {
                error: RegisterError::GetInfo {
                    socket: socket_str,
                    source,
                },
                info: None,
            });
        }
    };
    let description = PluginDescription {
        endpoint: if info.endpoint.is_empty() {
            socket_str.clone()
        } else {
            info.endpoint.clone()
        },
        plugin_type: info.r#type,
        name: info.name,
        versions: info.supported_versions,
    };
    progress(description.clone());

    let notify_timeout = config.notify_timeout;
    let fail = |error: RegisterError, client: UnaryConnection, description: PluginDescription| async move {
        let _ = notify(client, false, &error.to_string(), notify_timeout).await;
        Err(Failed {
            error,
            info: Some(description),
        })
    };

    let Some(handler) = handlers.get(&description.plugin_type) else {
        let error = RegisterError::NoHandler {
            plugin_type: description.plugin_type.clone(),
            socket: socket_str,
        };
        return fail(error, client, description).await;
    };
    let (name, endpoint, versions) = (
        &description.name,
        &description.endpoint,
        &description.versions,
    );
    let validated = handler.validate(name, endpoint, versions).await;
    steps.mark("validate");
    if let Err(e) = validated {
        return fail(RegisterError::Validation(e), client, description).await;
    }
    let registered = handler.register(name, endpoint, versions).await;
    steps.mark("handler");
    if let Err(e) = registered {
        return fail(RegisterError::Registration(e), client, description).await;
    }
    let notified = notify(client, true, "", config.notify_timeout).await;
    steps.mark("notify");
    tracing::debug!(socket = %socket.display(), refused, steps = %steps,
        "registered: time per step");
    if let Err(error) = notified {
        // As upstream: a plugin that cannot be told is not kept; the handler
        // forgets it and the registration is retried with backoff.
        handler.deregister(name, endpoint).await;
        return Err(Failed {
            error: RegisterError::Notify {
                socket: socket_str,
                source: error,
            },
            info: Some(description),
        });
    }
    Ok(Registered {
        info: description,
        handler,
    })
}

/// The registration service's methods.
const GET_INFO: &str = "/pluginregistration.Registration/GetInfo";
const NOTIFY: &str = "/pluginregistration.Registration/NotifyRegistrationStatus";

/// Dials, retrying a refused connection for a moment (the socket exists but
/// is not listening yet). Returns the outcome and how many dials were
/// refused.
async fn dial_with_grace(
    socket: &Path,
    config: &PluginManagerConfig,
) -> (Result<UnaryConnection, TransportError>, u32) {
    connect_when_listening(socket, config.dial_timeout, config.connection_refused_grace).await
}

/// How long each step of a registration took, for the debug log.
struct Steps {
    last: Instant,
    done: Vec<(&'static str, Duration)>,
}

impl Steps {
    /// Steps counted from `start` (when the socket was seen): the first
    /// step includes the wait for the registration to start.
    fn new(start: Instant) -> Self {
        Self {
            last: start,
            done: Vec::with_capacity(6),
        }
    }

    fn mark(&mut self, step: &'static str) {
        let now = Instant::now();
        self.done.push((step, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (step, took)) in self.done.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{step}={}us", took.as_micros())?;
        }
        Ok(())
    }
}

/// A failed call as grpc-go words it (`rpc error: code = ... desc = ...`,
/// and a broken transport's cause), as the kubelet tells plugins.
fn go_style(error: &CallError) -> String {
    let CallError::Status(status) = error else {
        return error.to_string();
    };
    let mut text = format!(
        "rpc error: code = {:?} desc = {}",
        status.code(),
        status.message()
    );
    if let Some(source) = std::error::Error::source(status) {
        text.push_str(": ");
        text.push_str(&root_cause(source));
    }
    text
}

/// Sends NotifyRegistrationStatus on `client`, once, as upstream does: a
/// transport failure is not retried (the plugin may have received it and
/// gone away), and the caller's backoff paces another attempt.
async fn notify(
    mut client: UnaryConnection,
    registered: bool,
    error: &str,
    timeout: Duration,
) -> Result<(), CallError> {
    let request = RegistrationStatus {
        plugin_registered: registered,
        error: error.to_string(),
    };
    let sent = client.call::<_, RegistrationStatusResponse>(NOTIFY, &request);
    call::within(timeout, sent).await.map(|_| ())
}
