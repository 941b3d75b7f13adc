//! Command line: one subcommand per job, each implemented in `commands`.
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
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Without a subcommand, `monitor` runs the node agent with these flags.
    #[command(flatten)]
    pub agent: crate::agent::AgentArgs,
    /// How log records are written on stderr (any command). `text`: one line each,
    /// `[time LEVEL] message key=value`, for people. `json`: one object a line for a log
    /// collector, each record with the spans it belongs to: every record of one eviction
    /// decision carries the same `span` (pod namespace/name/uid, signal, observed value,
    /// threshold, the kernel event that triggered it), and the span's `close` record adds the
    /// outcome (killed, evicted, refused, timed_out, failed, dry_run). Which records appear is
    /// set by RUST_LOG as usual (`info` when unset; e.g. `RUST_LOG=monitor=debug,kube=warn`).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        value_name = "FORMAT"
    )]
    pub log_format: crate::logging::LogFormat,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Print live per-cgroup memory events from the kernel programs (needs root).
    Trace(commands::trace::TraceArgs),
    /// Print the kubelet's eviction order for pods and their stats (postmortem, no root).
    Rank(commands::rank::RankArgs),
    /// Show or verify the agent's checkpointed state.
    Checkpoint(commands::checkpoint::CheckpointArgs),
    /// Print the thresholds and settings in force after the kubelet's defaulting, and where
    /// each came from.
    Config(commands::config::ConfigArgs),
    /// Report what this kernel offers and which event source the agent will use.
    Doctor(commands::doctor::DoctorArgs),
    /// Watch a running agent live: signals, ranking, decisions (reads its /debug/ranking).
    Top(commands::top::TopArgs),
    /// Ask a running agent's probe socket whether it is alive or ready (exec probes).
    Probe(commands::probe::ProbeArgs),
}

/// Parses the process's command line and runs it: the whole `monitor` binary.
pub fn main() -> ExitCode {
    run(Cli::parse())
}

/// Runs the parsed command line and turns failures into a message and an exit status.
fn run(cli: Cli) -> ExitCode {
    crate::logging::init(cli.log_format);
    let result = match cli.command {
        Some(Command::Trace(args)) => commands::trace::run(args),
        Some(Command::Rank(args)) => commands::rank::run(args),
        Some(Command::Checkpoint(args)) => commands::checkpoint::run(args),
        Some(Command::Config(args)) => commands::config::run(&args),
        Some(Command::Doctor(args)) => commands::doctor::run(args),
        Some(Command::Top(args)) => commands::top::run(args),
        Some(Command::Probe(args)) => Ok(commands::probe::run(&args)),
        None => crate::agent::run(cli.agent),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            crate::logging::stderr_line(format_args!("monitor: {err:#}"));
            ExitCode::FAILURE
        }
    }
}
