//! Preparing and unpreparing claims: the steps in the caller's task, the
//! claim book they change under one lock, the records and their checkpoint,
//! and the driver calls.
//!
//! | file | what |
//! |---|---|
//! | `claim_calls` | a prepare's and an unprepare's steps in the caller's task |
//! | `claim_book` | the prepared claims every caller changes under one lock, published and on disk |
//! | `records` | the claims prepared on this node, and every decision about them |
//! | `checkpoint` | the records on disk |
//! | `calls` | NodePrepareResources and NodeUnprepareResources as per-claim results (the service versions: `nodeplugins_api::dra_client`) |
//! | `pod` | a pod's claims prepared and unprepared together |

pub(super) mod calls;
pub(super) mod checkpoint;
pub(super) mod claim_book;
pub(super) mod claim_calls;
pub(super) mod pod;
pub(super) mod records;
