//! `nodeplugins bench`: measurements quoted in BENCHMARKS.md.

// A benchmark's report is its output.
#[allow(clippy::print_stdout)]
mod fleet;
mod fleet_plugin;
#[allow(clippy::print_stdout)]
mod probe;
mod proc_stats;
#[allow(clippy::print_stdout)]
mod registrar;
#[allow(clippy::print_stdout)]
mod soak;

pub(crate) use fleet::{FleetArgs, run_fleet};
pub(crate) use probe::{ProbeArgs, run_probe};
pub(crate) use registrar::{RegistrarArgs, run_registrar};
pub(crate) use soak::{SoakArgs, run_soak};
