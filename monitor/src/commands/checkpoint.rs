//! `monitor checkpoint`: look at the agent's checkpointed state without running the agent.
//!
//! Both subcommands only read; they never create the directory, remove temporaries or rewrite a
//! file, so they are safe next to a running agent.
use crate::flags::OutputFormat;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::checkpoint::manager::{SET_ASIDE_KEPT, SET_ASIDE_MARKER};
use crate::checkpoint::store::{StoreError, read_file};
use crate::checkpoint::wall_time::rfc3339;
use crate::checkpoint::{DEFAULT_CHECKPOINT_DIR, Key};
use crate::engine::checkpoint::{
    CheckpointV1, CheckpointV2, CheckpointV3, Decoded, EvictionRecord, MAX_RECENT_EVICTIONS,
    Memory, Mode, decode,
};
use crate::engine::units::unsigned_bytes;
use crate::system_clock::unix_ms_now;

const EXIT_CORRUPT: u8 = 1;
const EXIT_MISSING: u8 = 2;

const EXIT_CODES: &str = "\
Exit status:
  0  the checkpoint is valid
  1  the checkpoint is corrupt: a checksum does not match its content, or the file is not a
     checkpoint; the agent sets it aside when it starts (DIR/agent_state.corrupt-TIME, at most
     5 kept) and starts with an empty state
  2  the checkpoint is missing or cannot be read

The agent keeps its state in DIR/agent_state (JSON, version 4): what acting agents did in the
parts every older agent reads, a dry run's decisions apart, and which mode wrote the file. The
file carries four checksums, FNV-32a over the content: `checksum`, `checksum_v2` and
`checksum_v3` for the fields of versions 1 to 3, which an older agent verifies after a
rollback, and `checksum_v4` for the whole content.";

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
    /// A checkpoint file to check instead, e.g. a copy or a file the agent set aside.
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
    let verdict = match read_verified(&path) {
        Ok(decoded) => {
            println!(
                "{}: valid, {}",
                path.display(),
                describe_checksums(&decoded)
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    };
    if let (None, Some(line)) = (&args.file, set_aside_line(&path)) {
        eprintln!("{line}");
    }
    verdict
}

/// The checkpoint in `dir` in one line, for `monitor doctor`: valid (its version and who
/// wrote it), missing, or damaged (and what the agent does with it), and the damaged copies
/// set aside beside it.
pub(crate) fn summary(dir: &Path) -> String {
    let path = state_file(dir);
    let mut text = match read_file(&path).map(|bytes| decode(&bytes)) {
        Err(StoreError::NotFound { .. }) => "none yet: the agent writes one when it starts".into(),
        Ok(Ok(decoded)) => format!(
            "valid, version {}, written by {}",
            decoded.file_version,
            decoded
                .state
                .written_by
                .map_or("an agent that did not record its mode", Mode::describe)
        ),
        Ok(Err(problem)) => damaged(&problem.to_string()),
        Err(error) => damaged(&error.to_string()),
    };
    if let Some(line) = set_aside_line(&path) {
        let _ = write!(text, "; {line}");
    }
    text
}

fn damaged(problem: &str) -> String {
    format!(
        "DAMAGED ({problem}): the agent sets it aside when it starts and starts with an empty \
         state"
    )
}

/// Damaged checkpoints the agent set aside beside `path`, in one line; `None` when none.
fn set_aside_line(path: &Path) -> Option<String> {
    let dir = path.parent()?;
    let prefix = format!("{}.{SET_ASIDE_MARKER}", Key::agent_state());
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(&prefix))
        .collect();
    names.sort();
    let newest = names.last()?;
    Some(format!(
        "damaged checkpoints set aside by the agent: {} (at most {SET_ASIDE_KEPT} kept), the \
         newest {}",
        names.len(),
        dir.join(newest).display()
    ))
}

