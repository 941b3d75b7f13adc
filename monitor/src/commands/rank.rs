//! `monitor rank`.
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct RankArgs {}

pub fn run(_args: RankArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`monitor rank` is not implemented yet")
}
