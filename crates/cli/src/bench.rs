//! `nodeplugins bench`: measurements quoted in BENCHMARKS.md.

// A benchmark's report is its output.
#[allow(clippy::print_stdout)]
mod fleet;
mod fleet_plugin;
mod proc_stats;
mod registrar;
#[allow(clippy::print_stdout)]
mod soak;

pub(crate) use fleet::{FleetArgs, run_fleet};
pub(crate) use registrar::{RegistrarArgs, run_registrar};
pub(crate) use soak::{SoakArgs, run_soak};
