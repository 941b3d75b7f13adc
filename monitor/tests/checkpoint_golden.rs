//! Checked-in checkpoints of each version: they must keep loading, older agents must keep
//! reading the newer files (finding there only what acting agents did), and no damage to them
//! may go unnoticed.
use monitor::engine::checkpoint::{
    AgentState, AgentStateV1, BootMarks, Checkpoint as _, CheckpointV1, CheckpointV2, CheckpointV3,
    ConditionTransition, Counters, EvictionRecord, Memory, Mode, PendingEviction, SavedPod, decode,
    encode, migrate_to_v4, migrate_v1_to_v2,
};

const GOLDEN_V1: &[u8] = include_bytes!("golden/checkpoint-v1.json");
const GOLDEN_V2: &[u8] = include_bytes!("golden/checkpoint-v2.json");
const GOLDEN_V3: &[u8] = include_bytes!("golden/checkpoint-v3.json");
const GOLDEN_V4: &[u8] = include_bytes!("golden/checkpoint-v4.json");

const T0: u64 = 1_767_268_800_000; // 2026-01-01T12:00:00Z

fn eviction(name: &str, uid: &str, at: u64, signal: &str, bytes_freed: u64) -> EvictionRecord {
    EvictionRecord {
        pod: SavedPod {
            namespace: "shop".into(),
            name: name.into(),
            uid: uid.into(),
        },
        evicted_at_unix_ms: at,
        signal: signal.into(),
        bytes_freed,
    }
}

/// The content of the version-4 golden file: the version-3 content as what acting agents did,
/// and a dry run's memory of its own, the dry run having written the file.
fn golden_state_v4() -> AgentState {
    let mut dry_run = Memory::default();
    dry_run.v1.last_eviction = Some(eviction(
        "web-0",
        "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
        T0 + 50_000,
        "allocatableMemory.available",
        0,
    ));
    dry_run.v1.awaiting_cleanup = dry_run.v1.last_eviction.clone();
    dry_run.pending = Some(PendingEviction {
        uid: "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f".into(),
        grace_period_seconds: 1,
    });
    AgentState {
        acting: golden_state_v3(),
        dry_run,
        written_by: Some(Mode::DryRun),
    }
}

/// The content of the version-3 golden file: the version-2 content and the grace period of
/// the eviction awaiting cleanup.
fn golden_state_v3() -> Memory {
    Memory {
        pending: Some(PendingEviction {
            uid: "5f0e6c1a-2b3d-4e5f-8a9b-0c1d2e3f4a5b".into(),
            grace_period_seconds: 30,
        }),
        ..golden_state()
    }
}

/// The content of the version-1 and version-2 golden files, written out independently of
/// the encoder.
fn golden_state() -> Memory {
    let cart = eviction(
        "cart-7d9f",
        "5f0e6c1a-2b3d-4e5f-8a9b-0c1d2e3f4a5b",
        T0 + 40_000,
        "memory.available",
        805_306_368,
    );
    Memory {
        v1: AgentStateV1 {
            soft_threshold_first_observed_unix_ms: [
                ("memory.available".to_owned(), T0 + 30_000),
                ("allocatableMemory.available".to_owned(), T0 + 35_500),
            ]
            .into(),
            node_conditions: [(
                "MemoryPressure".to_owned(),
                ConditionTransition {
                    status: "True".into(),
                    last_transition_unix_ms: T0 + 10_000,
                },
            )]
            .into(),
            last_eviction: Some(cart.clone()),
            awaiting_cleanup: Some(cart.clone()),
            recent_evictions: vec![
                eviction(
                    "batch-0",
                    "0a1b2c3d-0000-4000-8000-000000000001",
                    T0,
                    "memory.available",
                    2_147_483_648,
                ),
                cart,
            ],
            counters: Counters {
                evictions_by_signal: [("memory.available".to_owned(), 2)].into(),
                events_received: 123_456,
                events_lost: 7,
            },
        },
        boot: Some(BootMarks {
            boot_id: "3b1f8a2e-9c4d-4e6f-a1b2-c3d4e5f6a7b8".into(),
            soft_threshold_first_observed_ms: [
                ("memory.available".to_owned(), 86_430_000),
                ("allocatableMemory.available".to_owned(), 86_435_500),
            ]
            .into(),
            last_eviction_ms: Some(86_440_000),
        }),
        pending: None,
    }
}

#[test]
fn version_4_golden_loads() {
    let decoded = decode(GOLDEN_V4).unwrap();
    assert_eq!(decoded.file_version, 4);
    assert_eq!(decoded.state, golden_state_v4());
}

#[test]
fn older_readers_find_only_what_acting_agents_did_in_the_version_4_golden() {
    let v3_agent = CheckpointV3::unmarshal(GOLDEN_V4).unwrap();
    v3_agent.verify_checksum().unwrap();
    assert_eq!(v3_agent.into_state(), golden_state_v3());
    let v2_agent = CheckpointV2::unmarshal(GOLDEN_V4).unwrap();
    v2_agent.verify_checksum().unwrap();
    assert_eq!(v2_agent.into_state(), golden_state());
    let v1_agent = CheckpointV1::unmarshal(GOLDEN_V4).unwrap();
    v1_agent.verify_checksum().unwrap();
    assert_eq!(v1_agent.state, golden_state().v1);
}

