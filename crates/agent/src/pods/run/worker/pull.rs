//! A container's image, made present as the kubelet's image manager makes
//! it (`EnsureImageExists`), with its Events:
//!
//! - present, and the policy is not `Always`: Normal `Pulled`, "Container
//!   image "x" already present on machine and can be accessed by the pod";
//! - absent under `Never`: Warning `ErrImageNeverPull`, and the container
//!   waits with `ErrImageNeverPull`;
//! - in the pod's back-off for the image: Normal `BackOff`, "Back-off
//!   pulling image "x"", and the container waits with `ImagePullBackOff`
//!   and the last pull's error;
//! - else pulled: Normal `Pulling`, then Normal `Pulled` ("Successfully
//!   pulled image "x" in 1.2s (1.2s including waiting). Image size: N
//!   bytes.") or Warning `Failed` ("Failed to pull image "x": rpc error:
//!   ..."), the container waiting with `ErrImagePull` and the error, the
//!   image in back-off.
//!
//! Each failure is also the Warning `Failed` `"Error: <reason>"` the
//! kubelet's `startContainer` records.

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

use super::Worker;
use crate::runtime::{PullPolicy, RuntimeError, SandboxSpec};

/// Why a container waits for its image.
const ERR_IMAGE_PULL: &str = "ErrImagePull";
const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
const IMAGE_INSPECT_ERROR: &str = "ImageInspectError";

impl Worker {
    /// The reference of `image` for container `container` of `pod`, made
    /// present as `policy` says; a failure is the kubelet's (reason,
    /// message).
    pub(super) async fn pull(
        &mut self,
        pod: &Pod,
        container: &str,
        image: &str,
        policy: PullPolicy,
        sandbox: &SandboxSpec,
    ) -> Result<String, (String, String)> {
        let runtime = self.context.runtime.clone();
        let quoted = crate::common::go_quote::go_quote(image);
        if policy != PullPolicy::Always {
            let present = tokio::select! {
                () = self.stop.cancelled() => return Err(stopping()),
                present = runtime.image_present(image) => present,
            };
            match present {
                Ok(Some(reference)) => {
                    self.container_event(
                        pod,
                        container,
                        "Normal",
                        "Pulled",
                        format!(
                            "Container image {quoted} already present on machine and can be accessed by the pod"
                        ),
                    );
                    return Ok(reference);
                }
                Ok(None) if policy == PullPolicy::Never => {
                    let message = format!(
                        "Container image {quoted} is not present with pull policy of Never"
                    );
                    self.container_event(
                        pod,
                        container,
                        "Warning",
                        ERR_IMAGE_NEVER_PULL,
                        message.clone(),
                    );
                    return Err(self.image_failed(pod, container, ERR_IMAGE_NEVER_PULL, message));
                }
                Ok(None) => {}
                Err(e) => {
                    let message = format!("Failed to inspect image \"\": {}", e.go_text());
                    self.container_event(
                        pod,
                        container,
                        "Warning",
                        "InspectFailed",
                        message.clone(),
                    );
                    return Err(self.image_failed(pod, container, IMAGE_INSPECT_ERROR, message));
                }
            }
        }
        if let Some(previous) = self.image_pulls.in_backoff(image, Instant::now()) {
            let message = format!("Back-off pulling image {quoted}: {previous}");
            self.container_event(
                pod,
                container,
                "Normal",
                "BackOff",
                format!("Back-off pulling image {quoted}"),
            );
            return Err(self.image_failed(pod, container, IMAGE_PULL_BACK_OFF, message));
        }
        self.container_event(
            pod,
            container,
            "Normal",
            "Pulling",
            format!("Pulling image {quoted}"),
        );
        let started = Instant::now();
        let pulled = tokio::select! {
            () = self.stop.cancelled() => return Err(stopping()),
            pulled = runtime.pull_image(image, sandbox) => pulled,
        };
        match pulled {
            Ok(pulled) => {
                let took = truncated(started.elapsed());
                self.container_event(
                    pod,
                    container,
                    "Normal",
                    "Pulled",
                    format!(
                        "Successfully pulled image {quoted} in {took:?} ({took:?} including waiting). Image size: {} bytes.",
                        pulled.size
                    ),
                );
                self.image_pulls.pulled(Instant::now());
                Ok(pulled.reference)
            }
            Err(e) => {
                let text = pull_error(&e);
                self.container_event(
                    pod,
                    container,
                    "Warning",
                    "Failed",
                    format!("Failed to pull image {quoted}: {text}"),
                );
                self.image_pulls
                    .failed(image, Instant::now(), format!("{ERR_IMAGE_PULL}: {text}"));
                Err(self.image_failed(pod, container, ERR_IMAGE_PULL, text))
            }
        }
    }

    /// The image failure `reason` with `message`, recorded as the
    /// kubelet's `startContainer` records it: `"Error: <reason>"`.
    fn image_failed(
        &self,
        pod: &Pod,
        container: &str,
        reason: &'static str,
        message: String,
    ) -> (String, String) {
        self.container_event(
            pod,
            container,
            "Warning",
            "Failed",
            format!("Error: {reason}"),
        );
        (reason.to_string(), message)
    }
}

/// A failed pull as the kubelet's CRI client tells it: an `Unknown` code
/// is dropped (the runtime's own message alone), any other kept.
fn pull_error(e: &RuntimeError) -> String {
    match e {
        RuntimeError::Call {
            code: tonic::Code::Unknown,
            message,
            ..
        } => message.clone(),
        other => other.go_text(),
    }
}

fn stopping() -> (String, String) {
    ("Stopping".into(), String::new())
}

/// `took` to the millisecond, as the kubelet tells it.
fn truncated(took: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis(u64::try_from(took.as_millis()).unwrap_or(u64::MAX))
}
