//! Dynamic Resource Allocation: DRA drivers register through
//! `plugins_registry` (type `DRAPlugin`, supported versions = the gRPC
//! services they serve: `v1.DRAPlugin`, `v1beta1.DRAPlugin`, and optionally
//! `v1.DRAResourceHealth` or `v1alpha1.DRAResourceHealth`).
//!
//! A driver may run several instances side by side (seamless upgrades), one
//! per service endpoint; calls go to the newest connected instance, else the
//! newest. Each instance keeps one monitored connection: a drop is noticed
//! the moment it happens and reconnected at once, and it does not deregister
//! the instance (only removing its registration socket does). While no
//! instance of a driver is connected a cleanup is scheduled after a grace
//! period (30 s) and cancelled if one connects in time; it calls the
//! embedder's [`DriverCleanup`] hook.
//!
//! NodePrepareResources and NodeUnprepareResources go through either API
//! version with a 45 s deadline and report per-claim results; the health
//! stream, when offered, feeds device health to status.
//!
//! | file | what |
//! |---|---|
//! | `config` | settings and the kubelet's timeouts |
//! | `manager` | the task that owns the drivers, and starting it |
//! | `command` | what handles and the task exchange and share |
//! | `handle` | what callers hold |
//! | `claim_calls` | a prepare's and an unprepare's steps in the caller's task |
//! | `claim_book` | the prepared claims every caller changes under one lock, published and on disk |
//! | `records` | the claims prepared on this node, and every decision about them |
//! | `checkpoint` | the records on disk |
//! | `state` | drivers and their instances |
//! | `connection` | one instance's monitored connection |
//! | `cleanup`, `cleanup_scheduler` | the hook, its schedule and retries |
//! | `calls` | NodePrepareResources and NodeUnprepareResources as per-claim results (the service versions: `nodeplugins_api::dra_client`) |
//! | `health` | device health from the health stream |
//! | `plugin_handler` | drivers registering through `plugins_registry` |
//! | `pod` | a pod's claims prepared and unprepared together |
//! | `claim`, `snapshot`, `status`, `metrics`, `error` | what callers and operators see (events: `crate::event`) |

mod claim;
mod command;
mod config;
mod drivers;
mod error;
mod handle;
mod manager;
mod metrics;
mod prepare;
mod snapshot;
mod status;
#[cfg(test)]
pub(crate) mod test_support;

pub use claim::{
    ClaimPod, ClaimRef, ClaimRefParseError, PreparedClaim, PreparedDevice, UnpreparedClaim,
};
#[cfg(feature = "kube")]
pub(crate) use command::Routes;
pub use config::DraManagerConfig;
pub use drivers::cleanup::{CleanupError, DriverCleanup, LoggingCleanup};
pub use drivers::health::DeviceHealthStatus;
pub use drivers::plugin_handler::DraPluginHandler;
pub use error::{DraError, RecordError};
pub use handle::{DraHandle, DraManagerStopped};
pub use manager::DraManager;
pub use metrics::DraMetrics;
pub use nodeplugins_api::dra_client::{DraService, HealthService, ServiceError, choose_service};
pub use prepare::checkpoint::{BACKUP_FILE, CHECKPOINT_FILE, DraCheckpoint};
pub use prepare::pod::{PodClaim, PodClaimResult, PodClaimUnprepared};
#[cfg(feature = "kube")]
pub(crate) use prepare::records::PreparedClaims;
pub use prepare::records::RecordedClaim;
pub use snapshot::DraSnapshot;
pub use status::{DraDriverStatus, DraInstanceStatus, PendingCleanup};
