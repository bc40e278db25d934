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
use tokio_util::sync::CancellationToken;

/// How long `Register` may take: the kubelet dials the plugin and asks for
/// its options inside the call.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// Registers `resource`, served on `socket_name` in the device plugin
/// directory `dir`, through `<dir>/kubelet.sock`, retrying until it succeeds
/// or `stop` fires.
pub(super) async fn register_with_kubelet(
    dir: &Path,
    socket_name: &str,
    resource: &str,
    options: dp::DevicePluginOptions,
    stop: &CancellationToken,
) {
    let kubelet = dir.join(KUBELET_SOCKET);
    let schedule = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
    let mut retry: Retry<String> = Retry::default();
    loop {
        match register_once(&kubelet, socket_name, resource, options).await {
            Ok(()) => {
                tracing::info!(resource = %resource, "registered with the kubelet");
                return;
            }
            Err(error) => {
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

async fn register_once(
    kubelet: &Path,
    socket_name: &str,
    resource: &str,
    options: dp::DevicePluginOptions,
) -> Result<(), String> {
    let channel = dial(kubelet, Duration::from_secs(10))
        .await
        .map_err(|e| root_cause(&e))?;
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
        Err(CallError::Status(status)) => Err(status.message().to_string()),
        Err(error) => Err(error.to_string()),
    }
}
