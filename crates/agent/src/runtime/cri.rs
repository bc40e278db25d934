//! A container runtime reached through CRI v1 (`runtime.v1`) over its Unix
//! socket, as the kubelet reaches it (`--container-runtime-endpoint`):
//! every call goes through the call layer ([`nodeplugins_api::call_layer`]:
//! deadline, metrics, span);
//! the channel connects on first use and again after the runtime
//! restarts. What the pods owner asks for is put into the CRI's messages
//! as the kubelet puts it: a host-network sandbox with the kubelet's
//! labels, a container with its device nodes, mounts, environment,
//! annotations and CDI devices.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use futures::stream::BoxStream;
use nodeplugins_api::cri::v1 as cri;
use nodeplugins_api::cri::v1::image_service_client::ImageServiceClient;
use nodeplugins_api::cri::v1::runtime_service_client::RuntimeServiceClient;
use nodeplugins_api::transport::dial_lazy;
use tonic::transport::Channel;
use tower::ServiceBuilder;

use super::container_runtime::{
    ContainerRuntime, RuntimeCondition, RuntimeHandler, RuntimeStatus, RuntimeVersion,
};
use super::cri_security::{container_security, sandbox_security};
use super::error::RuntimeError;
use super::metrics::RuntimeMetrics;
use super::security::ImageUser;
use super::spec::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, ContainerEvent, ContainerEventKind,
    ContainerSpec, ContainerState, ContainerStatus, LinuxResources, POD_NAME_LABEL,
    POD_NAMESPACE_LABEL, POD_UID_LABEL, PodIdentity, PulledImage, SandboxSpec, SandboxStatus,
    container_hash_of,
};
use super::stats::{ContainerStats, Sample, SandboxStats};
use super::streaming::{AttachRequest, EXEC_SYNC_DEFAULT_DEADLINE, ExecRequest, ExecSyncOutput};
use super::termination_message::{Exited, with_termination_message};
use nodeplugins_api::call_layer::{CallLayer, CallService};

/// Container events held for a reader that is behind.
const EVENT_BUFFER: usize = 1024;

/// Dialing the runtime's socket.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The extra time a `StopContainer` call gets past the container's grace
/// period, as the kubelet gives it (its request timeout).
const STOP_EXTRA: Duration = super::metrics::RUNTIME_REQUEST_TIMEOUT;

/// A runtime reached through CRI. Cheap to clone.
#[derive(Clone)]
pub struct CriRuntime {
    endpoint: String,
    runtime: RuntimeServiceClient<CallService<Channel>>,
    images: ImageServiceClient<CallService<Channel>>,
}

