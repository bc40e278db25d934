//! The operator socket, `<root>/nodeplugins/admin.sock`: mode 0600 in a 0700
//! directory, and only the agent's own user (or root) is answered.
//!
//! The protocol is one JSON request line per connection, such as
//! `{"request":"status"}`, answered by one JSON line ([`AgentStatus`]), or
//! `{"request":"events","history":true,"follow":true}`, answered by one
//! [`AgentEvent`](crate::event::AgentEvent) JSON line per event: the recent ones first (with
//! `history`), then new ones until the client hangs up (with `follow`, the
//! default). Errors come back as `{"error":"..."}`.

mod client;
mod event_log;
mod metrics;
mod parts;
mod protocol;
mod requests;
mod server;

pub use crate::common::served_socket::SocketStatus;
pub use client::{
    AdminClientError, EventStream, allocate, dra_claims, dra_prepare, dra_prepare_pod,
    dra_unprepare, dra_unprepare_pod, events, events_with, pods, release, status,
};
pub(crate) use metrics::AdminMetrics;
pub(crate) use parts::AdminParts;
pub(crate) use protocol::ADMIN_DIR;
pub use protocol::{
    AgentStatus, AllocateReply, DraClaimsReply, DraPreparePodReply, DraPrepareReply,
    DraUnpreparePodReply, DraUnprepareReply, PodsReply, ReleaseReply,
};
pub(crate) use server::serve;
