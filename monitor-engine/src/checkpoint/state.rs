//! What the agent keeps across restarts, as plain data.
//!
//! Nothing here refers to the eviction engine's types: signals and node conditions are named by
//! their strings, times are wall-clock unix milliseconds. [`AgentStateV1`] is the version-1
//! schema and is frozen, because a version-1 agent that was rolled back to must still verify it.
//! Version 2 adds [`BootMarks`], readings of the boot-time clock that let a restarted agent
//! measure elapsed time even if the wall clock was stepped while it was down. Version 3 adds
//! [`PendingEviction`], the grace period of the eviction in progress, so a restarted agent
//! finishes it on its original deadline. Those three make one agent's [`Memory`]. Version 4
//! keeps one memory per [`Mode`]: what acting agents did stays in the parts every older agent
//! reads, a dry run's decisions go into a part of their own, and the file says which mode
//! wrote it ([`AgentState`]), so no dry-run decision is ever carried out, by this agent or an
//! older one after a rollback.
//!
//! Mutate through the methods on [`Memory`]: they keep the boot marks in step with the
//! wall-clock fields they shadow.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The most recent evictions kept in [`AgentStateV1::recent_evictions`]; older ones are dropped.
pub const MAX_RECENT_EVICTIONS: usize = 64;

/// The agent's persisted state, current version (4): one memory per mode.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentState {
    /// What acting agents decided and did, kept in the version 1-3 parts, the only ones an
    /// older agent reads: after a rollback it finds there nothing a dry run decided.
    pub acting: Memory,
    /// Version 4: a dry-run agent's own decisions, which no acting agent carries out.
    pub dry_run: Memory,
    /// Version 4: the mode of the agent that wrote the file. `None` for a file written before
    /// version 4, which does not say: its memory (in `acting`, where those versions kept it)
    /// may be a dry run's, so [`super::handover`] treats it as one.
    pub written_by: Option<Mode>,
}

/// How an agent runs: only an acting agent's decisions are carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// It evicts (`monitor` without `--dry-run`).
    Acting,
    /// It decides and signals nothing (`--dry-run`).
    DryRun,
}

impl Mode {
    /// The mode `--dry-run` asks for.
    pub fn from_dry_run(dry_run: bool) -> Self {
        if dry_run { Self::DryRun } else { Self::Acting }
    }

    /// In words, for logs.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Acting => "an acting agent",
            Self::DryRun => "a dry run",
        }
    }
}

impl AgentState {
    /// The memory of the agent in `mode`.
    pub fn memory(&self, mode: Mode) -> &Memory {
        match mode {
            Mode::Acting => &self.acting,
            Mode::DryRun => &self.dry_run,
        }
    }

    /// The memory of the agent in `mode`, to change.
    pub fn memory_mut(&mut self, mode: Mode) -> &mut Memory {
        match mode {
            Mode::Acting => &mut self.acting,
            Mode::DryRun => &mut self.dry_run,
        }
    }
}

/// What an agent in one mode remembers across restarts: the whole state up to version 3.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// The version-1 fields, which are all a version-1 agent reads.
    pub v1: AgentStateV1,
    /// Boot-clock readings for the timers whose continuity matters; `None` after migrating a
    /// version-1 file.
    pub boot: Option<BootMarks>,
    /// Version 3: the eviction in progress, while `v1.awaiting_cleanup` names its pod.
    pub pending: Option<PendingEviction>,
}

/// The eviction whose pod is being stopped: what a restarted agent needs to finish it on the
/// original deadline (the decision instant is `v1.awaiting_cleanup`'s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingEviction {
    /// The pod's uid, as in `v1.awaiting_cleanup`.
    pub uid: String,
    /// The grace period the pod was given; force comes this long after the decision.
    pub grace_period_seconds: i64,
}

/// The version-1 schema. Frozen: adding, renaming or retyping a field changes its checksum and
/// breaks rollback; extend [`AgentState`] instead.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentStateV1 {
    /// Signal name (e.g. `memory.available`) -> when its soft threshold was first seen crossed.
    pub soft_threshold_first_observed_unix_ms: BTreeMap<String, u64>,
    /// Node condition type (e.g. `MemoryPressure`) -> its latest transition.
    pub node_conditions: BTreeMap<String, ConditionTransition>,
    /// The most recent eviction, kept even after its cleanup finished.
    pub last_eviction: Option<EvictionRecord>,
    /// An eviction whose pod has not been cleaned up yet.
    pub awaiting_cleanup: Option<EvictionRecord>,
    /// Recent evictions, oldest first, at most [`MAX_RECENT_EVICTIONS`].
    pub recent_evictions: Vec<EvictionRecord>,
    /// Running totals since the state was created.
    pub counters: Counters,
}