impl CriRuntime {
    /// What the runtime has of `image`, when it has it.
    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>, RuntimeError> {
        Ok(self
            .images
            .clone()
            .image_status(cri::ImageStatusRequest {
                image: Some(cri::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .map_err(failed("ImageStatus"))?
            .into_inner()
            .image)
    }

    /// A runtime at `endpoint` (`unix:///run/containerd/containerd.sock`
    /// or a plain path); calls bounded by `timeout` unless they set their
    /// own, counted in `metrics`. Nothing is dialed until the first call.
    pub fn new(
        endpoint: &str,
        timeout: Duration,
        metrics: RuntimeMetrics,
    ) -> Result<Self, RuntimeError> {
        let path = PathBuf::from(endpoint.strip_prefix("unix://").unwrap_or(endpoint));
        let channel = dial_lazy(&path, CONNECT_TIMEOUT).map_err(|e| RuntimeError::Connect {
            endpoint: endpoint.to_string(),
            message: e.to_string(),
        })?;
        // The event stream has no deadline; a call that sets its own
        // (StopContainer adds the grace period) keeps it.
        let policy = CallLayer::new("runtime", endpoint)
            .deadline(timeout)
            .method_deadline("GetContainerEvents", None)
            .metrics(Arc::new(metrics));
        let service = ServiceBuilder::new().layer(policy).service(channel);
        Ok(Self {
            endpoint: endpoint.to_string(),
            runtime: RuntimeServiceClient::new(service.clone()),
            images: ImageServiceClient::new(service),
        })
    }

    /// The endpoint it calls.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

/// A failed call as an error naming `operation`.
fn failed(operation: &'static str) -> impl FnOnce(tonic::Status) -> RuntimeError {
    move |status| RuntimeError::Call {
        operation,
        code: status.code(),
        message: status.message().to_string(),
    }
}

#[async_trait::async_trait]
impl ContainerRuntime for CriRuntime {
    async fn version(&self) -> Result<RuntimeVersion, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .version(cri::VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(failed("Version"))?
            .into_inner();
        Ok(RuntimeVersion {
            name: answer.runtime_name,
            version: answer.runtime_version,
            api_version: answer.runtime_api_version,
        })
    }

    async fn status(&self) -> Result<RuntimeStatus, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .status(cri::StatusRequest { verbose: false })
            .await
            .map_err(failed("Status"))?
            .into_inner();
        Ok(RuntimeStatus {
            conditions: answer
                .status
                .map(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .map(|c| RuntimeCondition {
                    kind: c.r#type,
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            handlers: answer
                .runtime_handlers
                .into_iter()
                .map(|h| {
                    let features = h.features.unwrap_or_default();
                    RuntimeHandler {
                        name: h.name,
                        recursive_read_only_mounts: features.recursive_read_only_mounts,
                        user_namespaces: features.user_namespaces,
                    }
                })
                .collect(),
            supplemental_groups_policy: answer
                .features
                .is_some_and(|f| f.supplemental_groups_policy),
        })
    }

    async fn image_present(&self, image: &str) -> Result<Option<String>, RuntimeError> {
        Ok(self.image_status(image).await?.map(|found| found.id))
    }

    async fn pull_image(
        &self,
        image: &str,
        sandbox: &SandboxSpec,
    ) -> Result<PulledImage, RuntimeError> {
        let reference = self
            .images
            .clone()
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                auth: None,
                sandbox_config: Some(sandbox_config(sandbox)),
            })
            .await
            .map_err(failed("PullImage"))?
            .into_inner()
            .image_ref;
        // Its size, as the kubelet tells it in its Event.
        let size = self
            .image_status(&reference)
            .await?
            .map_or(0, |found| found.size);
        Ok(PulledImage { reference, size })
    }

    async fn image_user(&self, image: &str) -> Result<ImageUser, RuntimeError> {
        Ok(match self.image_status(image).await? {
            Some(cri::Image { uid: Some(uid), .. }) => ImageUser::Id(uid.value),
            Some(cri::Image { username, .. }) if !username.is_empty() => ImageUser::Name(username),
            _ => ImageUser::default(),
        })
    }

    async fn run_sandbox(&self, sandbox: &SandboxSpec) -> Result<String, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(sandbox_config(sandbox)),
                runtime_handler: sandbox.runtime_handler.clone(),
            })
            .await
            .map_err(failed("RunPodSandbox"))?
            .into_inner();
        Ok(answer.pod_sandbox_id)
    }

    async fn stop_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime
            .clone()
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map_err(failed("StopPodSandbox"))?;
        Ok(())
    }

