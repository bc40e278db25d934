//! `nodeplugins`: run the node agent and inspect it.

fn main() -> std::process::ExitCode {
    nodeplugins_cli::run()
}