/// The latest transition of one node condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionTransition {
    /// `True`, `False` or `Unknown`, as in the Kubernetes API.
    pub status: String,
    pub last_transition_unix_ms: u64,
}

/// One pod the agent evicted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvictionRecord {
    pub pod: SavedPod,
    pub evicted_at_unix_ms: u64,
    /// The signal whose threshold triggered the eviction.
    pub signal: String,
    /// Memory the pod was using when it was evicted.
    pub bytes_freed: u64,
}

/// A pod as the checkpoint saves it; the uid tells a recreated pod from the evicted one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Running totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    pub evictions_by_signal: BTreeMap<String, u64>,
    /// Kernel events received from the ring buffer.
    pub events_received: u64,
    /// Kernel events the ring buffer dropped because it was full.
    pub events_lost: u64,
}

/// Boot-time clock (`CLOCK_BOOTTIME`) readings, meaningful only while the kernel's boot id is
/// `boot_id`. Unlike the wall clock the boot-time clock never steps, and it keeps counting
/// during suspend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootMarks {
    pub boot_id: String,
    /// Signal name -> boot-clock milliseconds when its soft threshold was first seen crossed.
    pub soft_threshold_first_observed_ms: BTreeMap<String, u64>,
    /// Boot-clock milliseconds of the last eviction.
    pub last_eviction_ms: Option<u64>,
}

/// Both clocks read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Now {
    pub unix_ms: u64,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// `CLOCK_BOOTTIME` in milliseconds.
    pub boot_ms: u64,
}

impl Memory {
    /// Records that `signal` is past its soft threshold; keeps the first observation if the
    /// timer is already running.
    pub(crate) fn observe_soft_threshold(&mut self, signal: &str, now: &Now) {
        if self
            .v1
            .soft_threshold_first_observed_unix_ms
            .contains_key(signal)
        {
            return;
        }
        self.v1
            .soft_threshold_first_observed_unix_ms
            .insert(signal.to_owned(), now.unix_ms);
        self.boot_marks(now)
            .soft_threshold_first_observed_ms
            .insert(signal.to_owned(), now.boot_ms);
    }

    /// Records that `signal` is back under its soft threshold, which stops its grace timer.
    pub(crate) fn clear_soft_threshold(&mut self, signal: &str) {
        self.v1.soft_threshold_first_observed_unix_ms.remove(signal);
        if let Some(boot) = &mut self.boot {
            boot.soft_threshold_first_observed_ms.remove(signal);
        }
    }

    /// Stops every soft-threshold timer: they start again when the agent sees the thresholds
    /// met.
    pub(crate) fn forget_soft_thresholds(&mut self) {
        self.v1.soft_threshold_first_observed_unix_ms.clear();
        if let Some(boot) = &mut self.boot {
            boot.soft_threshold_first_observed_ms.clear();
        }
    }

    /// Sets a node condition's status, moving its transition time only when the status changes.
    pub(crate) fn set_condition(&mut self, condition: &str, status: &str, now: &Now) {
        let unchanged = self
            .v1
            .node_conditions
            .get(condition)
            .is_some_and(|current| current.status == status);
        if !unchanged {
            self.v1.node_conditions.insert(
                condition.to_owned(),
                ConditionTransition {
                    status: status.to_owned(),
                    last_transition_unix_ms: now.unix_ms,
                },
            );
        }
    }

    /// Records an eviction: it becomes the last one and the one awaiting cleanup, joins the
    /// bounded history and is counted under its signal. Its grace period is unknown until
    /// [`Self::record_grace_period`].
    pub fn record_eviction(&mut self, pod: SavedPod, signal: &str, bytes_freed: u64, now: &Now) {
        self.pending = None;
        let record = EvictionRecord {
            pod,
            evicted_at_unix_ms: now.unix_ms,
            signal: signal.to_owned(),
            bytes_freed,
        };
        let v1 = &mut self.v1;
        *v1.counters
            .evictions_by_signal
            .entry(signal.to_owned())
            .or_default() += 1;
        v1.recent_evictions.push(record.clone());
        let excess = v1
            .recent_evictions
            .len()
            .saturating_sub(MAX_RECENT_EVICTIONS);
        v1.recent_evictions.drain(..excess);
        v1.awaiting_cleanup = Some(record.clone());
        v1.last_eviction = Some(record);
        self.boot_marks(now).last_eviction_ms = Some(now.boot_ms);
    }

    /// Records the grace period given to the pod awaiting cleanup.
    pub fn record_grace_period(&mut self, grace_period_seconds: i64) {
        self.pending = self
            .v1
            .awaiting_cleanup
            .as_ref()
            .map(|awaiting| PendingEviction {
                uid: awaiting.pod.uid.clone(),
                grace_period_seconds,
            });
    }