    async fn remove_sandbox(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime
            .clone()
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map_err(failed("RemovePodSandbox"))?;
        Ok(())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        sandbox: &SandboxSpec,
        container: &ContainerSpec,
        image_ref: &str,
    ) -> Result<String, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                config: Some(container_config(sandbox, container, image_ref)),
                sandbox_config: Some(sandbox_config(sandbox)),
            })
            .await
            .map_err(failed("CreateContainer"))?
            .into_inner();
        Ok(answer.container_id)
    }

    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime
            .clone()
            .start_container(cri::StartContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .map_err(failed("StartContainer"))?;
        Ok(())
    }

    async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let mut request = tonic::Request::new(cri::StopContainerRequest {
            container_id: id.to_string(),
            timeout: i64::try_from(grace.as_secs()).unwrap_or(i64::MAX),
        });
        request.set_timeout(grace + STOP_EXTRA);
        self.runtime
            .clone()
            .stop_container(request)
            .await
            .map_err(failed("StopContainer"))?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.runtime
            .clone()
            .remove_container(cri::RemoveContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .map_err(failed("RemoveContainer"))?;
        Ok(())
    }

    async fn sandboxes(&self) -> Result<Vec<SandboxStatus>, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
            .map_err(failed("ListPodSandbox"))?
            .into_inner();
        Ok(answer
            .items
            .into_iter()
            .map(|s| {
                let metadata = s.metadata.unwrap_or_default();
                SandboxStatus {
                    pod: PodIdentity {
                        namespace: metadata.namespace,
                        name: metadata.name,
                        uid: metadata.uid,
                    },
                    attempt: metadata.attempt,
                    ready: s.state == cri::PodSandboxState::SandboxReady as i32,
                    created_at: from_unix_nanos(s.created_at),
                    id: s.id,
                }
            })
            .collect())
    }

    async fn containers(&self) -> Result<Vec<ContainerStatus>, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .list_containers(cri::ListContainersRequest { filter: None })
            .await
            .map_err(failed("ListContainers"))?
            .into_inner();
        Ok(answer
            .containers
            .into_iter()
            .map(|c| {
                let metadata = c.metadata.unwrap_or_default();
                ContainerStatus {
                    pod: pod_of(&c.labels),
                    name: metadata.name,
                    attempt: metadata.attempt,
                    state: state(c.state),
                    image_ref: c.image_ref,
                    image: c.image.map(|i| i.image).unwrap_or_default(),
                    created_at: from_unix_nanos(c.created_at),
                    started_at: None,
                    finished_at: None,
                    exit_code: None,
                    reason: String::new(),
                    message: String::new(),
                    user: None,
                    log_path: String::new(),
                    hash: container_hash_of(c.annotations.get(CONTAINER_HASH_ANNOTATION)),
                    id: c.id,
                    sandbox_id: c.pod_sandbox_id,
                }
            })
            .collect())
    }

    async fn container_status(&self, id: &str) -> Result<ContainerStatus, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .container_status(cri::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await
            .map_err(failed("ContainerStatus"))?
            .into_inner();
        let status = answer.status.ok_or(RuntimeError::Incomplete {
            operation: "ContainerStatus",
            missing: "status",
        })?;
        let metadata = status.metadata.unwrap_or_default();
        let state = state(status.state);
        let when = |nanos: i64| (nanos > 0).then(|| from_unix_nanos(nanos));
        let message = if state == ContainerState::Exited {
            let annotation = |key: &str| status.annotations.get(key).map(String::as_str);
            let exited = Exited {
                path: annotation("io.kubernetes.container.terminationMessagePath"),
                fallback_to_logs: annotation("io.kubernetes.container.terminationMessagePolicy")
                    == Some("FallbackToLogsOnError"),
                exit_code: status.exit_code,
                reason: &status.reason,
                mounts: status
                    .mounts
                    .iter()
                    .map(|m| (m.container_path.as_str(), m.host_path.as_str()))
                    .collect(),
                log_path: &status.log_path,
            };
            with_termination_message(status.message.clone(), &exited)
        } else {
            status.message.clone()
        };
        Ok(ContainerStatus {
            pod: pod_of(&status.labels),
            sandbox_id: String::new(),
            name: metadata.name,
            attempt: metadata.attempt,
            image: status
                .image
                .as_ref()
                .map(|i| i.image.clone())
                .unwrap_or_default(),
            image_ref: status.image_ref,
            created_at: from_unix_nanos(status.created_at),
            started_at: when(status.started_at),
            finished_at: when(status.finished_at),
            exit_code: (state == ContainerState::Exited).then_some(status.exit_code),
            reason: status.reason,
            message,
            user: status
                .user
                .and_then(|u| u.linux)
                .map(|l| crate::runtime::ContainerUser {
                    uid: l.uid,
                    gid: l.gid,
                    supplemental_groups: l.supplemental_groups,
                }),
            state,
            log_path: status.log_path,
            hash: container_hash_of(status.annotations.get(CONTAINER_HASH_ANNOTATION)),
            id: status.id,
        })
    }

    async fn exec(&self, request: &ExecRequest) -> Result<String, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .exec(cri::ExecRequest {
                container_id: request.container_id.clone(),
                cmd: request.cmd.clone(),
                tty: request.tty,
                stdin: request.stdin,
                stdout: request.stdout,
                stderr: request.stderr,
            })
            .await
            .map_err(failed("Exec"))?
            .into_inner();
        Ok(answer.url)
    }

    async fn attach(&self, request: &AttachRequest) -> Result<String, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .attach(cri::AttachRequest {
                container_id: request.container_id.clone(),
                stdin: request.stdin,
                tty: request.tty,
                stdout: request.stdout,
                stderr: request.stderr,
            })
            .await
            .map_err(failed("Attach"))?
            .into_inner();
        Ok(answer.url)
    }

    async fn port_forward(&self, sandbox_id: &str, ports: &[i32]) -> Result<String, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .port_forward(cri::PortForwardRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                port: ports.to_vec(),
            })
            .await
            .map_err(failed("PortForward"))?
            .into_inner();
        Ok(answer.url)
    }

    async fn container_stats(&self) -> Result<Vec<ContainerStats>, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .list_container_stats(cri::ListContainerStatsRequest { filter: None })
            .await
            .map_err(failed("ListContainerStats"))?
            .into_inner();
        Ok(answer
            .stats
            .into_iter()
            .map(|stats| {
                let attributes = stats.attributes.unwrap_or_default();
                ContainerStats {
                    pod: pod_of(&attributes.labels),
                    name: attributes.metadata.unwrap_or_default().name,
                    id: attributes.id,
                    cpu: stats.cpu.as_ref().and_then(cpu_sample),
                    memory_working_set: stats.memory.as_ref().and_then(memory_sample),
                    swap: stats
                        .swap
                        .and_then(|swap| uint64_sample(swap.timestamp, swap.swap_usage_bytes)),
                    swap_available: stats
                        .swap
                        .and_then(|swap| uint64_sample(swap.timestamp, swap.swap_available_bytes)),
                }
            })
            .collect())
    }

    async fn sandbox_stats(&self) -> Result<Vec<SandboxStats>, RuntimeError> {
        let answer = self
            .runtime
            .clone()
            .list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest { filter: None })
            .await
            .map_err(failed("ListPodSandboxStats"))?
            .into_inner();
        Ok(answer
            .stats
            .into_iter()
            .map(|stats| {
                let attributes = stats.attributes.unwrap_or_default();
                let linux = stats.linux.unwrap_or_default();
                SandboxStats {
                    pod: pod_of(&attributes.labels),
                    id: attributes.id,
                    cpu: linux.cpu.as_ref().and_then(cpu_sample),
                    memory_working_set: linux.memory.as_ref().and_then(memory_sample),
                }
            })
            .collect())
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Option<Duration>,
    ) -> Result<ExecSyncOutput, RuntimeError> {
        // The command's own limit, and the call's: the kubelet gives the
        // call the command's timeout past its request timeout.
        let seconds = timeout.map_or(0, |t| i64::try_from(t.as_secs()).unwrap_or(i64::MAX));
        let mut request = tonic::Request::new(cri::ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.to_vec(),
            timeout: seconds,
        });
        request.set_timeout(timeout.map_or(EXEC_SYNC_DEFAULT_DEADLINE, |t| t + STOP_EXTRA));
        let answer = self
            .runtime
            .clone()
            .exec_sync(request)
            .await
            .map_err(failed("ExecSync"))?
            .into_inner();
        Ok(ExecSyncOutput {
            stdout: answer.stdout,
            stderr: answer.stderr,
            exit_code: answer.exit_code,
        })
    }

    async fn container_events(
        &self,
    ) -> Result<BoxStream<'static, Result<ContainerEvent, RuntimeError>>, RuntimeError> {
        // A grpc-go server sends a stream's headers with its first message,
        // so the call is made on a task of its own: the request goes out
        // (and the runtime starts telling) now, not when an event comes.
        let (sender, events) = tokio::sync::mpsc::channel(EVENT_BUFFER);
        let mut runtime = self.runtime.clone();
        tokio::spawn(async move {
            let mut stream = match runtime.get_container_events(cri::GetEventsRequest {}).await {
                Ok(answer) => answer.into_inner(),
                Err(status) => {
                    let _ = sender.send(Err(failed("GetContainerEvents")(status))).await;
                    return;
                }
            };
            while let Some(event) = stream.next().await {
                let event = event
                    .map_err(failed("GetContainerEvents"))
                    .map(container_event);
                let ended = event.is_err();
                if sender.send(event).await.is_err() || ended {
                    return;
                }
            }
        });
        Ok(tokio_stream::wrappers::ReceiverStream::new(events).boxed())
    }
}

