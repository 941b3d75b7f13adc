//! Property tests of the checkpoint decoder: no input makes it panic, and every state survives
//! an encode/decode round trip.
use std::collections::BTreeMap;

use monitor::engine::checkpoint::{
    AgentState, AgentStateV1, BootMarks, ConditionTransition, Counters, EvictionRecord, Memory,
    Mode, PendingEviction, SavedPod, decode, encode,
};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    // Beyond ASCII and with characters JSON must escape.
    "[a-zA-Z0-9._/\"\\\\ é\u{1F600}-]{0,24}"
}

fn map_of<T: std::fmt::Debug>(
    value: impl Strategy<Value = T>,
) -> impl Strategy<Value = BTreeMap<String, T>> {
    prop::collection::btree_map(name(), value, 0..4)
}

fn eviction() -> impl Strategy<Value = EvictionRecord> {
    (name(), name(), name(), any::<u64>(), name(), any::<u64>()).prop_map(
        |(namespace, name, uid, evicted_at_unix_ms, signal, bytes_freed)| EvictionRecord {
            pod: SavedPod {
                namespace,
                name,
                uid,
            },
            evicted_at_unix_ms,
            signal,
            bytes_freed,
        },
    )
}

fn agent_state() -> impl Strategy<Value = AgentState> {
    let mode = prop::option::of(prop_oneof![Just(Mode::Acting), Just(Mode::DryRun)]);
    (memory(), memory(), mode).prop_map(|(acting, dry_run, written_by)| AgentState {
        acting,
        dry_run,
        written_by,
    })
}

fn memory() -> impl Strategy<Value = Memory> {
    let conditions = map_of(
        (name(), any::<u64>()).prop_map(|(status, at)| ConditionTransition {
            status,
            last_transition_unix_ms: at,
        }),
    );
    let counters = (map_of(any::<u64>()), any::<u64>(), any::<u64>()).prop_map(
        |(evictions_by_signal, events_received, events_lost)| Counters {
            evictions_by_signal,
            events_received,
            events_lost,
        },
    );
    let v1 = (
        map_of(any::<u64>()),
        conditions,
        prop::option::of(eviction()),
        prop::option::of(eviction()),
        prop::collection::vec(eviction(), 0..5),
        counters,
    )
        .prop_map(
            |(soft, node_conditions, last_eviction, awaiting_cleanup, recent, counters)| {
                AgentStateV1 {
                    soft_threshold_first_observed_unix_ms: soft,
                    node_conditions,
                    last_eviction,
                    awaiting_cleanup,
                    recent_evictions: recent,
                    counters,
                }
            },
        );
    let boot = prop::option::of(
        (name(), map_of(any::<u64>()), prop::option::of(any::<u64>())).prop_map(
            |(boot_id, soft, last_eviction_ms)| BootMarks {
                boot_id,
                soft_threshold_first_observed_ms: soft,
                last_eviction_ms,
            },
        ),
    );
    let pending = prop::option::of((name(), any::<i64>()).prop_map(
        |(uid, grace_period_seconds)| PendingEviction {
            uid,
            grace_period_seconds,
        },
    ));
    (v1, boot, pending).prop_map(|(v1, boot, pending)| Memory { v1, boot, pending })
}

proptest! {
    // A failing case is printed minimised; integration tests have no lib.rs to persist it next to.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes);
    }

    /// Random bytes are rarely JSON; edits of a real checkpoint reach deeper into the decoder.
    #[test]
    fn edited_checkpoints_never_panic_nor_change_content(
        state in agent_state(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode(&state).unwrap();
        for (index, value) in edits {
            let position = index.index(bytes.len());
            bytes[position] = value;
        }
        if let Ok(decoded) = decode(&bytes) {
            prop_assert_eq!(decoded.state, state);
        }
    }

    #[test]
    fn every_state_round_trips(state in agent_state()) {
        let decoded = decode(&encode(&state).unwrap()).unwrap();
        prop_assert_eq!(decoded.state, state);
    }
}
