//! The drivers: registering, their instances and monitored connections,
//! their devices' health, and their cleanup when they stay away.
//!
//! | file | what |
//! |---|---|
//! | `plugin_handler` | drivers registering through `plugins_registry` |
//! | `state` | drivers and their instances |
//! | `connection` | one instance's monitored connection |
//! | `health` | device health from the health stream |
//! | `cleanup`, `cleanup_scheduler` | the hook, its schedule and retries |

pub(super) mod cleanup;
pub(super) mod cleanup_scheduler;
pub(super) mod connection;
pub(super) mod health;
pub(super) mod plugin_handler;
pub(super) mod state;