/// A CRI container event in the runtime's terms.
fn container_event(event: cri::ContainerEventResponse) -> ContainerEvent {
    let kind = match cri::ContainerEventType::try_from(event.container_event_type) {
        Ok(cri::ContainerEventType::ContainerCreatedEvent) => ContainerEventKind::Created,
        Ok(cri::ContainerEventType::ContainerStartedEvent) => ContainerEventKind::Started,
        Ok(cri::ContainerEventType::ContainerDeletedEvent) => ContainerEventKind::Deleted,
        // Stopped, or a kind this agent does not know: look at it again.
        _ => ContainerEventKind::Stopped,
    };
    let pod_uid = event
        .pod_sandbox_status
        .and_then(|s| s.metadata)
        .map(|m| m.uid);
    ContainerEvent {
        container_id: event.container_id,
        kind,
        pod_uid,
    }
}

/// The sandbox as the kubelet configures a host-network pod's.
fn sandbox_config(sandbox: &SandboxSpec) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: sandbox.pod.name.clone(),
            uid: sandbox.pod.uid.clone(),
            namespace: sandbox.pod.namespace.clone(),
            attempt: sandbox.attempt,
        }),
        // A host-network pod keeps the node's host name (the kubelet sets
        // none; runc refuses one without a UTS namespace of the pod's).
        hostname: String::new(),
        log_directory: sandbox.log_directory.clone(),
        dns_config: sandbox.dns.as_ref().map(|dns| cri::DnsConfig {
            servers: dns.servers.clone(),
            searches: dns.searches.clone(),
            options: dns.options.clone(),
        }),
        labels: labeled(&sandbox.labels, &sandbox.pod, None),
        annotations: sandbox.annotations.clone().into_iter().collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(sandbox_security(&sandbox.security)),
            sysctls: sandbox.security.sysctls.clone().into_iter().collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The container as the kubelet configures it.
