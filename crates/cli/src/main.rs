//! `nodeplugins`: run the node agent and inspect it.

mod bench;
mod check;
mod commands;
mod config;
mod demo;
mod duration;
mod output;

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let cli = commands::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        // The agent's futures nest deeply; unoptimised builds need more than
        // the default 2 MiB when it runs on a worker (as in `demo`).
        .thread_stack_size(8 << 20)
        .enable_all()
        .build()?;
    runtime.block_on(commands::dispatch(cli))
}
