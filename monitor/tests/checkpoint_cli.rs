//! `monitor checkpoint show` and `verify`, run as the built binary against real files.
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use monitor::engine::checkpoint::{Checkpoint as _, CheckpointV2};

const GOLDEN_V2: &str = include_str!("golden/checkpoint-v2.json");
const GOLDEN_V3: &str = include_str!("golden/checkpoint-v3.json");
const GOLDEN_V4: &str = include_str!("golden/checkpoint-v4.json");
const V1_CHECKSUM: &str = "1273374159";
const V2_CHECKSUM: &str = "3905580282";
const V3_CHECKSUM: &str = "1304896949";
const V4_CHECKSUM: &str = "3348207112";

fn monitor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_monitor"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn dir_with(checkpoint: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("agent_state"), checkpoint).unwrap();
    dir
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The golden checkpoint with one counter changed behind the checksums' back.
fn tampered() -> String {
    let tampered = GOLDEN_V2.replace("\"events_lost\": 7", "\"events_lost\": 8");
    assert_ne!(tampered, GOLDEN_V2);
    tampered
}

#[test]
fn verify_reports_each_outcome_with_its_exit_status() {
    let valid = dir_with(GOLDEN_V2);
    let valid_v3 = dir_with(GOLDEN_V3);
    let valid_v4 = dir_with(GOLDEN_V4);
    let corrupt = dir_with(&tampered());
    let unparsable = dir_with("{\"version\": 2, \"state\": ");
    let empty = tempfile::tempdir().unwrap();
    let actual = {
        let checkpoint = CheckpointV2::unmarshal(tampered().as_bytes()).unwrap();
        CheckpointV2::new(checkpoint.into_state())
            .unwrap()
            .checksum_v2
            .to_string()
    };
    let valid_file = valid.path().join("agent_state");
    let cases: Vec<(&str, Vec<&str>, i32, Vec<&str>)> = vec![
        (
            "valid directory",
            vec!["--checkpoint-dir", arg(valid.path())],
            0,
            vec!["valid", "version 2", V1_CHECKSUM, V2_CHECKSUM],
        ),
        (
            "valid file",
            vec![arg(&valid_file)],
            0,
            vec!["valid", V2_CHECKSUM],
        ),
        (
            "valid version-3 file",
            vec!["--checkpoint-dir", arg(valid_v3.path())],
            0,
            vec!["valid", "version 3", V1_CHECKSUM, V2_CHECKSUM, V3_CHECKSUM],
        ),
        (
            "valid version-4 file",
            vec!["--checkpoint-dir", arg(valid_v4.path())],
            0,
            vec![
                "valid",
                "version 4",
                V1_CHECKSUM,
                V2_CHECKSUM,
                V3_CHECKSUM,
                V4_CHECKSUM,
            ],
        ),
        (
            "checksum mismatch",
            vec!["--checkpoint-dir", arg(corrupt.path())],
            1,
            vec![
                "corrupt",
                "expected",
                V2_CHECKSUM,
                "actual",
                &actual,
                "sets this file aside when it starts",
            ],
        ),
        (
            "truncated file",
            vec!["--checkpoint-dir", arg(unparsable.path())],
            1,
            vec!["corrupt", "not a valid checkpoint"],
        ),
        (
            "missing file",
            vec!["--checkpoint-dir", arg(empty.path())],
            2,
            vec!["does not exist"],
        ),
        (
            "unreadable: a directory where the file should be",
            vec![arg(empty.path())],
            2,
            vec!["could not read"],
        ),
    ];
    for (name, extra, code, expected) in cases {
        let output = monitor(&[&["checkpoint", "verify"], extra.as_slice()].concat());
        let all = text(&output.stdout) + &text(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{name}: {all}");
        for needle in expected {
            assert!(
                all.contains(needle),
                "{name}: {needle:?} missing from {all:?}"
            );
        }
    }
}

/// The value printed next to `label`, and the column it starts at.
fn value_of<'a>(stdout: &'a str, label: &str) -> (usize, &'a str) {
    let line = stdout
        .lines()
        .find(|line| {
            line.strip_prefix(label)
                .is_some_and(|rest| rest.starts_with("  "))
        })
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{stdout}"));
    let value = line[label.len()..].trim_start();
    (line.len() - value.len(), value)
}

#[test]
fn show_prints_text_for_people() {
    let dir = dir_with(GOLDEN_V2);
    let output = monitor(&["checkpoint", "show", "--checkpoint-dir", arg(dir.path())]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let (column, _) = value_of(&stdout, "Checkpoint");
    let cases = [
        (
            "Checksums (verified)",
            "version 2, checksum 1273374159, checksum_v2 3905580282",
        ),
        ("Written by", "not recorded (a file from before version 4)"),
        ("    memory.available", "2026-01-01T12:00:30Z  ("),
        ("    allocatableMemory.available", "2026-01-01T12:00:35Z  ("),
        (
            "    MemoryPressure",
            "True    since 2026-01-01T12:00:10Z  (",
        ),
        (
            "  Last eviction",
            "shop/cart-7d9f (uid 5f0e6c1a-2b3d-4e5f-8a9b-0c1d2e3f4a5b), memory.available, 768.0Mi \
             freed",
        ),
        ("  Recent evictions", "2 kept (at most 64), newest first"),
        ("  Events received", "123456"),
        ("  Events lost", "7"),
        ("  Evictions by signal", "memory.available=2"),
    ];
    for (label, expected) in cases {
        let (value_column, value) = value_of(&stdout, label);
        assert!(
            value.contains(expected),
            "{label}: {expected:?} missing from {value:?}"
        );
        assert_eq!(value_column, column, "{label}: values are aligned");
    }
    let (_, soft) = value_of(&stdout, "    memory.available");
    assert!(soft.ends_with(" s ago)"), "{soft}");
}

#[test]
fn show_prints_json_for_tools() {
    let dir = dir_with(GOLDEN_V2);
    let output = monitor(&[
        "checkpoint",
        "show",
        "--checkpoint-dir",
        arg(dir.path()),
        "--output",
        "json",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["file_version"], 2);
    assert_eq!(report["checksum"].to_string(), V1_CHECKSUM);
    assert_eq!(report["checksum_v2"].to_string(), V2_CHECKSUM);
    assert!(report["checksum_v3"].is_null(), "{report:#}");
    assert!(report["checksum_v4"].is_null(), "{report:#}");
    assert_eq!(
        report["state"]["acting"]["v1"]["counters"]["events_received"],
        123_456
    );
    assert_eq!(
        report["state"]["acting"]["boot"]["last_eviction_ms"],
        86_440_000
    );
    assert!(report["state"]["written_by"].is_null(), "{report:#}");
}

#[test]
fn show_refuses_a_corrupt_checkpoint() {
    let dir = dir_with(&tampered());
    let output = monitor(&["checkpoint", "show", "--checkpoint-dir", arg(dir.path())]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains(V2_CHECKSUM));
    assert!(output.stdout.is_empty());
}