fn container_config(
    sandbox: &SandboxSpec,
    container: &ContainerSpec,
    image_ref: &str,
) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: container.name.clone(),
            attempt: container.attempt,
        }),
        image: Some(cri::ImageSpec {
            image: image_ref.to_string(),
            user_specified_image: container.image.clone(),
            ..Default::default()
        }),
        command: container.command.clone(),
        args: container.args.clone(),
        working_dir: container.working_dir.clone(),
        envs: container
            .envs
            .iter()
            .map(|(key, value)| cri::KeyValue {
                key: key.clone(),
                value: value.clone().into_bytes(),
            })
            .collect(),
        mounts: container
            .mounts
            .iter()
            .map(|m| cri::Mount {
                container_path: m.container_path.clone(),
                host_path: m.host_path.clone(),
                readonly: m.read_only,
                propagation: match m.propagation {
                    crate::runtime::MountPropagation::Private => {
                        cri::MountPropagation::PropagationPrivate as i32
                    }
                    crate::runtime::MountPropagation::HostToContainer => {
                        cri::MountPropagation::PropagationHostToContainer as i32
                    }
                    crate::runtime::MountPropagation::Bidirectional => {
                        cri::MountPropagation::PropagationBidirectional as i32
                    }
                },
                selinux_relabel: m.selinux_relabel,
                recursive_read_only: m.recursive_read_only,
                image: m.image.as_ref().map(|i| cri::ImageSpec {
                    image: i.image.clone(),
                    user_specified_image: i.user_specified_image.clone(),
                    ..Default::default()
                }),
                image_sub_path: m
                    .image
                    .as_ref()
                    .map(|i| i.sub_path.clone())
                    .unwrap_or_default(),
                ..Default::default()
            })
            .collect(),
        devices: container
            .devices
            .iter()
            .map(|d| cri::Device {
                container_path: d.container_path.clone(),
                host_path: d.host_path.clone(),
                permissions: d.permissions.clone(),
            })
            .collect(),
        cdi_devices: container
            .cdi_devices
            .iter()
            .map(|name| cri::CdiDevice { name: name.clone() })
            .collect(),
        labels: labeled(&container.labels, &sandbox.pod, Some(&container.name)),
        annotations: container.annotations.clone().into_iter().collect(),
        log_path: container.log_path.clone(),
        stdin: container.stdin,
        stdin_once: container.stdin_once,
        tty: container.tty,
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(container_security(&container.security)),
            resources: Some(linux_resources(&container.resources)),
        }),
        ..Default::default()
    }
}

