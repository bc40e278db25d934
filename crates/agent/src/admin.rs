//! The operator socket, `<root>/nodeplugins/admin.sock`: mode 0600 in a 0700
//! directory, and only the agent's own user (or root) is answered.
//!
//! The protocol is one JSON request line per connection, such as
//! `{"request":"status"}`, answered by one JSON line ([`AgentStatus`]), or
//! `{"request":"events","history":true,"follow":true}`, answered by one
//! [`AdminEvent`] JSON line per event: the recent ones first (with
//! `history`), then new ones until the client hangs up (with `follow`, the
//! default). Errors come back as `{"error":"..."}`.

mod client;
mod event_log;
mod metrics;
mod pod_dra;
mod protocol;
mod server;
mod status_sources;

pub use client::{
    AdminClientError, EventStream, allocate, dra_claims, dra_prepare, dra_prepare_pod,
    dra_unprepare, dra_unprepare_pod, events, events_with, release, status,
};
pub use event_log::{EVENT_HISTORY, EventLog};
pub use metrics::AdminMetrics;
pub use protocol::{
    ADMIN_DIR, ADMIN_SOCKET, AdminErrorReply, AdminEvent, AdminRequest, AgentStatus, AllocateReply,
    DraClaimsReply, DraPreparePodReply, DraPrepareReply, DraUnpreparePodReply, DraUnprepareReply,
    FollowingMarker, ReleaseReply, socket_path,
};
pub use server::serve;
pub use status_sources::StatusSources;
