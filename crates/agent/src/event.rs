//! What the agent tells operators happened: one event type for every
//! subsystem. Each subsystem's handle hands out a `broadcast` of
//! [`AgentEvent`]s; the admin socket merges them into one history and one
//! live stream.
//!
//! On the wire an event is one flat JSON object: the `source` names the
//! subsystem and decides which subject fields follow, `kind` says what
//! happened, `at_unix_ms` when. For example
//! `{"kind":"registered","source":"registry","socket_path":"…","plugin":{…},"error":null,"retry_in_ms":null,"at_unix_us":…,"at_unix_ms":…}`
//! or `{"kind":"cleanup_scheduled","source":"dra","driver":"…","endpoint":null,"detail":"…","at_unix_ms":…}`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::common::unix_time::unix_ms;
use crate::plugin_description::PluginDescription;

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentEvent {
    /// What happened.
    pub kind: EventKind,
    /// Which subsystem said it, about what.
    #[serde(flatten)]
    pub subject: EventSubject,
    /// When (Unix milliseconds).
    pub at_unix_ms: u64,
}

/// What happened. Each subsystem uses its own kinds, named in the
/// variants' docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Plugin manager: registered with its handler.
    Registered,
    /// Plugin manager: removed from its handler.
    Deregistered,
    /// Plugin manager: a registration attempt failed.
    Failed,
    /// DRA: an instance was registered.
    InstanceAdded,
    /// DRA: an instance was deregistered.
    InstanceRemoved,
    /// DRA and devices: an instance's connection came up (a device plugin
    /// connected through kubelet.sock or the registry).
    Connected,
    /// DRA and devices: an instance's connection went down.
    Disconnected,
    /// DRA: no instance is connected; cleanup will run at the deadline.
    CleanupScheduled,
    /// DRA: an instance connected in time; the cleanup will not run.
    CleanupCancelled,
    /// DRA: the cleanup ran.
    CleanedUp,
    /// DRA: the cleanup failed and will be retried.
    CleanupFailed,
    /// Devices: the resource's device list or health changed.
    DevicesChanged,
    /// Devices: devices were allocated to a container.
    Allocated,
    /// Devices: an allocation was refused or failed.
    AllocationFailed,
    /// Devices: a pod's devices were released.
    Released,
    /// Devices: the resource was forgotten after its grace period.
    Expired,
    /// API: a write failed (said once per change of error; retried with
    /// backoff).
    WriteFailed,
    /// API: a write succeeded after failures; the API has the latest state.
    CaughtUp,
    /// Pods: every container of a pod has its devices and claims.
    Admitted,
    /// Pods: a pod waits for its claims (not created, allocated or reserved
    /// yet).
    Waiting,
    /// Pods: a pod's admission failed; tried again with backoff.
    AdmissionFailed,
    /// Pods: what a pod held (devices, claims) was given back.
    PodReleased,
    /// Pods: giving back what a pod held failed; tried again with backoff.
    ReleaseFailed,
}

/// Which subsystem an event comes from, and what it is about.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "source", rename_all = "lowercase")]
pub enum EventSubject {
    /// The plugin manager (registrations); `"registry"` on the wire, as the
    /// first releases named it.
    #[serde(rename = "registry")]
    PluginManager {
        /// The registration socket.
        socket_path: PathBuf,
        /// The plugin, when known.
        plugin: Option<PluginDescription>,
        /// Why, for failures.
        error: Option<String>,
        /// Time until the next attempt, for failures.
        retry_in_ms: Option<u64>,
        /// When, in Unix microseconds (for latency measurements).
        at_unix_us: u64,
    },
    /// The DRA manager.
    Dra {
        /// The driver.
        driver: String,
        /// The instance's endpoint, for instance events.
        endpoint: Option<String>,
        /// Details: an error, or the cleanup deadline.
        detail: Option<String>,
    },
    /// The Kubernetes API publisher.
    Kube {
        /// Which write: `node_status`, `csi_node` or `resource_slices`.
        write: String,
        /// The error, for failures.
        detail: Option<String>,
    },
    /// The device manager.
    Device {
        /// The extended resource name (empty for a release, which spans
        /// resources).
        resource: String,
        /// The plugin's socket, for instance events.
        endpoint: Option<String>,
        /// Details: healthy/total devices, pod and container, or an error.
        detail: Option<String>,
    },
    /// The pods owner.
    Pods {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// The pod's UID.
        uid: String,
        /// Details: an error, or what the pod waits for.
        detail: Option<String>,
    },
}

impl AgentEvent {
    /// A plugin manager event happening now.
    pub(crate) fn plugin(
        kind: EventKind,
        socket_path: &Path,
        plugin: Option<PluginDescription>,
        error: Option<String>,
        retry_in_ms: Option<u64>,
    ) -> Self {
        let at_unix_us = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Self {
            kind,
            subject: EventSubject::PluginManager {
                socket_path: socket_path.to_owned(),
                plugin,
                error,
                retry_in_ms,
                at_unix_us,
            },
            at_unix_ms: at_unix_us / 1000,
        }
    }