/// A container's cgroup resources in CRI's terms.
fn linux_resources(resources: &LinuxResources) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        cpu_period: resources.cpu_period,
        cpu_quota: resources.cpu_quota,
        cpu_shares: resources.cpu_shares,
        memory_limit_in_bytes: resources.memory_limit_in_bytes,
        oom_score_adj: resources.oom_score_adj,
        memory_swap_limit_in_bytes: resources.memory_swap_limit_in_bytes,
        hugepage_limits: resources
            .hugepage_limits
            .iter()
            .map(|(page_size, limit)| cri::HugepageLimit {
                page_size: page_size.clone(),
                limit: *limit,
            })
            .collect(),
        unified: resources.unified.clone().into_iter().collect(),
        ..Default::default()
    }
}

/// `labels` with the kubelet's pod (and container) labels.
fn labeled(
    labels: &BTreeMap<String, String>,
    pod: &PodIdentity,
    container: Option<&str>,
) -> std::collections::HashMap<String, String> {
    let mut all: std::collections::HashMap<String, String> = labels.clone().into_iter().collect();
    all.insert(POD_NAME_LABEL.into(), pod.name.clone());
    all.insert(POD_NAMESPACE_LABEL.into(), pod.namespace.clone());
    all.insert(POD_UID_LABEL.into(), pod.uid.clone());
    if let Some(container) = container {
        all.insert(CONTAINER_NAME_LABEL.into(), container.into());
    }
    all
}

/// The pod a container's labels name.
fn pod_of(labels: &std::collections::HashMap<String, String>) -> PodIdentity {
    let get = |key: &str| labels.get(key).cloned().unwrap_or_default();
    PodIdentity {
        namespace: get(POD_NAMESPACE_LABEL),
        name: get(POD_NAME_LABEL),
        uid: get(POD_UID_LABEL),
    }
}

fn state(state: i32) -> ContainerState {
    match cri::ContainerState::try_from(state) {
        Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

/// The cumulative CPU time of a CRI measurement, when it has one.
fn cpu_sample(cpu: &cri::CpuUsage) -> Option<Sample> {
    uint64_sample(cpu.timestamp, cpu.usage_core_nano_seconds)
}

/// The memory working set of a CRI measurement, when it has one.
fn memory_sample(memory: &cri::MemoryUsage) -> Option<Sample> {
    uint64_sample(memory.timestamp, memory.working_set_bytes)
}

/// A CRI value measured at `timestamp`, when there is one.
fn uint64_sample(timestamp: i64, value: Option<cri::UInt64Value>) -> Option<Sample> {
    value.map(|value| Sample {
        at: from_unix_nanos(timestamp),
        value: value.value,
    })
}

fn from_unix_nanos(nanos: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}
