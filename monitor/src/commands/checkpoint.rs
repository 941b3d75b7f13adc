//! `monitor checkpoint`: look at the agent's checkpointed state without running the agent.
//!
//! Both subcommands only read; they never create the directory, remove temporaries or rewrite a
//! file, so they are safe next to a running agent.
use crate::flags::OutputFormat;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::checkpoint::store::{StoreError, read_file};
use crate::checkpoint::wall_time::rfc3339;
use crate::checkpoint::{DEFAULT_CHECKPOINT_DIR, Key};
use crate::engine::checkpoint::{
    AgentState, CheckpointV1, CheckpointV2, Decoded, EvictionRecord, MAX_RECENT_EVICTIONS, decode,
};
use crate::engine::units::unsigned_bytes;
use crate::system_clock::unix_ms_now;

const EXIT_CORRUPT: u8 = 1;
const EXIT_MISSING: u8 = 2;

const EXIT_CODES: &str = "\
Exit status:
  0  the checkpoint is valid
  1  the checkpoint is corrupt: a checksum does not match its content, or the file is not a
     checkpoint; the agent refuses to start on it until run with --reset-state
  2  the checkpoint is missing or cannot be read

The agent keeps its state in DIR/agent_state (JSON, version 3). The file carries three
checksums, FNV-32a over the content: `checksum` for the version-1 fields and `checksum_v2` for
the version-2 fields, which an older agent verifies after a rollback, and `checksum_v3` for the
whole content.";

#[derive(Args, Debug)]
#[command(after_long_help = EXIT_CODES)]
pub(crate) struct CheckpointArgs {
    #[command(subcommand)]
    command: CheckpointCommand,
}

#[derive(Subcommand, Debug)]
enum CheckpointCommand {
    /// Print the saved state: grace timers, node conditions, evictions and counters.
    ///
    /// Times are printed in UTC (RFC 3339) with how long ago they were. Soft-threshold times are
    /// when the agent first saw the threshold crossed; the grace period runs from there and is
    /// not restarted by an agent restart.
    #[command(after_long_help = EXIT_CODES)]
    Show(ShowArgs),
    /// Check a checkpoint's checksums.
    ///
    /// Prints the expected (stored) and actual (computed) checksum when they differ. Examples:
    ///
    ///   monitor checkpoint verify
    ///
    ///   monitor checkpoint verify --checkpoint-dir /tmp/copy
    ///
    ///   monitor checkpoint verify ./agent_state.corrupt-20260131T120000Z
    #[command(after_long_help = EXIT_CODES, verbatim_doc_comment)]
    Verify(VerifyArgs),
}

#[derive(Args, Debug)]
struct ShowArgs {
    /// Directory holding the agent's checkpoints.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_CHECKPOINT_DIR)]
    checkpoint_dir: PathBuf,
    /// `text` for people, `json` for tools (the state as the agent holds it).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
}

#[derive(Args, Debug)]
struct VerifyArgs {
    /// Directory holding the agent's checkpoints [default: /var/lib/monitor/checkpoints].
    #[arg(long, value_name = "DIR", conflicts_with = "file")]
    checkpoint_dir: Option<PathBuf>,
    /// A checkpoint file to check instead, e.g. a copy or a file set aside by --reset-state.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
}

pub(crate) fn run(args: CheckpointArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        CheckpointCommand::Show(args) => show(&args),
        CheckpointCommand::Verify(args) => Ok(verify(&args)),
    }
}

