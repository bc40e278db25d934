//! The connection to one device plugin instance: dial, options, and the
//! ListAndWatch stream that feeds its devices to the manager.

use std::path::Path;

use nodeplugins_api::deviceplugin::v1beta1::device_plugin_client::DevicePluginClient;
use nodeplugins_api::deviceplugin::v1beta1::{DevicePluginOptions, Empty};
use nodeplugins_api::transport::{dial, root_cause};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::manager::{DeviceError, DeviceManager, DeviceManagerConfig};

/// Dials the plugin and asks for its options.
pub(crate) async fn connect(
    socket: &Path,
    config: &DeviceManagerConfig,
) -> Result<(DevicePluginClient<Channel>, DevicePluginOptions), DeviceError> {
    let channel = dial(socket, config.dial_timeout)
        .await
        .map_err(|e| DeviceError::Dial(root_cause(&e)))?;
    let mut client = DevicePluginClient::new(channel);
    let options = match tokio::time::timeout(
        config.options_timeout,
        client.get_device_plugin_options(Empty {}),
    )
    .await
    {
        Ok(Ok(options)) => options.into_inner(),
        Ok(Err(status)) => {
            return Err(DeviceError::Options(format!(
                "{:?}: {}",
                status.code(),
                status.message()
            )));
        }
        Err(_) => {
            return Err(DeviceError::Options(format!(
                "no answer within {:?}",
                config.options_timeout
            )));
        }
    };
    Ok((client, options))
}

/// Follows ListAndWatch until the stream ends, fails, or `cancel` fires.
pub(crate) async fn list_and_watch(
    manager: &DeviceManager,
    resource: &str,
    id: u64,
    mut client: DevicePluginClient<Channel>,
    cancel: CancellationToken,
) {
    let stream = tokio::select! {
        () = cancel.cancelled() => return,
        stream = client.list_and_watch(Empty {}) => stream,
    };
    let mut stream = match stream {
        Ok(stream) => stream.into_inner(),
        Err(status) => {
            tracing::warn!(%resource, code = ?status.code(), error = %status.message(), "ListAndWatch failed");
            return;
        }
    };
    loop {
        let message = tokio::select! {
            () = cancel.cancelled() => return,
            message = stream.message() => message,
        };
        match message {
            Ok(Some(update)) => manager.update(resource, id, update.devices),
            Ok(None) => {
                tracing::info!(%resource, "ListAndWatch stream ended");
                return;
            }
            Err(status) => {
                tracing::warn!(%resource, code = ?status.code(), error = %status.message(), "ListAndWatch stream failed");
                return;
            }
        }
    }
}
