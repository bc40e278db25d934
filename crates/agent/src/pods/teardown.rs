//! Tearing a pod down: its containers stopped within the grace period and
//! its sandbox removed, then what it held given back (claims unprepared,
//! devices released) and a deleted pod deleted for good.
//!
//! | file | what |
//! |---|---|
//! | `release` | stopping what a pod runs, then giving back what it held |
//! | `terminate` | stopping a pod's containers and sandbox |
//! | `kill_container` | one container stopped: its Event, its `preStop` hook, its grace |
//! | `termination_order` | sidecars stopped after the containers they serve |

#[cfg(feature = "kube")]
pub(super) mod kill_container;
#[cfg(feature = "kube")]
pub(super) mod release;
#[cfg(feature = "kube")]
pub(super) mod terminate;
#[cfg(feature = "kube")]
mod termination_order;
