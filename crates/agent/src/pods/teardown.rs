//! Tearing a pod down: its containers stopped within the grace period and
//! its sandbox removed, then what it held given back (claims unprepared,
//! devices released) and a deleted pod deleted for good.
//!
//! | file | what |
//! |---|---|
//! | `release` | stopping what a pod runs, then giving back what it held |
//! | `terminate` | stopping a pod's containers and sandbox |

#[cfg(feature = "kube")]
pub(super) mod release;
#[cfg(feature = "kube")]
pub(super) mod terminate;