fn show(args: &ShowArgs) -> anyhow::Result<ExitCode> {
    let path = state_file(&args.checkpoint_dir);
    let decoded = match read_verified(&path) {
        Ok(decoded) => decoded,
        Err(code) => return Ok(code),
    };
    match args.output {
        OutputFormat::Json => {
            let [v1, v2, v3, v4] = checksums(&decoded);
            let report = serde_json::json!({
                "path": path,
                "file_version": decoded.file_version,
                "checksum": v1,
                "checksum_v2": v2,
                "checksum_v3": v3,
                "checksum_v4": v4,
                "state": decoded.state,
            });
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        OutputFormat::Text => print!("{}", render_text(&path, &decoded, unix_ms_now())),
    }
    if let Some(line) = set_aside_line(&path) {
        eprintln!("{line}");
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
            "{}: corrupt: {error}\nThe agent sets this file aside when it starts (renamed \
             agent_state.corrupt-TIME, never overwritten) and starts with an empty state.",
            path.display()
        );
        ExitCode::from(EXIT_CORRUPT)
    })
}

/// The checksums a file of `decoded`'s version carries: version 1's, and those of versions 2
/// to 4 where it has their parts.
fn checksums(decoded: &Decoded) -> [Option<u32>; 4] {
    let acting = &decoded.state.acting;
    let since =
        |version: u32, checksum: Option<u32>| checksum.filter(|_| decoded.file_version >= version);
    [
        CheckpointV1::new(acting.v1.clone())
            .ok()
            .map(|c| c.checksum),
        since(
            2,
            CheckpointV2::new(acting.clone())
                .ok()
                .map(|c| c.checksum_v2),
        ),
        since(
            3,
            CheckpointV3::new(acting.clone())
                .ok()
                .map(|c| c.checksum_v3),
        ),
        since(4, Some(decoded.checksum)),
    ]
}

fn describe_checksums(decoded: &Decoded) -> String {
    let mut text = format!("version {}", decoded.file_version);
    let names = ["checksum", "checksum_v2", "checksum_v3", "checksum_v4"];
    for (name, value) in names.into_iter().zip(checksums(decoded)) {
        if let Some(value) = value {
            let _ = write!(text, ", {name} {value}");
        }
    }
    text
}

fn render_text(path: &Path, decoded: &Decoded, now_ms: u64) -> String {
    let state = &decoded.state;
    let when = |ms: u64| format!("{}  {}", rfc3339(ms), ago(ms, now_ms));
    // Rows of (label, value); an empty pair is a blank separator line.
    let mut rows: Vec<(String, String)> = Vec::new();
    rows.push(("Checkpoint".into(), path.display().to_string()));
    rows.push(("Checksums (verified)".into(), describe_checksums(decoded)));
    let written_by = match state.written_by {
        Some(mode) => mode.describe().to_owned(),
        None => "not recorded (a file from before version 4): an acting agent takes its \
                 memory as a dry run's and carries out none of it"
            .to_owned(),
    };
    rows.push(("Written by".into(), written_by));
    for (title, mode) in [
        ("Acting agents' memory", Mode::Acting),
        ("Dry run's memory (never carried out)", Mode::DryRun),
    ] {
        rows.push((String::new(), String::new()));
        rows.push((title.into(), String::new()));
        memory_rows(state.memory(mode), &when, &mut rows);
    }
    align(&rows)
}

/// One mode's memory as rows, its labels indented.
fn memory_rows(memory: &Memory, when: &dyn Fn(u64) -> String, rows: &mut Vec<(String, String)>) {
    let Memory {
        v1: state, boot, ..
    } = memory;
    let mut row = |label: &str, value: &str| rows.push((format!("  {label}"), value.to_owned()));
    row(
        "Boot clock marks",
        &boot.as_ref().map_or_else(
            || "none: times are measured on the wall clock".to_owned(),
            |marks| format!("boot {}", marks.boot_id),
        ),
    );
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
            .map_or_else(|| "none".to_owned(), |r| describe_eviction(r, when))
    };
    row("Last eviction", &eviction(&state.last_eviction));
    row("Awaiting cleanup", &eviction(&state.awaiting_cleanup));
    if let Some(grace) = memory.pending_grace_period_seconds() {
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
        row("", &describe_eviction(record, when));
    }
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
