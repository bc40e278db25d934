//! The short check of one plugin (`nodeplugins check SOCKET`): a plugin's
//! registration socket, run the way the kubelet would talk to it (without
//! telling the plugin it is registered): GetInfo and its fields, the name
//! and version rules of the plugin's type, the endpoint, and the type's own
//! service.

mod report;
mod services;
mod timeouts;

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use nodeplugins_api::call::{self, CallError};
use nodeplugins_api::constants::{device_plugin, plugin_type};
use nodeplugins_api::csi_version::highest_supported;
use nodeplugins_api::dra_client::choose_service;
use nodeplugins_api::names::{is_dns_subdomain, is_extended_resource_name};
use nodeplugins_api::pluginregistration::v1::registration_client::RegistrationClient;
use nodeplugins_api::pluginregistration::v1::{InfoRequest, PluginInfo};
use nodeplugins_api::transport::{dial, root_cause};

pub use report::{Check, Report};
pub(crate) use timeouts::{CALL_TIMEOUT, GET_INFO_TIMEOUT};

pub(crate) fn is_socket(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.file_type().is_socket() {
        Ok(format!("{} is a Unix socket", path.display()))
    } else {
        Err(format!("{} is not a Unix socket", path.display()))
    }
}

pub(crate) async fn get_info(socket: &Path) -> Result<PluginInfo, String> {
    get_info_within(socket, CALL_TIMEOUT, GET_INFO_TIMEOUT).await
}

/// GetInfo through `socket`, dialed within `dial_timeout` and answered
/// within `timeout`.
pub(crate) async fn get_info_within(
    socket: &Path,
    dial_timeout: std::time::Duration,
    timeout: std::time::Duration,
) -> Result<PluginInfo, String> {
    let channel = dial(socket, dial_timeout)
        .await
        .map_err(|e| format!("dial: {}", root_cause(&e)))?;
    let mut client = RegistrationClient::new(channel);
    match call::unary(timeout, client.get_info(InfoRequest {})).await {
        Ok(info) => Ok(info),
        Err(error @ CallError::Timeout(_)) => Err(format!("{error} (the kubelet gives up then)")),
        Err(error) => Err(error.to_string()),
    }
}

/// A CSI driver name: at most 63 characters, alphanumerics, '-', '.' and
/// '_', starting and ending with an alphanumeric (CSI spec, GetPluginInfo).
fn is_csi_driver_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

pub(crate) fn check_name(info: &PluginInfo) -> Result<String, String> {
    let name = &info.name;
    let ok = match info.r#type.as_str() {
        plugin_type::DEVICE => is_extended_resource_name(name),
        plugin_type::CSI => is_csi_driver_name(name),
        _ => is_dns_subdomain(name),
    };
    let rule = match info.r#type.as_str() {
        plugin_type::DEVICE => "an extended resource name such as vendor.example.com/gpu",
        plugin_type::CSI => "a CSI driver name (<= 63 characters, alphanumerics, '-', '.', '_')",
        _ => "a DNS subdomain such as gpu.example.com",
    };
    if ok {
        Ok(format!("{name:?} is {rule}"))
    } else {
        Err(format!("{name:?} is not {rule}"))
    }
}

pub(crate) fn check_versions(info: &PluginInfo) -> Result<String, String> {
    let versions = &info.supported_versions;
    match info.r#type.as_str() {
        plugin_type::CSI => highest_supported(versions)
            .map(|v| format!("{versions:?}: the agent uses {v}"))
            .map_err(|e| e.to_string()),
        plugin_type::DEVICE if versions.iter().any(|v| v == device_plugin::VERSION) => {
            Ok(format!("{versions:?} includes {}", device_plugin::VERSION))
        }
        plugin_type::DEVICE => Err(format!(
            "{versions:?} does not include {}",
            device_plugin::VERSION
        )),
        _ => choose_service(versions)
            .map(|s| format!("{versions:?}: the agent uses {s}"))
            .map_err(|e| e.to_string()),
    }
}

/// Runs every check against the registration socket `socket`; the
/// failures are in the report.
pub async fn check(socket: &Path) -> Report {
    let mut report = Report {
        socket: socket.display().to_string(),
        checks: Vec::new(),
    };
    if !report.record("socket", is_socket(socket)) {
        return report;
    }
    let info = match get_info(socket).await {
        Ok(info) => info,
        Err(error) => {
            report.fail("GetInfo", error);
            return report;
        }
    };
    report.pass(
        "GetInfo",
        format!(
            "type {:?}, name {:?}, endpoint {:?}, versions {:?}",
            info.r#type, info.name, info.endpoint, info.supported_versions
        ),
    );
    let known = [plugin_type::CSI, plugin_type::DEVICE, plugin_type::DRA];
    if !known.contains(&info.r#type.as_str()) {
        report.fail(
            "type",
            format!(
                "{:?} is none of {known:?}: the kubelet answers \"no handler registered for plugin type\"",
                info.r#type
            ),
        );
        return report;
    }
    report.pass("type", format!("{} has a handler", info.r#type));
    report.record("name", check_name(&info));
    let versions_ok = report.record("versions", check_versions(&info));
    let endpoint = if info.endpoint.is_empty() {
        report.pass(
            "endpoint",
            "empty: the registration socket serves the plugin too",
        );
        socket.to_owned()
    } else {
        let endpoint = Path::new(&info.endpoint).to_owned();
        if !endpoint.is_absolute() {
            report.fail(
                "endpoint",
                format!("{:?} is not an absolute path", info.endpoint),
            );
            return report;
        }
        if !report.record("endpoint", is_socket(&endpoint)) {
            return report;
        }
        endpoint
    };
    if versions_ok {
        services::check(&mut report, &info, &endpoint).await;
    }
    report
}
