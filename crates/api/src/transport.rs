//! The Unix-socket gRPC transport every nodeplugins server and client uses.
//!
//! - [`BoundSocket::bind`] listens on a path with socket hygiene (length
//!   check, stale-socket removal, permissions, removal on drop).
//! - [`serve`] runs a tonic router on it; each connection goes through
//!   [`ServerConnection`], which accepts the path-valued `:authority` that
//!   grpc-go clients send when they dial a socket by its bare path (see
//!   `authority`; the rewriter and its HPACK codec are public only with the
//!   `fuzzing` feature, for the fuzz targets and the benchmark).
//! - [`dial`] and [`dial_lazy`] connect to a socket sending `localhost` as
//!   the authority, as the kubelet does.
//! - [`UnaryConnection`] makes single unary calls on a connection of its
//!   own, each request in one write (registration's GetInfo and
//!   NotifyRegistrationStatus); [`connect_when_listening`] dials a socket
//!   that may not be listening yet.
//! - [`frame`] is the one HTTP/2 frame layer (preface, frame types and
//!   flags, the frame header) for the rewriter and any hand-written HTTP/2
//!   peer, such as the agent's light connection to a DRA plugin.

#[cfg(feature = "fuzzing")]
pub mod authority;
#[cfg(not(feature = "fuzzing"))]
mod authority;
mod connect;
mod connection;
mod dial;
mod error;
pub mod frame;
#[cfg(feature = "fuzzing")]
pub mod hpack;
#[cfg(not(feature = "fuzzing"))]
mod hpack;
mod listening;
mod serve;
mod socket;
mod unary;

pub use connect::connect_unix;
pub use connection::ServerConnection;
pub use dial::{dial, dial_lazy};
pub use error::{TransportError, root_cause};
pub use listening::{FIRST_REFUSED_PAUSE, MAX_REFUSED_PAUSE, connect_when_listening, is_refused};
pub use serve::{SHUTDOWN_GRACE, serve};
pub use socket::{BoundSocket, MAX_SOCKET_PATH_LEN, SocketFile, check_socket_path};
pub use unary::{MAX_RESPONSE, UnaryConnection};
