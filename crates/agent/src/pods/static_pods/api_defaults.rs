//! The defaults the API server gives a `v1` Pod, which the kubelet's
//! decoder gives a static pod's manifest too (`SetObjectDefaults_Pod`):
//! what a pod read from a file runs with is what it would run with had it
//! come through the API.
//!
//! Left out: quantities are kept as written (the API rounds them up to
//! milli-units), and the defaults of volume types the agent never mounts
//! (iSCSI, RBD, AzureDisk, ScaleIO) and of ephemeral volumes' claim
//! templates (refused in a static pod).

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, HTTPGetAction, Lifecycle, Pod, PodSecurityContext, PodSpec,
    Probe, Volume,
};

/// The termination message path the API gives a container without one.
const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// Secrets', config maps', downward API and projected volumes' file mode.
const DEFAULT_MODE: i32 = 0o644;
/// A projected service account token's lifetime, in seconds.
const TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// Gives `pod` the API's defaults where its fields are unset.
pub(super) fn apply(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    if spec
        .termination_grace_period_seconds
        .is_some_and(|seconds| seconds < 0)
    {
        spec.termination_grace_period_seconds = Some(1);
    }
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        requests_from_limits(container);
    }
    spec.enable_service_links.get_or_insert(true);
    if spec.host_network == Some(true) {
        for container in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            host_network_ports(container);
        }
    }
    pod_spec(spec);
    for volume in spec.volumes.iter_mut().flatten() {
        volume_defaults(volume);
    }
    for container in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        container_defaults(container);
    }
    for ephemeral in spec.ephemeral_containers.iter_mut().flatten() {
        if ephemeral.image_pull_policy.is_none() {
            ephemeral.image_pull_policy = Some(pull_policy(ephemeral.image.as_deref()));
        }
        ephemeral
            .termination_message_path
            .get_or_insert_with(|| TERMINATION_MESSAGE_PATH.into());
        ephemeral
            .termination_message_policy
            .get_or_insert_with(|| "File".into());
        for port in ephemeral.ports.iter_mut().flatten() {
            port.protocol.get_or_insert_with(|| "TCP".into());
        }
        env_defaults(ephemeral.env.iter_mut().flatten());
    }
    if let Some(status) = &mut pod.status {
        match (&status.pod_ip, &status.pod_ips) {
            (Some(ip), None) => {
                status.pod_ips = Some(vec![k8s_openapi::api::core::v1::PodIP { ip: ip.clone() }]);
            }
            (None, Some(ips)) if !ips.is_empty() => status.pod_ip = Some(ips[0].ip.clone()),
            _ => {}
        }
    }
}

/// `SetDefaults_PodSpec`.
fn pod_spec(spec: &mut PodSpec) {
    if spec
        .service_account_name
        .as_deref()
        .unwrap_or("")
        .is_empty()
    {
        spec.service_account_name = spec.service_account.clone();
    }
    spec.service_account = spec.service_account_name.clone();
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
}

/// A container with limits and no request for a resource requests what it
/// is limited to (`SetDefaults_Pod`).
fn requests_from_limits(container: &mut Container) {
    let Some(resources) = &mut container.resources else {
        return;
    };
    let Some(limits) = &resources.limits else {
        return;
    };
    let requests = resources.requests.get_or_insert_with(Default::default);
    for (name, value) in limits {
        requests
            .entry(name.clone())
            .or_insert_with(|| value.clone());
    }
}

/// On the host's network a port is the host's port too
/// (`defaultHostNetworkPorts`).
fn host_network_ports(container: &mut Container) {
    for port in container.ports.iter_mut().flatten() {
        if port.host_port.unwrap_or(0) == 0 {
            port.host_port = Some(port.container_port);
        }
    }
}

/// `SetDefaults_Container` and what the generated defaults add beneath it.
fn container_defaults(container: &mut Container) {
    if container.image_pull_policy.is_none() {
        container.image_pull_policy = Some(pull_policy(container.image.as_deref()));
    }
    container
        .termination_message_path
        .get_or_insert_with(|| TERMINATION_MESSAGE_PATH.into());
    container
        .termination_message_policy
        .get_or_insert_with(|| "File".into());
    for port in container.ports.iter_mut().flatten() {
        port_defaults(port);
    }
    env_defaults(container.env.iter_mut().flatten());
    for probe in [
        &mut container.liveness_probe,
        &mut container.readiness_probe,
        &mut container.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        probe_defaults(probe);
    }
    if let Some(lifecycle) = &mut container.lifecycle {
        lifecycle_defaults(lifecycle);
    }
}

