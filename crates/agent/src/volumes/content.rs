//! What the content volumes hold: their files, written atomically, from
//! the objects and tokens the node reads for its pods.

pub(super) mod atomic_writer;
pub(super) mod certificates_v1;
pub(super) mod objects;
pub(super) mod payload;
pub(super) mod pod_certificates;
pub(super) mod token;
pub(super) mod trust_bundles;
