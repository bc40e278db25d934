//! What every latest-state-wins write shares: when it is due and how it is
//! retried, how often drift is repaired, and what operators see of it.
//!
//! | file | what |
//! |---|---|
//! | `write_state` | one kind of write: due, last given, retry schedule |
//! | `repair_limit` | how often drift on one object is repaired |
//! | `report` | each kind's standing gathered into the publisher's status |

pub(super) mod repair_limit;
pub(super) mod report;
pub(super) mod write_state;