fn verify(args: &VerifyArgs) -> ExitCode {
    let path = match (&args.file, &args.checkpoint_dir) {
        (Some(file), _) => file.clone(),
        (None, dir) => state_file(dir.as_deref().unwrap_or(Path::new(DEFAULT_CHECKPOINT_DIR))),
    };
    match read_verified(&path) {
        Ok(decoded) => {
            println!(
                "{}: valid, {}",
                path.display(),
                describe_checksums(&decoded)
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn show(args: &ShowArgs) -> anyhow::Result<ExitCode> {
    let path = state_file(&args.checkpoint_dir);
    let decoded = match read_verified(&path) {
        Ok(decoded) => decoded,
        Err(code) => return Ok(code),
    };
    match args.output {
        OutputFormat::Json => {
            let (v1, v2, v3) = checksums(&decoded);
            let report = serde_json::json!({
                "path": path,
                "file_version": decoded.file_version,
                "checksum": v1,
                "checksum_v2": v2,
                "checksum_v3": v3,
                "state": decoded.state,
            });
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        OutputFormat::Text => print!("{}", render_text(&path, &decoded, unix_ms_now())),
    }
    Ok(ExitCode::SUCCESS)
}

fn state_file(dir: &Path) -> PathBuf {
    dir.join(Key::agent_state().as_str())
}

/// Reads and verifies `path`; on failure prints why to stderr and returns the exit status.
fn read_verified(path: &Path) -> Result<Decoded, ExitCode> {
    let bytes = read_file(path).map_err(|error| {
        match error {
            StoreError::NotFound { .. } => eprintln!(
                "{error}: no checkpoint there (the agent writes one when it first starts)"
            ),
            StoreError::Io { .. } | StoreError::NotRegular { .. } => eprintln!("{error}"),
            StoreError::TooLarge { .. } => {
                eprintln!("{error}");
                return ExitCode::from(EXIT_CORRUPT);
            }
        }
        ExitCode::from(EXIT_MISSING)
    })?;
    decode(&bytes).map_err(|error| {
        eprintln!(
            "{}: corrupt: {error}\nThe agent refuses to start on this file. Keep a copy for \
             analysis; starting the agent with --reset-state sets it aside and starts empty.",
            path.display()
        );
        ExitCode::from(EXIT_CORRUPT)
    })
}

/// The checksums a file of `decoded`'s version carries: version 1's, and version 2's and 3's
/// where it has those parts.
fn checksums(decoded: &Decoded) -> (Option<u32>, Option<u32>, Option<u32>) {
    let v1 = CheckpointV1::new(decoded.state.v1.clone())
        .ok()
        .map(|c| c.checksum);
    let v2 = (decoded.file_version >= 2)
        .then(|| CheckpointV2::new(decoded.state.clone()).ok())
        .flatten()
        .map(|c| c.checksum_v2);
    let v3 = (decoded.file_version >= 3).then_some(decoded.checksum);
    (v1, v2, v3)
}

fn describe_checksums(decoded: &Decoded) -> String {
    let (v1, v2, v3) = checksums(decoded);
    let mut text = format!("version {}", decoded.file_version);
    for (name, value) in [("checksum", v1), ("checksum_v2", v2), ("checksum_v3", v3)] {
        if let Some(value) = value {
            let _ = write!(text, ", {name} {value}");
        }
    }
    text
}

fn render_text(path: &Path, decoded: &Decoded, now_ms: u64) -> String {
    // The pending eviction is shown through its accessor, with the pod awaiting cleanup.
    let AgentState {
        v1: state,
        boot,
        pending: _,
    } = &decoded.state;
    let when = |ms: u64| format!("{}  {}", rfc3339(ms), ago(ms, now_ms));
    // Rows of (label, value); an empty pair is a blank separator line.
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut row = |label: &str, value: &str| rows.push((label.to_owned(), value.to_owned()));

    row("Checkpoint", &path.display().to_string());
    row("Checksums (verified)", &describe_checksums(decoded));
    row(
        "Boot clock marks",
        &boot.as_ref().map_or_else(
            || "none: times are measured on the wall clock".to_owned(),
            |marks| format!("boot {}", marks.boot_id),
        ),
    );
    row("", "");

    row(
        "Soft thresholds crossed",
        if state.soft_threshold_first_observed_unix_ms.is_empty() {
            "none"
        } else {
            "(first observed)"
        },
    );
    for (signal, &ms) in &state.soft_threshold_first_observed_unix_ms {
        row(&format!("  {signal}"), &when(ms));
    }
    row(
        "Node conditions",
        if state.node_conditions.is_empty() {
            "none"
        } else {
            ""
        },
    );
    for (condition, transition) in &state.node_conditions {
        let value = format!(
            "{:<8}since {}",
            transition.status,
            when(transition.last_transition_unix_ms)
        );
        row(&format!("  {condition}"), &value);
    }
    let eviction = |record: &Option<EvictionRecord>| {
        record
            .as_ref()
            .map_or_else(|| "none".to_owned(), |r| describe_eviction(r, &when))
    };
    row("Last eviction", &eviction(&state.last_eviction));
    row("Awaiting cleanup", &eviction(&state.awaiting_cleanup));
    if let Some(grace) = decoded.state.pending_grace_period_seconds() {
        row("  grace period", &format!("{grace}s from the decision"));
    }

    row(
        "Recent evictions",
        &format!(
            "{} kept (at most {MAX_RECENT_EVICTIONS}), newest first",
            state.recent_evictions.len()
        ),
    );
    for record in state.recent_evictions.iter().rev() {
        row("", &describe_eviction(record, &when));
    }
    row("", "");

    let counters = &state.counters;
    row("Events received", &counters.events_received.to_string());
    row("Events lost", &counters.events_lost.to_string());
    let by_signal: Vec<String> = counters
        .evictions_by_signal
        .iter()
        .map(|(signal, count)| format!("{signal}={count}"))
        .collect();
    row(
        "Evictions by signal",
        &if by_signal.is_empty() {
            "none".to_owned()
        } else {
            by_signal.join(", ")
        },
    );
    align(&rows)
}

/// Prints rows as two columns, the values starting two spaces after the longest label.
fn align(rows: &[(String, String)]) -> String {
    let width = rows
        .iter()
        .map(|(label, _)| label.chars().count())
        .max()
        .unwrap_or(0)
        + 2;
    let mut out = String::new();
    for (label, value) in rows {
        let line = format!("{label:<width$}{value}");
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

fn describe_eviction(record: &EvictionRecord, when: &dyn Fn(u64) -> String) -> String {
    let pod = &record.pod;
    format!(
        "{}  {}/{} (uid {}), {}, {} freed",
        when(record.evicted_at_unix_ms),
        pod.namespace,
        pod.name,
        pod.uid,
        record.signal,
        unsigned_bytes(record.bytes_freed)
    )
}

/// `42 s ago`, or `in 3 s` when the time lies ahead (the clock was set back).
fn ago(then_ms: u64, now_ms: u64) -> String {
    match now_ms.checked_sub(then_ms) {
        Some(past) => format!("({} s ago)", past / 1_000),
        None => format!("(in {} s)", (then_ms - now_ms) / 1_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_relative_times() {
        let cases = [
            ("past", ago(1_000, 43_500), "(42 s ago)"),
            ("future", ago(10_000, 7_000), "(in 3 s)"),
        ];
        for (name, actual, expected) in cases {
            assert_eq!(actual, expected, "{name}");
        }
    }
}
