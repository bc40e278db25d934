//! How device plugins reach the manager and how it calls them.
//!
//! | file | what |
//! |---|---|
//! | `kubelet_socket` | the registration service on `kubelet.sock` |
//! | `plugin_handler` | device plugins registering through `plugins_registry` |
//! | `plugin_client` | every call to a device plugin |

pub(super) mod kubelet_socket;
pub(super) mod plugin_client;
pub(super) mod plugin_handler;
