//! The connection to the API server: credentials taken from disk and
//! rotated, one deadline on every request, and who the server takes the
//! agent for.
//!
//! | file | what |
//! |---|---|
//! | `credentials` | the client, made again when its credentials change |
//! | `deadline` | one deadline for every request the client sends |
//! | `identity` | who the API server takes the agent for, checked against its node |

pub(super) mod credentials;
pub(super) mod deadline;
pub(super) mod identity;
