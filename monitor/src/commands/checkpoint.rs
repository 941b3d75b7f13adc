//! `monitor checkpoint`.
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct CheckpointArgs {}

pub fn run(_args: CheckpointArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`monitor checkpoint` is not implemented yet")
}
