//! The checkpoint format's tests: round trips, older readers of newer files, migrations, and
//! damage of every kind refused.
use super::format::*;
use super::state::{AgentState, Memory, Mode, Now, SavedPod};

fn sample_memory() -> Memory {
    let now = Now {
        unix_ms: 1_700_000_000_000,
        boot_id: "boot-a".into(),
        boot_ms: 42_000,
    };
    let mut state = Memory::default();
    state.observe_soft_threshold("memory.available", &now);
    state.set_condition("MemoryPressure", "True", &now);
    let pod = SavedPod {
        namespace: "shop".into(),
        name: "cart-0".into(),
        uid: "0b6c".into(),
    };
    state.record_eviction(pod, "memory.available", 3 << 20, &now);
    state.record_grace_period(30);
    state.count_events(10, 1);
    state
}

/// An acting agent's memory and a dry run's, written by the dry run.
fn sample_state() -> AgentState {
    let mut dry_run = sample_memory();
    dry_run.finish_cleanup();
    dry_run.count_events(5, 0);
    AgentState {
        acting: sample_memory(),
        dry_run,
        written_by: Some(Mode::DryRun),
    }
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn round_trips_in_the_current_version() {
    let state = sample_state();
    let decoded = decode(&encode(&state).unwrap()).unwrap();
    assert_eq!(decoded.state, state);
    assert_eq!(decoded.file_version, CURRENT_VERSION);
    assert_eq!(decoded.checksum, state_checksum(&state).unwrap());
}

#[test]
fn checksum_ignores_field_order_and_whitespace() {
    let bytes = encode(&sample_state()).unwrap();
    // serde_json's default map sorts keys, so this reorders every object and drops spaces.
    let reordered = serde_json::to_vec(&json(&bytes)).unwrap();
    assert_ne!(reordered, bytes);
    assert_eq!(decode(&reordered).unwrap().state, sample_state());
}

#[test]
fn older_readers_load_only_what_acting_agents_did() {
    let state = sample_state();
    let bytes = encode(&state).unwrap();
    let v1_reader = CheckpointV1::unmarshal(&bytes).unwrap();
    v1_reader.verify_checksum().unwrap();
    assert_eq!(v1_reader.state, state.acting.v1);
    let v2_reader = CheckpointV2::unmarshal(&bytes).unwrap();
    v2_reader.verify_checksum().unwrap();
    assert_eq!(
        v2_reader.into_state(),
        Memory {
            pending: None,
            ..state.acting.clone()
        }
    );
    let v3_reader = CheckpointV3::unmarshal(&bytes).unwrap();
    v3_reader.verify_checksum().unwrap();
    assert_eq!(v3_reader.into_state(), state.acting);
}

#[test]
fn a_version_3_agent_s_file_is_read_byte_for_byte_as_it_wrote_it() {
    // What a version-3 agent wrote: its checksum_v3 covers the memory as it is now.
    let v3 = CheckpointV3::new(sample_memory())
        .unwrap()
        .marshal()
        .unwrap();
    let decoded = decode(&v3).unwrap();
    assert_eq!(decoded.file_version, 3);
    assert_eq!(decoded.state, migrate_to_v4(sample_memory()));
    assert_eq!(
        decoded.state.written_by, None,
        "a version-3 file does not say"
    );
}

#[test]
fn version_2_file_loads_without_a_pending_grace_period() {
    let memory = sample_memory();
    let v2 = CheckpointV2::new(memory.clone())
        .unwrap()
        .marshal()
        .unwrap();
    let decoded = decode(&v2).unwrap();
    assert_eq!(decoded.file_version, 2);
    assert_eq!(decoded.state.acting.pending, None);
    assert_eq!(decoded.state.acting.v1, memory.v1);
    assert_eq!(decoded.state.written_by, None);
}

#[test]
fn version_1_file_is_migrated() {
    let memory = sample_memory();
    let v1 = CheckpointV1::new(memory.v1.clone())
        .unwrap()
        .marshal()
        .unwrap();
    let decoded = decode(&v1).unwrap();
    assert_eq!(decoded.file_version, 1);
    assert_eq!(decoded.state, migrate_to_v4(migrate_v1_to_v2(memory.v1)));
}

#[test]
fn a_later_version_is_read_through_its_embedded_parts() {
    let mut file = json(&encode(&sample_state()).unwrap());
    file["version"] = 5.into();
    file["v5"] = serde_json::json!({"something": "new"});
    let decoded = decode(&serde_json::to_vec(&file).unwrap()).unwrap();
    assert_eq!((decoded.file_version, decoded.state), (5, sample_state()));
}

#[test]
fn rejects_damaged_files() {
    let good = json(&encode(&sample_state()).unwrap());
    let edit = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut file = good.clone();
        change(&mut file);
        serde_json::to_vec(&file).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "version-4 content changed: no fallback to version 3",
            edit(&|f| f["v4"]["written_by"] = "acting".into()),
            "version-4",
        ),
        (
            "version-4 checksum changed",
            edit(&|f| f["checksum_v4"] = 1.into()),
            "version-4",
        ),
        (
            "version-3 content changed",
            edit(&|f| f["v3"]["pending"]["grace_period_seconds"] = 1.into()),
            "version-4",
        ),
        (
            "version-3 checksum changed",
            edit(&|f| f["checksum_v3"] = 1.into()),
            "version-3",
        ),
        (
            "version-2 content changed",
            edit(&|f| f["v2"]["boot"]["last_eviction_ms"] = 7.into()),
            "version-4",
        ),
        (
            "version-2 checksum changed",
            edit(&|f| f["checksum_v2"] = 1.into()),
            "version-2",
        ),
        (
            "version-1 content changed",
            edit(&|f| f["state"]["counters"]["events_lost"] = 9.into()),
            "version-4",
        ),
        (
            "version-1 checksum changed",
            edit(&|f| f["checksum"] = 1.into()),
            "version-1",
        ),
        (
            "version zero",
            edit(&|f| f["version"] = 0.into()),
            "version 0",
        ),
        (
            "version lowered to 1 with newer parts",
            edit(&|f| f["version"] = 1.into()),
            "carries a version-4 part",
        ),
        (
            "version lowered to 3 with a version-4 part",
            edit(&|f| f["version"] = 3.into()),
            "carries a version-4 part",
        ),
        (
            "a mode no agent writes",
            edit(&|f| f["v4"]["written_by"] = "maybe".into()),
            "unknown variant",
        ),
        (
            "unknown field inside the dry run's memory",
            edit(&|f| f["v4"]["dry_run"]["extra"] = 1.into()),
            "unknown field",
        ),
        (
            "unknown field inside the frozen state",
            edit(&|f| f["state"]["extra"] = 1.into()),
            "unknown field",
        ),
        (
            "not JSON",
            b"{\"version\": 2,".to_vec(),
            "not a valid checkpoint",
        ),
        ("empty file", Vec::new(), "not a valid checkpoint"),
    ];
    for (name, bytes, message) in cases {
        let error = decode(&bytes).expect_err(name).to_string();
        assert!(error.contains(message), "{name}: {error}");
    }
}

#[test]
fn mismatch_names_expected_and_actual() {
    let mut file = json(&encode(&sample_state()).unwrap());
    file["checksum_v4"] = 12345.into();
    let error = decode(&serde_json::to_vec(&file).unwrap()).unwrap_err();
    let CheckpointError::ChecksumMismatch {
        part,
        expected,
        actual,
    } = error
    else {
        panic!("unexpected {error:?}");
    };
    assert_eq!((part, expected), (4, 12345));
    assert_eq!(actual, state_checksum(&sample_state()).unwrap());
}
