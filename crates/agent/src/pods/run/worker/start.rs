//! Starting one container, as the kubelet's runtime manager does in
//! `startContainer`: its image pulled as the pull policy says, its device
//! plugins' PreStartContainer, its run options made (the Services'
//! variables read once per worker), then create and start, then its
//! `postStart` hook (a failure kills it); the containers older than the
//! one before it removed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::Worker;
use crate::pods::admit::container::ContainerKind;
use crate::pods::admit::spec::containers;
use crate::pods::run::hooks::{
    FAILED_POST_START_HOOK, Hook, HookTarget, POST_START_HOOK_ERROR, run_hook,
};
use crate::pods::run_options::env_sources::{EnvObjects, named_by, no_client};
use crate::pods::run_options::generate::{NodeGiven, run_container_spec};
use crate::pods::run_options::pod_files::PodFiles;
use crate::pods::run_options::service_env;
use crate::pods::teardown::kill_container::{ContainerKill, MINIMUM_GRACE_SECONDS};
use crate::runtime::{PullPolicy, SandboxSpec};
use crate::volumes::VolumeImage;

/// The kubelet's root directory, for a node that keeps no pod files.
const DEFAULT_ROOT: &str = "/var/lib/kubelet";

impl Worker {
    /// Makes and starts container `container` of `pod` in sandbox
    /// `sandbox_id`: its image, PreStartContainer, create, start. A
    /// failure is the kubelet's (reason, message).
    pub(super) async fn start(
        &mut self,
        pod: &Pod,
        sandbox_id: &str,
        sandbox: &SandboxSpec,
        container: &Container,
        attempt: u32,
    ) -> Result<(), (String, String)> {
        // The images of the image volumes it mounts, before its own (as
        // the kubelet pulls them before its containers start).
        let mut images = BTreeMap::new();
        for (name, source) in self.image_volumes(container) {
            let reference = source.reference;
            let policy = PullPolicy::of(source.pull_policy.as_deref(), &reference);
            let pulled = self
                .pull(pod, &container.name, &reference, policy, sandbox)
                .await?;
            images.insert(name, pulled);
        }
        let image = container.image.clone().unwrap_or_default();
        let policy = PullPolicy::of(container.image_pull_policy.as_deref(), &image);
        let image_ref = self
            .pull(pod, &container.name, &image, policy, sandbox)
            .await?;
        let runtime = self.context.runtime.as_ref();
        let resources = self
            .resources
            .get(&container.name)
            .cloned()
            .unwrap_or_default();
        self.context
            .devices
            .pre_start_container(&self.pod_ref.uid, &container.name)
            .await
            .map_err(|e| ("CreateContainerConfigError".to_string(), e.to_string()))?;
        let service_env = match &self.service_env {
            Some(env) => env.clone(),
            None => {
                let env = service_env::for_pod(&self.context.informers, pod)
                    .await
                    .map_err(|e| {
                        (
                            "CreateContainerConfigError".to_string(),
                            format!("{e}, cannot construct envvars"),
                        )
                    })?;
                self.service_env = Some(env.clone());
                env
            }
        };
        let pod_files = self
            .context
            .pods_dir
            .as_deref()
            .map(|dir| PodFiles::new(dir, &self.pod_ref.uid));
        let volumes_dir = self
            .context
            .volumes
            .as_ref()
            .map(|v| v.pods_dir().join(&self.pod_ref.uid));
        let env_objects = self.env_objects(container).await;
        let allocatable: BTreeMap<String, String> = self
            .context
            .informers
            .node_now()
            .and_then(|n| n.status.as_ref()?.allocatable.clone())
            .into_iter()
            .flatten()
            .map(|(k, v)| (k, v.0))
            .collect();
        let image_user = runtime
            .image_user(&image_ref)
            .await
            .map_err(|e| self.failed(pod, container, "CreateContainerConfigError", e))?;
        let seccomp_root = self
            .context
            .pods_dir
            .as_deref()
            .and_then(std::path::Path::parent)
            .unwrap_or(std::path::Path::new(DEFAULT_ROOT))
            .join("seccomp");
        let node_ip = self.context.node.node_ip().await;
        let node = NodeGiven {
            node_ip: node_ip.as_deref(),
            image_user: &image_user,
            seccomp_root: &seccomp_root,
            env_objects: &env_objects,
            allocatable: &allocatable,
            service_env: &service_env,
            pod_files: pod_files.as_ref(),
            volumes: self.volumes.as_ref().zip(volumes_dir.as_deref()),
            recursive_read_only: self.context.node.recursive_read_only(runtime).await,
            images: &images,
        };
        let spec = run_container_spec(pod, container, &resources, &node, attempt)
            .map_err(|e| self.failed(pod, container, "CreateContainerConfigError", e))?;
        let id = runtime
            .create_container(sandbox_id, sandbox, &spec, &image_ref)
            .await
            .map_err(|e| self.failed(pod, container, "CreateContainerError", e))?;
        self.container_event(
            pod,
            &container.name,
            "Normal",
            "Created",
            "Container created".into(),
        );
        runtime
            .start_container(&id)
            .await
            .map_err(|e| self.failed(pod, container, "RunContainerError", e))?;
        self.container_event(
            pod,
            &container.name,
            "Normal",
            "Started",
            "Container started".into(),
        );
        tracing::info!(container = %container.name, id = %id, attempt, "container started");
        if let Some(post_start) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        {
            self.post_start(pod, container, &id, &Hook::of(post_start, container))
                .await?;
        }
        // Containers older than the one before this are of no use.
        if let Ok(all) = runtime.containers().await {
            for old in all.iter().filter(|c| {
                c.pod.uid == self.pod_ref.uid && c.name == container.name && c.attempt + 1 < attempt
            }) {
                let _ = runtime.remove_container(&old.id).await;
            }
        }
        Ok(())
    }