    /// A DRA event happening now.
    pub(crate) fn dra(
        kind: EventKind,
        driver: &str,
        endpoint: Option<&str>,
        detail: Option<String>,
    ) -> Self {
        Self::now(
            kind,
            EventSubject::Dra {
                driver: driver.into(),
                endpoint: endpoint.map(Into::into),
                detail,
            },
        )
    }

    /// A device manager event happening now.
    pub(crate) fn device(
        kind: EventKind,
        resource: &str,
        endpoint: Option<&Path>,
        detail: Option<String>,
    ) -> Self {
        Self::now(
            kind,
            EventSubject::Device {
                resource: resource.into(),
                endpoint: endpoint.map(|p| p.display().to_string()),
                detail,
            },
        )
    }

    /// A pods owner event happening now.
    #[cfg(feature = "kube")]
    pub(crate) fn pod(
        kind: EventKind,
        namespace: &str,
        name: &str,
        uid: &str,
        detail: Option<String>,
    ) -> Self {
        Self::now(
            kind,
            EventSubject::Pods {
                namespace: namespace.into(),
                name: name.into(),
                uid: uid.into(),
                detail,
            },
        )
    }

    /// An event happening now.
    pub(crate) fn now(kind: EventKind, subject: EventSubject) -> Self {
        Self {
            kind,
            subject,
            at_unix_ms: unix_ms(SystemTime::now()),
        }
    }

    /// The subsystem's name as the wire says it: `registry`, `dra`, `kube`,
    /// `device` or `pods`.
    pub fn source(&self) -> &'static str {
        match self.subject {
            EventSubject::PluginManager { .. } => "registry",
            EventSubject::Dra { .. } => "dra",
            EventSubject::Kube { .. } => "kube",
            EventSubject::Device { .. } => "device",
            EventSubject::Pods { .. } => "pods",
        }
    }

    /// The DRA driver this event is about, for DRA events.
    pub fn driver(&self) -> Option<&str> {
        match &self.subject {
            EventSubject::Dra { driver, .. } => Some(driver),
            _ => None,
        }
    }

    /// The instance's endpoint, for DRA and device events that have one.
    pub fn endpoint(&self) -> Option<&str> {
        match &self.subject {
            EventSubject::Dra { endpoint, .. } | EventSubject::Device { endpoint, .. } => {
                endpoint.as_deref()
            }
            _ => None,
        }
    }

    /// The details of a DRA, device, pods or API event, or the error of a
    /// plugin manager event.
    pub fn detail(&self) -> Option<&str> {
        match &self.subject {
            EventSubject::PluginManager { error, .. } => error.as_deref(),
            EventSubject::Dra { detail, .. }
            | EventSubject::Device { detail, .. }
            | EventSubject::Pods { detail, .. } => detail.as_deref(),
            EventSubject::Kube { detail, .. } => detail.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire shape of every source is the one the separate event types
    /// had: a flat object tagged by `source`.
    #[test]
    fn events_are_flat_objects_tagged_by_source() {
        let event = AgentEvent {
            kind: EventKind::Registered,
            subject: EventSubject::PluginManager {
                socket_path: "/r/a.sock".into(),
                plugin: None,
                error: None,
                retry_in_ms: None,
                at_unix_us: 5_000,
            },
            at_unix_ms: 5,
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "source": "registry", "kind": "registered", "socket_path": "/r/a.sock",
                "plugin": null, "error": null, "retry_in_ms": null,
                "at_unix_us": 5000, "at_unix_ms": 5,
            })
        );
        let back: AgentEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);

        let event = AgentEvent {
            kind: EventKind::CleanupScheduled,
            subject: EventSubject::Dra {
                driver: "gpu.example.com".into(),
                endpoint: None,
                detail: Some("in 30s".into()),
            },
            at_unix_ms: 7,
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "source": "dra", "kind": "cleanup_scheduled", "driver": "gpu.example.com",
                "endpoint": null, "detail": "in 30s", "at_unix_ms": 7,
            })
        );
        assert_eq!(serde_json::from_value::<AgentEvent>(json).unwrap(), event);
        assert_eq!(event.driver(), Some("gpu.example.com"));
        assert_eq!(event.detail(), Some("in 30s"));
        assert_eq!(event.source(), "dra");
    }

    /// Device events keep `resource`; their kinds are snake case.
    #[test]
    fn device_events_keep_their_fields() {
        let event = AgentEvent::device(
            EventKind::AllocationFailed,
            "example.com/gpu",
            Some(Path::new("/p/gpu.sock")),
            Some("no devices".into()),
        );
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["source"], "device");
        assert_eq!(json["kind"], "allocation_failed");
        assert_eq!(json["resource"], "example.com/gpu");
        assert_eq!(json["endpoint"], "/p/gpu.sock");
        assert_eq!(json["detail"], "no devices");
        assert_eq!(serde_json::from_value::<AgentEvent>(json).unwrap(), event);
        assert_eq!(event.driver(), None);
    }
}
