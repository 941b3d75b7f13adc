//! `monitor trace`.
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct TraceArgs {}

pub fn run(_args: TraceArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet")
}