fn port_defaults(port: &mut ContainerPort) {
    port.protocol.get_or_insert_with(|| "TCP".into());
}

fn env_defaults<'a>(env: impl Iterator<Item = &'a mut EnvVar>) {
    for var in env {
        let Some(from) = &mut var.value_from else {
            continue;
        };
        if let Some(field) = &mut from.field_ref {
            field.api_version.get_or_insert_with(|| "v1".into());
        }
        if let Some(file) = &mut from.file_key_ref {
            file.optional.get_or_insert(false);
        }
    }
}

fn probe_defaults(probe: &mut Probe) {
    for (field, default) in [
        (&mut probe.timeout_seconds, 1),
        (&mut probe.period_seconds, 10),
        (&mut probe.success_threshold, 1),
        (&mut probe.failure_threshold, 3),
    ] {
        if field.unwrap_or(0) == 0 {
            *field = Some(default);
        }
    }
    if let Some(get) = &mut probe.http_get {
        http_get_defaults(get);
    }
    if let Some(grpc) = &mut probe.grpc {
        grpc.service.get_or_insert_with(String::new);
    }
}

fn lifecycle_defaults(lifecycle: &mut Lifecycle) {
    for handler in [&mut lifecycle.post_start, &mut lifecycle.pre_stop]
        .into_iter()
        .flatten()
    {
        if let Some(get) = &mut handler.http_get {
            http_get_defaults(get);
        }
    }
}

fn http_get_defaults(get: &mut HTTPGetAction) {
    if get.path.as_deref().unwrap_or("").is_empty() {
        get.path = Some("/".into());
    }
    get.scheme.get_or_insert_with(|| "HTTP".into());
}

/// `SetDefaults_Volume` and the defaults of the sources beneath it.
fn volume_defaults(volume: &mut Volume) {
    if volume_source_unset(volume) {
        volume.empty_dir = Some(Default::default());
    }
    if let Some(host_path) = &mut volume.host_path {
        host_path.type_.get_or_insert_with(String::new);
    }
    if let Some(secret) = &mut volume.secret {
        secret.default_mode.get_or_insert(DEFAULT_MODE);
    }
    if let Some(config_map) = &mut volume.config_map {
        config_map.default_mode.get_or_insert(DEFAULT_MODE);
    }
    if let Some(downward) = &mut volume.downward_api {
        downward.default_mode.get_or_insert(DEFAULT_MODE);
        for item in downward.items.iter_mut().flatten() {
            if let Some(field) = &mut item.field_ref {
                field.api_version.get_or_insert_with(|| "v1".into());
            }
        }
    }
    if let Some(image) = &mut volume.image
        && image.pull_policy.is_none()
    {
        image.pull_policy = Some(pull_policy(image.reference.as_deref()));
    }
    if let Some(projected) = &mut volume.projected {
        projected.default_mode.get_or_insert(DEFAULT_MODE);
        for source in projected.sources.iter_mut().flatten() {
            if let Some(downward) = &mut source.downward_api {
                for item in downward.items.iter_mut().flatten() {
                    if let Some(field) = &mut item.field_ref {
                        field.api_version.get_or_insert_with(|| "v1".into());
                    }
                }
            }
            if let Some(token) = &mut source.service_account_token {
                token
                    .expiration_seconds
                    .get_or_insert(TOKEN_EXPIRATION_SECONDS);
            }
        }
    }
}

/// Whether `volume` names no source at all (then it is an `emptyDir`).
fn volume_source_unset(volume: &Volume) -> bool {
    let mut named = serde_json::to_value(volume).unwrap_or_default();
    if let Some(object) = named.as_object_mut() {
        object.remove("name");
        return object.is_empty();
    }
    false
}

/// `Always` for an image at its `latest` tag (or with neither tag nor
/// digest, which is `latest`), `IfNotPresent` otherwise.
pub(crate) fn pull_policy(image: Option<&str>) -> String {
    let image = image.unwrap_or("");
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    // A tag follows the last ':' after the last '/' (before it, a ':' is
    // the registry's port).
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.rsplit_once(':').map(|(_, tag)| tag);
    let latest = match tag {
        Some(tag) => tag == "latest",
        None => digest.is_none(),
    };
    if latest { "Always" } else { "IfNotPresent" }.into()
}
