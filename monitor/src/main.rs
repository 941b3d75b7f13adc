use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    monitor::cli::run(monitor::cli::Cli::parse())
}
