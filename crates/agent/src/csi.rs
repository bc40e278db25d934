//! The CSI plugin handler (the version rules are
//! `nodeplugins_api::csi_version`), the driver store, and the
//! NodeGetInfo call that learns the node's identity in the driver.

mod handler;
mod store;

pub use handler::CsiHandler;
pub(crate) use handler::NODE_GET_INFO_TIMEOUT;
pub use store::{CsiDriver, CsiDriverStore, CsiSnapshot};
