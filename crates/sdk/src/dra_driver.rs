//! Serving a DRA driver: `DRAPlugin` v1 and v1beta1 (and optionally device
//! health) on the service socket, registered through `plugins_registry`.
//!
//! The author implements [`DraDriver`] (prepare and unprepare) and, for
//! health, reports through a [`HealthReporter`]. [`DraDriverServer::builder`]
//! serves the service socket first and only then the registration socket,
//! so the agent never sees a driver that cannot answer yet. On shutdown it
//! goes the other way: the registration socket goes first (the agent
//! deregisters this instance), then the service finishes the calls it is
//! running and removes its socket.
//!
//! What each claim got is recorded (in a checkpoint in the driver's state
//! directory, the plugin directory by default): a claim prepared again gets
//! the recorded result without a call to the driver, unprepare hands the
//! driver what the claim got from its UID alone, and all of it survives a
//! restart. Devices with container edits get a CDI spec file per claim in
//! the CDI directory (`/var/run/cdi`), written again at start when missing.
//!
//! With the `kube` feature and an API client, the server also reads each
//! claim it prepares from the API server, before the call is serialized (a
//! replaced claim or one without an allocation is refused with its own
//! error; the driver gets the claim as read, with a typed view of the
//! results and opaque configurations for this driver), and publishes the
//! driver's `Resources` as ResourceSlices.
//!
//! A claim is recorded as being prepared before the driver is called and as
//! prepared once the driver answered and its CDI spec is written, so that a
//! crash at any point leaves a record from which unprepare releases what
//! the driver prepared (see [`PreparedState`]); a claim whose record cannot
//! be written fails.
//!
//! For seamless upgrades give each instance an id (the pod UID): both
//! sockets get per-instance names, so the old and the new instance run side
//! by side and the agent calls the newest. A claim may be prepared by one and
//! unprepared by another: the record is shared through the state directory,
//! and with `serialize` on (the default) calls are serialized across
//! instances by an exclusive lock on `<plugin dir>/serialize.lock`.

mod api_versions;
mod batch;
mod boot;
mod builder;
mod cdi;
mod claim;
mod claim_uid;
#[cfg(feature = "kube")]
mod claims_api;
mod device_attribute;
mod device_metadata;
mod driver;
mod error;
mod grpc;
mod health;
#[cfg(feature = "kube")]
mod resource_api;
mod serializer;
mod server;
mod service;
#[cfg(feature = "kube")]
mod slices;
mod stop_point;
mod store;
mod wire;

pub use crate::cdi::{CDI_VERSION, DEFAULT_CDI_DIR};
pub use crate::cdi::{CdiDeviceNode, CdiMount, ContainerEdits};
pub use api_versions::ApiVersions;
pub use builder::DraDriverBuilder;
pub use claim::{
    AllocatedDevice, Allocation, Claim, ClaimRef, ConfigSource, DeviceConfig, DeviceMetadata,
    DeviceToleration, PreparedClaim, PreparedDevice, PreparedState,
};
pub use claim_uid::ClaimUid;
pub use device_attribute::{DeviceAttribute, NetworkDeviceData};
pub use device_metadata::{DEVICE_METADATA_API_VERSION, DEVICE_METADATA_CONTAINER_DIR};
pub use driver::{ClaimError, DraDriver, PrepareResults, UnprepareResults};
pub use error::{DraDriverError, DraDriverErrorHandler};
pub use health::{DeviceHealth, HEALTH_RESEND_INTERVAL, HEALTH_TIMEOUT_SECONDS, HealthReporter};
pub use serializer::SERIALIZE_LOCK_FILE;
pub use server::DraDriverServer;
#[cfg(feature = "kube")]
pub use slices::{
    InvalidPool, MAX_COUNTER_SETS_PER_SLICE, MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_WITH_ADVANCED_FEATURES, NodeSelection, Pool, PublishError,
    PublishErrorHandler, PublishStats, Resources, Slice, split_devices,
};
pub use stop_point::{STOP_AT_ENV, Step};
pub use store::{STORE_BACKUP_FILE, STORE_FILE, STORE_LOCK_FILE};
