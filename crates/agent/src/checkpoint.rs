//! State that must survive a restart: the file format and its errors come
//! from [`nodeplugins_api::checkpoint`]; the persister here keeps a
//! checkpoint up to date from an owner task without waiting for the disk.

mod persister;

pub(crate) use nodeplugins_api::checkpoint::{CheckpointError, CheckpointFile, CheckpointProblem};
pub(crate) use persister::{Ends, Persister, WriteDone, Written, write_out};
