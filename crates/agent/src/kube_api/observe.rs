//! What the API server has, kept current from watches.
//!
//! | file | what |
//! |---|---|
//! | `observed` | the agent's own Node and CSINode, watched by name |
//! | `reflected` | objects of one kind kept current in a kube-runtime store |

pub(super) mod observed;
pub(super) mod reflected;
