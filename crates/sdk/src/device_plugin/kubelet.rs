//! Registering through `kubelet.sock`, retrying until the kubelet answers.

use nodeplugins_api::backoff::Backoff;
use nodeplugins_api::retry::{Retry, Said};
use nodeplugins_api::timer::sleep_until;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

use nodeplugins_api::call::{self, CallError};
use nodeplugins_api::constants::device_plugin::VERSION;
use nodeplugins_api::constants::layout::KUBELET_SOCKET;
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::transport::{dial, root_cause};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::registrar::RegistrationState;

/// How long `Register` may take: the kubelet dials the plugin and asks for
/// its options inside the call.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Registers `resource`, served on `socket_name` in the device plugin
/// directory `dir`, through `<dir>/kubelet.sock`, retrying until it succeeds
/// or `stop` fires, and tells `state` where it stands: registered, or
/// refused by the kubelet with its reason (still retried: a refusal may be
/// about something the plugin's operator fixes).
pub(super) async fn register_with_kubelet(
    dir: &Path,
    socket_name: &str,
    resource: &str,
    options: dp::DevicePluginOptions,
    state: &watch::Sender<RegistrationState>,
    stop: &CancellationToken,
) {
    let kubelet = dir.join(KUBELET_SOCKET);
    let schedule = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
    let mut retry: Retry<String> = Retry::default();
    loop {
        match register_once(&kubelet, socket_name, resource, options).await {
            Ok(()) => {
                tracing::info!(resource = %resource, "registered with the kubelet");
                state.send_replace(RegistrationState::Registered);
                return;
            }
            Err(failure) => {
                let error = match failure {
                    Failure::Refused(reason) => {
                        state.send_replace(RegistrationState::Rejected(reason.clone()));
                        format!("refused: {reason}")
                    }
                    Failure::Unreachable(error) => error,
                };
                if retry.failed(error.clone(), &schedule, Instant::now()) == Said::NewError {
                    tracing::warn!(resource = %resource, %error, "registration with the kubelet failed; retrying");
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = sleep_until(retry.due_at()) => {}
        }
    }
}

/// Why one registration did not succeed.
enum Failure {
    /// The kubelet answered with an error: its reason.
    Refused(String),
    /// The kubelet could not be reached or did not answer.
    Unreachable(String),
}

async fn register_once(
    kubelet: &Path,
    socket_name: &str,
    resource: &str,
    options: dp::DevicePluginOptions,
) -> Result<(), Failure> {
    let channel = dial(kubelet, Duration::from_secs(10))
        .await
        .map_err(|e| Failure::Unreachable(root_cause(&e)))?;
    let request = dp::RegisterRequest {
        version: VERSION.into(),
        endpoint: socket_name.into(),
        resource_name: resource.into(),
        options: Some(options),
    };
    let mut client = dp::registration_client::RegistrationClient::new(channel);
    let call = client.register(request);
    match call::unary(REGISTER_TIMEOUT, call).await {
        Ok(_) => Ok(()),
        // The kubelet's refusals come back as its error's text (code
        // Unknown); a connection lost on the way is Unavailable.
        Err(CallError::Status(status))
            if !matches!(
                status.code(),
                tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
            ) =>
        {
            Err(Failure::Refused(status.message().to_string()))
        }
        Err(error) => Err(Failure::Unreachable(error.to_string())),
    }
}
