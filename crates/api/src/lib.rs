//! The kubelet's node plugin APIs, wire-exact, and the Unix-socket gRPC
//! transport that real Go peers can reach.
//!
//! # APIs
//!
//! Compiled at build time from our own `.proto` files (no system `protoc`),
//! with package, service, method and field names and numbers identical to
//! upstream:
//!
//! | module | proto package | services |
//! |---|---|---|
//! | [`pluginregistration::v1`] | `pluginregistration` | `Registration` (served by plugins) |
//! | [`deviceplugin::v1beta1`] | `v1beta1` | `Registration` (served by the agent), `DevicePlugin` |
//! | [`dra::v1`], [`dra::v1beta1`] | `k8s.io.kubelet.pkg.apis.dra.{v1,v1beta1}` | `DRAPlugin` |
//! | [`dra_health::v1alpha1`], [`dra_health::v1`] | `v1alpha1`, `v1` | `DRAResourceHealth` |
//! | [`csi::v1`] | `csi.v1` | `Identity`, `Node` (registration subset) |
//! | [`podresources::v1`], [`podresources::v1alpha1`] | `v1`, `v1alpha1` | `PodResourcesLister` (served by the agent) |
//! | [`cri::v1`] | `runtime.v1` | `RuntimeService`, `ImageService` (called by the agent, served by the container runtime) |
//!
//! [`conversion`] converts between the DRA versions (v1 is canonical);
//! [`dra_client`] picks a DRA driver's services as the kubelet does and
//! calls them in either version.
//!
//! # Names and versions the kubelet accepts
//!
//! [`names`] holds upstream's rules for extended resource names, DNS
//! subdomains and device plugin endpoints; [`csi_version`] picks the CSI
//! version a driver is used at. The agent refuses what they refuse, and the
//! conformance checks judge a plugin by them.
//!
//! # Calls
//!
//! [`call`] bounds one call to a plugin by a deadline the plugin sees too,
//! and says how it failed.
//!
//! # State on disk
//!
//! [`checkpoint`] writes state that must survive a restart atomically, with
//! a checksum and a backup copy, and verifies it on load; the agent and the
//! SDK's DRA driver server both keep their state this way.
//!
//! # Retries and deadlines
//!
//! [`backoff`] is the exponential backoff, with jitter, of every retry loop
//! of the agent and the SDK; [`timer::sleep_until`] the sleep until an
//! optional deadline of every task that keeps one.
//!
//! # Durations on command lines
//!
//! [`duration`] reads Go's duration syntax (`1m30s`, `300ms`), as the
//! Kubernetes programs our binaries stand in for read their flags.
//!
//! # Kubernetes quantities
//!
//! [`quantity`] reads `100m`, `1.5Gi` and `2e3` exactly, as the kubelet
//! reads them (the agent's resource requests, the SDK's capacities).
//!
//! # Plain HTTP
//!
//! [`text_server`] answers metrics and health probes over HTTP/1.
//!
//! # Transport
//!
//! [`transport`] binds, serves and dials Unix sockets. Its servers accept the
//! path-valued `:authority` that grpc-go sends when dialing a socket by its
//! path, which a stock tonic server rejects; its clients send `localhost`.
#![forbid(unsafe_code)]

pub mod backoff;
pub mod call;
pub mod call_layer;
pub mod checkpoint;
pub mod constants;
pub mod conversion;
pub mod csi_version;
pub mod dra_client;
pub mod duration;
pub mod names;
mod proto;
pub mod quantity;
pub mod retry;
pub mod text_server;
pub mod timer;
pub mod transport;

pub use proto::*;