#[test]
fn version_3_golden_loads_without_a_mode() {
    let decoded = decode(GOLDEN_V3).unwrap();
    assert_eq!(decoded.file_version, 3);
    assert_eq!(decoded.state, migrate_to_v4(golden_state_v3()));
    assert_eq!(decoded.state.written_by, None);
}

#[test]
fn older_readers_verify_and_load_the_version_3_golden() {
    let v2_agent = CheckpointV2::unmarshal(GOLDEN_V3).unwrap();
    v2_agent.verify_checksum().unwrap();
    assert_eq!(v2_agent.into_state(), golden_state());
    let v1_agent = CheckpointV1::unmarshal(GOLDEN_V3).unwrap();
    v1_agent.verify_checksum().unwrap();
    assert_eq!(v1_agent.state, golden_state().v1);
}

#[test]
fn version_2_golden_loads() {
    let decoded = decode(GOLDEN_V2).unwrap();
    assert_eq!(decoded.file_version, 2);
    assert_eq!(decoded.state, migrate_to_v4(golden_state()));
}

#[test]
fn version_1_golden_loads_and_migrates() {
    let decoded = decode(GOLDEN_V1).unwrap();
    assert_eq!(decoded.file_version, 1);
    assert_eq!(
        decoded.state,
        migrate_to_v4(migrate_v1_to_v2(golden_state().v1))
    );
    assert_eq!(
        decoded.state.acting.boot, None,
        "version 1 had no boot marks"
    );
}

#[test]
fn version_1_reader_verifies_and_loads_the_version_2_golden() {
    let old_agent = CheckpointV1::unmarshal(GOLDEN_V2).unwrap();
    old_agent.verify_checksum().unwrap();
    assert_eq!(old_agent.state, golden_state().v1);
}

/// The formats are frozen: if this fails, the change needs a new version, not new goldens.
#[test]
fn encoders_still_write_the_golden_bytes() {
    let v1 = CheckpointV1::new(golden_state().v1)
        .unwrap()
        .marshal()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v1),
        String::from_utf8_lossy(GOLDEN_V1)
    );
    let v2 = CheckpointV2::new(golden_state())
        .unwrap()
        .marshal()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v2),
        String::from_utf8_lossy(GOLDEN_V2)
    );
    let v3 = CheckpointV3::new(golden_state_v3())
        .unwrap()
        .marshal()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v3),
        String::from_utf8_lossy(GOLDEN_V3)
    );
    let v4 = encode(&golden_state_v4()).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v4),
        String::from_utf8_lossy(GOLDEN_V4)
    );
}

struct Golden {
    name: &'static str,
    bytes: &'static [u8],
    expected: AgentState,
}

fn goldens() -> [Golden; 4] {
    [
        Golden {
            name: "checkpoint-v1.json",
            bytes: GOLDEN_V1,
            expected: migrate_to_v4(migrate_v1_to_v2(golden_state().v1)),
        },
        Golden {
            name: "checkpoint-v2.json",
            bytes: GOLDEN_V2,
            expected: migrate_to_v4(golden_state()),
        },
        Golden {
            name: "checkpoint-v3.json",
            bytes: GOLDEN_V3,
            expected: migrate_to_v4(golden_state_v3()),
        },
        Golden {
            name: "checkpoint-v4.json",
            bytes: GOLDEN_V4,
            expected: golden_state_v4(),
        },
    ]
}

/// Decodes `bytes`: rejecting them is fine, accepting them is fine only with the original
/// content (a changed space, for instance). Returns whether they were accepted.
fn assert_never_accepted_changed(golden: &Golden, bytes: &[u8], what: &str) -> bool {
    match decode(bytes) {
        Err(_) => false,
        Ok(decoded) => {
            assert_eq!(
                decoded.state, golden.expected,
                "{}: {what} accepted",
                golden.name
            );
            true
        }
    }
}

#[test]
fn every_single_byte_corruption_is_detected() {
    // Half a million decodes per file: one thread per file.
    std::thread::scope(|scope| {
        for golden in goldens() {
            scope.spawn(move || check_every_byte_value(&golden));
        }
    });
}

fn check_every_byte_value(golden: &Golden) {
    let mut corrupt = golden.bytes.to_vec();
    let mut accepted_unchanged = 0;
    for position in 0..corrupt.len() {
        let original = corrupt[position];
        for value in (0..=u8::MAX).filter(|&value| value != original) {
            corrupt[position] = value;
            let what = format!("byte {position} {original:#04x} -> {value:#04x}");
            accepted_unchanged +=
                usize::from(assert_never_accepted_changed(golden, &corrupt, &what));
        }
        corrupt[position] = original;
    }
    // Whitespace swaps and version bumps keep the content; report how many, for the record.
    eprintln!(
        "{}: {accepted_unchanged} corruptions left the content intact",
        golden.name
    );
}

#[test]
fn every_truncation_is_detected() {
    for golden in goldens() {
        for len in 0..golden.bytes.len() {
            let what = format!("truncation to {len} bytes");
            let accepted = assert_never_accepted_changed(&golden, &golden.bytes[..len], &what);
            // Only dropping the final newline leaves a complete document.
            assert!(
                !accepted || len == golden.bytes.len() - 1,
                "{}: {what} accepted",
                golden.name
            );
        }
    }
}