    /// Records that the evicted pod is gone.
    pub(crate) fn finish_cleanup(&mut self) {
        self.v1.awaiting_cleanup = None;
        self.pending = None;
    }

    /// The grace period of the eviction awaiting cleanup, when this file recorded it.
    pub fn pending_grace_period_seconds(&self) -> Option<i64> {
        let awaiting = self.v1.awaiting_cleanup.as_ref()?;
        self.pending
            .as_ref()
            .filter(|p| p.uid == awaiting.pod.uid)
            .map(|p| p.grace_period_seconds)
    }

    /// Adds a batch of ring-buffer events to the counters.
    pub fn count_events(&mut self, received: u64, lost: u64) {
        let counters = &mut self.v1.counters;
        counters.events_received = counters.events_received.saturating_add(received);
        counters.events_lost = counters.events_lost.saturating_add(lost);
    }

    /// The boot marks for the current boot; marks from an earlier boot are meaningless and are
    /// dropped, which leaves the timers they described on the wall clock.
    fn boot_marks(&mut self, now: &Now) -> &mut BootMarks {
        let stale = self.boot.as_ref().is_some_and(|b| b.boot_id != now.boot_id);
        if stale {
            self.boot = None;
        }
        self.boot.get_or_insert_with(|| BootMarks {
            boot_id: now.boot_id.clone(),
            soft_threshold_first_observed_ms: BTreeMap::new(),
            last_eviction_ms: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(unix_ms: u64, boot_id: &str, boot_ms: u64) -> Now {
        Now {
            unix_ms,
            boot_id: boot_id.to_owned(),
            boot_ms,
        }
    }

    fn pod(name: &str) -> SavedPod {
        SavedPod {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    #[test]
    fn soft_threshold_keeps_its_first_observation() {
        let mut state = Memory::default();
        state.observe_soft_threshold("memory.available", &now(1_000, "b1", 10));
        state.observe_soft_threshold("memory.available", &now(5_000, "b1", 50));
        assert_eq!(
            state.v1.soft_threshold_first_observed_unix_ms["memory.available"],
            1_000
        );
        let boot = state.boot.as_ref().unwrap();
        assert_eq!(
            boot.soft_threshold_first_observed_ms["memory.available"],
            10
        );

        state.clear_soft_threshold("memory.available");
        assert!(state.v1.soft_threshold_first_observed_unix_ms.is_empty());
        assert!(
            state
                .boot
                .unwrap()
                .soft_threshold_first_observed_ms
                .is_empty()
        );
    }

    #[test]
    fn marks_from_an_earlier_boot_are_dropped() {
        let mut state = Memory::default();
        state.observe_soft_threshold("memory.available", &now(1_000, "old", 10));
        state.observe_soft_threshold("nodefs.available", &now(2_000, "new", 20));
        let boot = state.boot.unwrap();
        assert_eq!(boot.boot_id, "new");
        assert_eq!(
            boot.soft_threshold_first_observed_ms
                .keys()
                .collect::<Vec<_>>(),
            ["nodefs.available"]
        );
    }

    #[test]
    fn condition_transition_time_moves_only_on_a_status_change() {
        let mut state = Memory::default();
        state.set_condition("MemoryPressure", "True", &now(1_000, "b", 1));
        state.set_condition("MemoryPressure", "True", &now(2_000, "b", 2));
        assert_eq!(
            state.v1.node_conditions["MemoryPressure"].last_transition_unix_ms,
            1_000
        );
        state.set_condition("MemoryPressure", "False", &now(3_000, "b", 3));
        assert_eq!(
            state.v1.node_conditions["MemoryPressure"].last_transition_unix_ms,
            3_000
        );
    }

    #[test]
    fn eviction_history_is_bounded_and_drops_the_oldest() {
        let mut state = Memory::default();
        let total = MAX_RECENT_EVICTIONS as u64 + 3;
        for i in 0..total {
            state.record_eviction(
                pod(&format!("p{i}")),
                "memory.available",
                i,
                &now(i, "b", i),
            );
        }
        let history = &state.v1.recent_evictions;
        assert_eq!(history.len(), MAX_RECENT_EVICTIONS);
        assert_eq!(history[0].pod.name, "p3");
        assert_eq!(history.last().unwrap().pod.name, format!("p{}", total - 1));
        assert_eq!(
            state.v1.counters.evictions_by_signal["memory.available"],
            total
        );
        assert_eq!(state.v1.last_eviction, state.v1.awaiting_cleanup);
        assert_eq!(
            state.pending_grace_period_seconds(),
            None,
            "not recorded yet"
        );
        state.record_grace_period(30);
        assert_eq!(state.pending_grace_period_seconds(), Some(30));
        state.finish_cleanup();
        assert!(state.v1.awaiting_cleanup.is_none());
        assert_eq!(state.pending, None);
        assert!(state.v1.last_eviction.is_some());
    }
}
