//! The type-specific part of `nodeplugins check`: the plugin's own service
//! on its endpoint, called as the agent would.

use std::collections::BTreeSet;
use std::path::Path;

use futures::StreamExt;
use nodeplugins_api::call;
use nodeplugins_api::call_layer::CallLayer;
use nodeplugins_api::constants::{device_plugin, plugin_type};
use nodeplugins_api::csi::v1 as csi;
use nodeplugins_api::deviceplugin::v1beta1 as dp;
use nodeplugins_api::dra::v1 as dra_v1;
use nodeplugins_api::dra_client::{DraClient, DraService, HealthService, watch_health};
use nodeplugins_api::pluginregistration::v1::PluginInfo;
use nodeplugins_api::transport::{dial, root_cause};
use tonic::transport::Channel;

use super::report::Report;
use super::timeouts::CALL_TIMEOUT;

/// `call`'s answer within the check deadline; its failure as one line.
async fn bounded<T>(call: impl Future<Output = Result<T, tonic::Status>>) -> Result<T, String> {
    call::within(CALL_TIMEOUT, call)
        .await
        .map_err(|e| e.to_string())
}

pub(super) async fn check(report: &mut Report, info: &PluginInfo, endpoint: &Path) {
    let channel = match dial(endpoint, CALL_TIMEOUT).await {
        Ok(channel) => channel,
        Err(e) => {
            report.fail(
                "service dial",
                format!("{}: {}", endpoint.display(), root_cause(&e)),
            );
            return;
        }
    };
    match info.r#type.as_str() {
        plugin_type::DEVICE => device(report, channel).await,
        plugin_type::CSI => csi(report, info, channel).await,
        _ => dra(report, info, channel).await,
    }
}

async fn device(report: &mut Report, channel: Channel) {
    let mut client = dp::device_plugin_client::DevicePluginClient::new(channel);
    match bounded(client.get_device_plugin_options(dp::Empty {})).await {
        Ok(options) => {
            let options = options.into_inner();
            report.pass(
                "GetDevicePluginOptions",
                format!(
                    "pre_start_required {}, get_preferred_allocation_available {}",
                    options.pre_start_required, options.get_preferred_allocation_available
                ),
            );
        }
        Err(error) => report.fail("GetDevicePluginOptions", error),
    }
    let first = async {
        let mut stream = client.list_and_watch(dp::Empty {}).await?.into_inner();
        stream
            .message()
            .await?
            .ok_or_else(|| tonic::Status::unknown("the stream ended before the first device list"))
    };
    match bounded(first).await {
        Ok(list) => {
            let ids: BTreeSet<&str> = list.devices.iter().map(|d| d.id.as_str()).collect();
            let bad_health: Vec<&str> = list
                .devices
                .iter()
                .filter(|d| {
                    d.health != device_plugin::HEALTHY && d.health != device_plugin::UNHEALTHY
                })
                .map(|d| d.id.as_str())
                .collect();
            let healthy = list
                .devices
                .iter()
                .filter(|d| d.health == device_plugin::HEALTHY)
                .count();
            if ids.len() != list.devices.len() {
                report.fail("ListAndWatch", "the first device list repeats a device id");
            } else if !bad_health.is_empty() {
                report.fail(
                    "ListAndWatch",
                    format!("devices {bad_health:?} have a health other than Healthy or Unhealthy"),
                );
            } else {
                report.pass(
                    "ListAndWatch",
                    format!(
                        "first list: {} devices, {healthy} healthy",
                        list.devices.len()
                    ),
                );
            }
        }
        Err(error) => report.fail("ListAndWatch", error),
    }
}

async fn csi(report: &mut Report, info: &PluginInfo, channel: Channel) {
    let mut identity = csi::identity_client::IdentityClient::new(channel.clone());
    match bounded(identity.get_plugin_info(csi::GetPluginInfoRequest {})).await {
        Ok(plugin) if plugin.get_ref().name == info.name => report.pass(
            "GetPluginInfo",
            format!(
                "name {:?}, version {:?}",
                info.name,
                plugin.get_ref().vendor_version
            ),
        ),
        Ok(plugin) => report.fail(
            "GetPluginInfo",
            format!(
                "the driver calls itself {:?}, its registration says {:?}",
                plugin.get_ref().name,
                info.name
            ),
        ),
        Err(error) => report.fail("GetPluginInfo", error),
    }
    let mut node = csi::node_client::NodeClient::new(channel);
    match bounded(node.node_get_info(csi::NodeGetInfoRequest {})).await {
        Ok(node) if !node.get_ref().node_id.is_empty() => report.pass(
            "NodeGetInfo",
            format!(
                "node id {:?}, max volumes {}",
                node.get_ref().node_id,
                node.get_ref().max_volumes_per_node
            ),
        ),
        Ok(_) => report.fail("NodeGetInfo", "empty node id"),
        Err(error) => report.fail("NodeGetInfo", error),
    }
}

async fn dra(report: &mut Report, info: &PluginInfo, channel: Channel) {
    let listed = |name: &str| info.supported_versions.iter().any(|v| v == name);
    // An empty request: served services answer with an empty map.
    for service in [DraService::V1, DraService::V1beta1] {
        if listed(service.as_str()) {
            let policy = CallLayer::new("DRA driver", service).deadline(CALL_TIMEOUT);
            let client = DraClient::new(policy.service(channel.clone()), service);
            let request = dra_v1::NodePrepareResourcesRequest::default();
            let answer = client.prepare(request).await;
            report_service(
                report,
                service.as_str(),
                answer.map(|_| ()).map_err(|e| e.to_string()),
            );
        }
    }
    for service in [HealthService::V1, HealthService::V1alpha1] {
        if listed(service.as_str()) {
            let first = async {
                let mut stream = watch_health(channel.clone(), service).await?;
                match stream.next().await {
                    Some(message) => message.map(|m| m.devices.len()),
                    None => Err(tonic::Status::unknown(
                        "the stream ended before the first message",
                    )),
                }
            };
            report_health(report, service.as_str(), bounded(first).await);
        }
    }
}

fn report_service(report: &mut Report, service: &str, result: Result<(), String>) {
    let name = format!("serves {service}");
    match result {
        Ok(()) => report.pass(&name, "NodePrepareResources with no claims answered"),
        Err(error) => report.fail(
            &name,
            format!("listed, but NodePrepareResources failed: {error}"),
        ),
    }
}

fn report_health(report: &mut Report, service: &str, result: Result<usize, String>) {
    let name = format!("serves {service}");
    match result {
        Ok(devices) => report.pass(&name, format!("first health message: {devices} devices")),
        Err(error) => report.fail(
            &name,
            format!("listed, but NodeWatchResources failed: {error}"),
        ),
    }
}
