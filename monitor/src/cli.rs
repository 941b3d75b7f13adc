//! Command line: one subcommand per job, each implemented in [`crate::commands`].
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::commands;

/// Watches memory pressure through the kernel and evicts the right pod, the way the kubelet
/// would, but from kernel events instead of a 10-second poll.
#[derive(Parser, Debug)]
#[command(
    name = "monitor",
    version,
    about,
    long_about = None,
    after_help = "\
Without a subcommand, monitor runs the node agent (as root):
  monitor --dry-run --pods DIR        report what would be evicted, and why; signal nothing
  monitor --pods DIR                  evict: SIGTERM the pod's cgroup, SIGKILL after its grace
  monitor --kube --node-name NODE     pods and evictions through the Kubernetes API
Thresholds come from --config (a KubeletConfiguration file), else the kubelet's defaults.
Start with `monitor doctor` to see what this kernel offers."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Without a subcommand, `monitor` runs the node agent with these flags.
    #[command(flatten)]
    pub agent: crate::agent::AgentArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print live per-cgroup memory events from the kernel programs (needs root).
    Trace(commands::trace::TraceArgs),
    /// Print the kubelet's eviction order for pods and their stats (postmortem, no root).
    Rank(commands::rank::RankArgs),
    /// Show or verify the agent's checkpointed state.
    Checkpoint(commands::checkpoint::CheckpointArgs),
    /// Report what this kernel offers and which event source the agent will use.
    Doctor(commands::doctor::DoctorArgs),
    /// Watch a running agent live: signals, ranking, decisions (reads its /debug/ranking).
    Top(commands::top::TopArgs),
}

/// Runs the parsed command line and turns failures into a message and an exit status.
pub fn run(cli: Cli) -> ExitCode {
    init_logging();
    let result = match cli.command {
        Some(Command::Trace(args)) => commands::trace::run(args),
        Some(Command::Rank(args)) => commands::rank::run(args),
        Some(Command::Checkpoint(args)) => commands::checkpoint::run(args),
        Some(Command::Doctor(args)) => commands::doctor::run(args),
        Some(Command::Top(args)) => commands::top::run(args),
        None => crate::agent::run(cli.agent),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("monitor: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_target(false)
        .init();
}
