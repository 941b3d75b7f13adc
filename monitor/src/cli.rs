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

/// Flag value parsers shared by the agent and the subcommands.
pub mod values {
    use std::time::Duration;

    use crate::engine::{duration::parse_go_duration, quantity::Quantity};

    /// A Go duration above zero (`100ms`, `1s`, `1m30s`).
    pub fn positive_duration(text: &str) -> Result<Duration, String> {
        match parse_go_duration(text) {
            Ok(d) if !d.is_zero() => Ok(d),
            Ok(_) => Err("must be longer than zero".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A Kubernetes quantity of bytes above zero (`256Ki`, `1Gi`, `500M`).
    pub fn positive_bytes(text: &str) -> Result<u64, String> {
        let quantity: Quantity = text.parse().map_err(|e| format!("{e}"))?;
        u64::try_from(quantity.ceil_units())
            .ok()
            .filter(|b| *b > 0)
            .ok_or_else(|| format!("{text} is not a positive number of bytes"))
    }

    /// Bytes per second: a quantity, optionally followed by `/s` (`100Mi`, `1Gi/s`).
    pub fn byte_rate(text: &str) -> Result<u64, String> {
        positive_bytes(text.strip_suffix("/s").unwrap_or(text))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn values_are_checked() {
            assert_eq!(positive_bytes("256Ki"), Ok(256 << 10));
            assert_eq!(positive_bytes("1Gi"), Ok(1 << 30));
            for bad in ["-1Mi", "0", "lots"] {
                assert!(positive_bytes(bad).is_err(), "{bad}");
            }
            assert_eq!(byte_rate("1Gi/s"), Ok(1 << 30));
            assert_eq!(byte_rate("100Mi"), Ok(100 << 20));
            assert_eq!(byte_rate("5000"), Ok(5000));
            assert_eq!(positive_duration("100ms"), Ok(Duration::from_millis(100)));
            assert!(positive_duration("0s").is_err());
            assert!(positive_duration("10").is_err(), "a unit is required");
        }
    }
}

/// `--output`: for people or for programs. Each command's flag help says what its JSON holds.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// Aligned text for people.
    Text,
    /// JSON for programs.
    Json,
}

/// Runs the parsed command line and turns failures into a message and an exit status.
pub fn run(cli: Cli) -> ExitCode {
    crate::logging::init(cli.log_format);
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
