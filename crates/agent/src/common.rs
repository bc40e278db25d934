//! The machinery every subsystem uses, and nothing of any one of them.
//!
//! | file | what |
//! |---|---|
//! | `owner` | the mailbox of an owner task and its handles |
//! | `shards` | rows an owner publishes in shards, for readers |
//! | `token_bucket` | a rate limit |
//! | `served_socket` | a Unix socket the agent serves, bound and cleaned up |
//! | `root_lock` | one agent per root directory |
//! | `private_dir` | a directory only the agent reads |
//! | `tcp_accept` | the next connection on a TCP port, failures tried again (feature `kubelet-server`) |
//! | `unix_time` | wall-clock times as status and events show them |
//! | `go_quote` | text quoted as Go's `%q` quotes it, for messages copied from the kubelet (feature `kube`) |
//! | `pem` | PEM as Go's `encoding/pem` reads and writes it (feature `kube`) |
//! | `certificate_key` | private keys and the PKCS#10 requests signed by them, as the kubelet makes them (feature `kube`) |

#[cfg(feature = "kube")]
pub(crate) mod certificate_key;
#[cfg(feature = "kube")]
pub(crate) mod go_quote;
pub(crate) mod owner;
#[cfg(feature = "kube")]
pub(crate) mod pem;
pub(crate) mod private_dir;
pub(crate) mod root_lock;
pub(crate) mod served_socket;
pub(crate) mod shards;
#[cfg(feature = "kubelet-server")]
pub(crate) mod tcp_accept;
pub(crate) mod token_bucket;
pub(crate) mod unix_time;
