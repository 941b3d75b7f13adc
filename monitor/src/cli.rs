//! Command line: one subcommand per job, each implemented in `commands`.
use std::{ffi::OsString, process::ExitCode};

use clap::{
    ArgMatches, CommandFactory as _, FromArgMatches as _, Parser, Subcommand, error::ErrorKind,
    parser::ValueSource,
};

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
Without a subcommand, monitor runs the node agent (as root). Observe first, then act:
  monitor doctor --pods DIR                   can the agent run here, and how; what is missing
  monitor config --config FILE                the thresholds in force, and where each came from
  monitor --dry-run --pods DIR --config FILE  report what would be evicted, and why; touch nothing
  monitor top                                 watch the running agent: signals, ranking, decisions
  monitor --pods DIR --config FILE            evict: SIGTERM the pod's cgroup, SIGKILL after its grace
  monitor --kube --node-name NODE             pods and evictions through the Kubernetes API
DIR holds the node's pod manifests, one Pod or a PodList per file, as `kubectl get pods -o yaml`
(or -o json) writes them. Thresholds come from --config (a KubeletConfiguration file), else the
kubelet's defaults. Each subcommand has its own --help and takes its flags after its name."
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
        value_name = "FORMAT",
        help_heading = "Logging"
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
    /// Report what this kernel offers, which event source the agent will use, and whether it
    /// can run here as configured (exit 1 when not).
    Doctor(commands::doctor::DoctorArgs),
    /// Watch a running agent live: signals, ranking, decisions (reads its /debug/ranking).
    Top(commands::top::TopArgs),
    /// Ask a running agent's probe socket whether it is alive or ready (exec probes).
    Probe(commands::probe::ProbeArgs),
    /// Print the shadow scorecard: a dry run's decisions against the kubelet's evictions and
    /// the kernel's OOM kills (from a running agent, or for the fleet from the cluster's Events).
    Shadow(commands::shadow::ShadowArgs),
}

/// Parses the process's command line and runs it: the whole `monitor` binary.
pub fn main() -> ExitCode {
    match parse_from(std::env::args_os()) {
        Ok(cli) => run(cli),
        Err(error) => error.exit(),
    }
}

/// The command line as `monitor --help` shows it: clap's own -h and -V under Advanced, so
/// every flag is under a task (clap adds them as it builds the command, without a heading).
fn command() -> clap::Command {
    let mut command = Cli::command();
    command.build();
    command
        .mut_arg("help", |arg| arg.help_heading("Advanced"))
        .mut_arg("version", |arg| arg.help_heading("Advanced"))
}

/// Parses a command line, refusing an agent flag given before a subcommand: the subcommand
/// would run without it, silently.
pub(crate) fn parse_from(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> Result<Cli, clap::Error> {
    let mut command = command();
    let matches = command.try_get_matches_from_mut(args)?;
    if let Some(error) = agent_flag_before_subcommand(&mut command, &matches) {
        return Err(error);
    }
    Cli::from_arg_matches(&matches)
}

/// The error for the first agent flag given on the command line before a subcommand, saying
/// where it belongs.
fn agent_flag_before_subcommand(
    command: &mut clap::Command,
    matches: &ArgMatches,
) -> Option<clap::Error> {
    let (name, _) = matches.subcommand()?;
    let given = command.get_arguments().find(|arg| {
        !arg.is_global_set()
            && matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine)
    })?;
    let flag = given.get_long().unwrap_or_else(|| given.get_id().as_str());
    let subcommand = command.find_subcommand(name)?;
    let message = if subcommand
        .get_arguments()
        .any(|arg| arg.get_long() == Some(flag))
    {
        format!(
            "--{flag} was given before the subcommand `{name}`, where it is a flag of the agent \
             (monitor without a subcommand) and `{name}` would run without it; put it after the \
             subcommand: monitor {name} --{flag} ..."
        )
    } else {
        format!(
            "--{flag} is a flag of the agent (monitor without a subcommand); `monitor {name}` \
             does not take it (see monitor {name} --help)"
        )
    };
    Some(command.error(ErrorKind::ArgumentConflict, message))
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
        Some(Command::Shadow(args)) => commands::shadow::run(&args),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The task headings of `monitor --help`, in the order it shows them.
    const HELP_HEADINGS: [&str; 8] = [
        "Observing",
        "Acting",
        "Pods",
        "Thresholds",
        "Kernel",
        "Endpoints",
        "Advanced",
        "Logging",
    ];

    #[test]
    fn an_agent_flag_before_a_subcommand_is_refused_and_placed() {
        let after = parse_from(["monitor", "doctor", "--config", "kubelet.yaml"]).unwrap();
        match after.command {
            Some(Command::Doctor(args)) => {
                assert_eq!(args.config.as_deref(), Some("kubelet.yaml".as_ref()));
            }
            other => panic!("{other:?}"),
        }
        let cases = [
            (
                "a flag the subcommand has too",
                &["monitor", "--config", "kubelet.yaml", "doctor"][..],
                "--config was given before the subcommand `doctor`",
                "put it after the subcommand: monitor doctor --config ...",
            ),
            (
                "a flag the subcommand has not",
                &["monitor", "--dry-run", "top"][..],
                "--dry-run is a flag of the agent",
                "`monitor top` does not take it",
            ),
        ];
        for (name, argv, first, then) in cases {
            let error = parse_from(argv).expect_err(name);
            assert_eq!(error.kind(), ErrorKind::ArgumentConflict, "{name}");
            let text = error.to_string();
            assert!(
                text.contains(first) && text.contains(then),
                "{name}: {text}"
            );
        }
        // Global flags are every command's, and NODE_NAME from the environment is not given.
        assert!(parse_from(["monitor", "--log-format", "json", "config"]).is_ok());
        assert!(parse_from(["monitor", "--dry-run", "--pods", "d"]).is_ok());
    }

    #[test]
    fn help_is_grouped_by_task_and_teaches_with_examples() {
        let mut command = command();
        for arg in command.get_arguments() {
            let heading = arg.get_help_heading();
            assert!(
                heading.is_some_and(|h| HELP_HEADINGS.contains(&h)),
                "--{} is under {heading:?}",
                arg.get_id()
            );
        }
        let help = command.render_long_help().to_string();
        let positions: Vec<usize> = HELP_HEADINGS
            .iter()
            .map(|h| {
                help.find(&format!("\n{h}:\n"))
                    .unwrap_or_else(|| panic!("no {h} heading in\n{help}"))
            })
            .collect();
        assert!(positions.is_sorted(), "headings out of order in\n{help}");
        assert!(
            !help.contains("\nOptions:\n"),
            "a flag without a task:\n{help}"
        );
        for sub in ["trace", "rank", "checkpoint", "config", "doctor", "top"] {
            let error = parse_from(["monitor", sub, "--help"]).expect_err(sub);
            assert_eq!(error.kind(), ErrorKind::DisplayHelp, "{sub} has its --help");
        }
        for example in [
            "monitor --dry-run --pods DIR --config FILE",
            "monitor doctor --pods DIR",
            "monitor top",
            "kubectl get pods -o yaml",
        ] {
            assert!(help.contains(example), "{example:?} in\n{help}");
        }
    }
}