    /// Runs `container`'s `postStart` hook `hook` in its container `id`,
    /// as the kubelet does before it starts the next container: a failure
    /// is a Warning `FailedPostStartHook` Event (without the hook's
    /// output), the container killed ("FailedPostStartHook") and the
    /// start failed with `PostStartHookError` and the hook's message.
    async fn post_start(
        &self,
        pod: &Pod,
        container: &Container,
        id: &str,
        hook: &Hook,
    ) -> Result<(), (String, String)> {
        let pod_ip = self.context.node.node_ip().await;
        let target = HookTarget {
            runtime: self.context.runtime.as_ref(),
            container_id: id,
            container: &container.name,
            pod: &self.pod_ref,
            pod_ip: pod_ip.as_deref(),
            gone: &self.stop,
            events: Some(&self.context.pod_events),
            metrics: Some(&self.context.lifecycle_metrics),
        };
        let message = tokio::select! {
            () = self.stop.cancelled() => return Err(("Stopping".into(), String::new())),
            ran = run_hook(hook, &target) => match ran {
                Ok(()) => return Ok(()),
                Err(message) => message,
            },
        };
        tracing::warn!(container = %container.name, %message, "PostStartHook failed");
        let killer = self.killer(pod).await;
        let kind = containers(pod)
            .into_iter()
            .find(|(c, _)| c.name == container.name)
            .map_or(ContainerKind::App, |(_, kind)| kind);
        killer.event(
            kind,
            &container.name,
            "Warning",
            FAILED_POST_START_HOOK,
            "PostStartHook failed".into(),
        );
        // The pod's grace (a deletion's first), as the kubelet's
        // `setTerminationGracePeriod` for this reason.
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| pod.spec.as_ref()?.termination_grace_period_seconds)
            .unwrap_or(MINIMUM_GRACE_SECONDS);
        let kill = ContainerKill {
            id,
            name: &container.name,
            message: Some(FAILED_POST_START_HOOK),
            grace,
            order: None,
        };
        if let Err(e) = killer.kill(&kill).await {
            tracing::warn!(container = %container.name, error = %e, "cannot stop the container whose postStart hook failed");
        }
        Err((POST_START_HOOK_ERROR.to_string(), message))
    }

    /// The ConfigMaps and Secrets `container`'s environment names, read
    /// through the volume manager's watches (with none, each is the
    /// kubelet's error of a node without an API server).
    async fn env_objects(&self, container: &Container) -> EnvObjects {
        let namespace = self.pod_ref.namespace.as_str();
        let uid = self.pod_ref.uid.as_str();
        let volumes = self.context.volumes.as_ref();
        let mut objects = EnvObjects::new(namespace);
        let (config_maps, secrets) = named_by(container);
        for name in config_maps {
            let read = match volumes {
                Some(v) => v
                    .env_config_map(uid, namespace, &name)
                    .await
                    .map_err(|e| e.to_string()),
                None => Err(no_client("configMap", namespace, &name)),
            };
            objects.insert_config_map(name, read);
        }
        for name in secrets {
            let read = match volumes {
                Some(v) => v
                    .env_secret(uid, namespace, &name)
                    .await
                    .map_err(|e| e.to_string()),
                None => Err(no_client("secret", namespace, &name)),
            };
            objects.insert_secret(name, read);
        }
        objects
    }

    /// The start error (`reason`, `e`) of `container`, recorded as the
    /// kubelet records it: a Warning `Failed` Event, "Error: `e`".
    fn failed(
        &self,
        pod: &Pod,
        container: &Container,
        reason: &str,
        e: impl std::fmt::Display,
    ) -> (String, String) {
        let message = e.to_string();
        self.container_event(
            pod,
            &container.name,
            "Warning",
            FAILED,
            format!("Error: {message}"),
        );
        (reason.to_string(), message)
    }

    /// Records an Event of `type_` and `reason` on container `name` of
    /// `pod`, in the background.
    pub(super) fn container_event(
        &self,
        pod: &Pod,
        name: &str,
        type_: &'static str,
        reason: &'static str,
        message: String,
    ) {
        let kind = containers(pod)
            .into_iter()
            .find(|(c, _)| c.name == name)
            .map_or(ContainerKind::App, |(_, kind)| kind);
        let events = self.context.pod_events.clone();
        let pod_ref = self.pod_ref.clone();
        let path = crate::pods::run::probes::field_path(name, kind);
        tokio::spawn(async move {
            events
                .on_container(&pod_ref, &path, type_, reason, &message)
                .await;
        });
    }

    /// The image volumes `container` mounts, by name, as set up for the
    /// pod.
    fn image_volumes(&self, container: &Container) -> Vec<(String, VolumeImage)> {
        let Some(volumes) = self.volumes.as_ref() else {
            return Vec::new();
        };
        let mut found: Vec<(String, VolumeImage)> = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            if let Some(source) = volumes.get(&mount.name).and_then(|v| v.image.clone())
                && !found.iter().any(|(name, _)| name == &mount.name)
            {
                found.push((mount.name.clone(), source));
            }
        }
        found
    }
}

/// The reason of the Event of a container that could not be made or
/// started (the kubelet's `FailedToCreateContainer`).
const FAILED: &str = "Failed";
