//! `nodeplugins`: run the node agent and inspect it.

mod bench;
mod check;
mod commands;
mod config;
mod duration;
mod logging;
mod output;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = commands::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(commands::dispatch(cli))
}
