//! The span every call a plugin serves runs in: the same for the
//! registration, device plugin, DRA and CSI servers, naming the socket (or
//! driver) that serves it and the gRPC method, so that what a handler logs
//! says which call of which server it belongs to without fields of its own.

use std::fmt::Display;

use tonic::transport::Server;

/// A server builder whose every call runs in a `grpc_call` span with
/// `server` (the socket path, or the driver for a router served elsewhere)
/// and the call's `method` (its `/package.Service/Method` path).
pub(crate) fn server(server: impl Display) -> Server {
    let server = server.to_string();
    Server::builder().trace_fn(move |request| {
        tracing::info_span!(
            "grpc_call",
            server = %server,
            method = %request.uri().path()
        )
    })
}
