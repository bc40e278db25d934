//! The kubelet's HTTPS API on the node (`:10250`): what the API server
//! reaches for `kubectl logs`, `exec`, `attach` and `port-forward`, and
//! what monitoring reads, served as the kubelet serves it
//! (`pkg/kubelet/server`).
//!
//! Every request is authenticated (a client certificate chained to the
//! configured CA, a bearer token through a TokenReview, or anonymous when
//! enabled; otherwise 401) and authorized (a SubjectAccessReview on the
//! node's `nodes/<subresource>` with the kubelet's attribute mapping, or
//! always allowed; otherwise 403) before it reaches an endpoint.
//! Container logs are read from the runtime's CRI log files; exec, attach
//! and port-forward ask the runtime for a URL of its streaming server and
//! splice the upgraded connection there, as the kubelet proxies it. The
//! Node declares no `ExtendWebSocketsToKubelet`, so the API server speaks
//! SPDY here and translates WebSockets itself.
//!
//! | file | what |
//! |---|---|
//! | `config` | where and how it serves |
//! | `serving_cert` | the TLS certificate: given, or self-signed once |
//! | `tls` | the TLS configuration, client certificates requested |
//! | `authn` | who a request comes from |
//! | `authz` | the kubelet's attributes and the SubjectAccessReview |
//! | `server` | the listener, connections and the filter chain |
//! | `read_only` | the read-only port: plain HTTP, no filters, no debugging |
//! | `state` | what every request's handling reads |
//! | `routes` | the endpoints, and which paths the kubelet has at all |
//! | `container_logs` | `/containerLogs`: options and the container's file |
//! | `log_reader` | the CRI log format, tail, since, limit, follow |
//! | `streaming` | `/exec`, `/attach`, `/portForward`, `/run` |
//! | `upgrade_proxy` | splicing an upgraded connection to the runtime |
//! | `metrics` | `/metrics` and `/metrics/resource` |
//! | `reply` | answers and their bodies |

mod authn;
mod authz;
mod config;
mod container_logs;
mod log_reader;
mod metrics;
mod read_only;
mod reply;
mod routes;
mod server;
mod serving_cert;
mod state;
mod streaming;
mod tls;
mod upgrade_proxy;

pub use authz::{Attributes, request_attributes};
pub use config::{AuthorizationMode, KubeletServerConfig, ServingCertificate};
pub use server::{KubeletServer, KubeletServerError, ServerParts};
pub use serving_cert::{SELF_SIGNED_CERT_FILE, SELF_SIGNED_KEY_FILE};
