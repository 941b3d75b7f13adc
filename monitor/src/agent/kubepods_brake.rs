//! The memory brake on this node's kubepods cgroup: the rules of
//! [`crate::engine::memory_brake`] applied to its `memory.high`, with the record that lets
//! the next start lift a brake an agent killed mid-eviction left behind. Failures cost the
//! brake, never the eviction: the grace projection stands in.
use std::{
    fs, io,
    path::{Path, PathBuf},
    time::Instant,
};

use crate::{
    checkpoint::{FileStore, Key, StoreError},
    engine::memory_brake::{
        BrakeInputs, BrakeMove, BrakeRecord, LiftReason, brake_level, brake_move, still_ours,
    },
    node::memory::{MemoryLimit, parse_memory_limit},
    units::bytes,
};

/// The record's key in the checkpoint directory.
const RECORD_KEY: &str = "memory_brake";

/// Why the brake could not be set or lifted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BrakeError {
    /// A cgroupfs file could not be read or written.
    #[error("{action} {}: {source}", path.display())]
    Cgroupfs {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// A cgroupfs file held something else than a memory value.
    #[error("{} holds {text:?}, not a memory value", path.display())]
    Unparsable { path: PathBuf, text: String },
    /// The record could not be stored; without it the brake is not set.
    #[error("recording the brake: {0}")]
    Record(#[from] StoreError),
}

/// The brake on the kubepods cgroup, held or not.
pub(super) struct KubepodsBrake {
    /// The kubepods cgroup's directory, relative name and whether brakes are set (cgroup v2
    /// and `--memory-brake on`); a record is lifted at start either way.
    dir: PathBuf,
    rel: String,
    enabled: bool,
    store: FileStore,
    held: Option<Held>,
    /// A lift failed; logged once until one succeeds.
    lift_failing: bool,
}

struct Held {
    since_ns: u64,
    record: BrakeRecord,
}

impl KubepodsBrake {
    pub(super) fn new(dir: PathBuf, rel: &str, enabled: bool, checkpoint_dir: &Path) -> Self {
        Self {
            dir,
            rel: rel.to_string(),
            enabled,
            store: FileStore::at(checkpoint_dir),
            held: None,
            lift_failing: false,
        }
    }

    fn key() -> Key {
        // A constant that is a valid key.
        Key::new(RECORD_KEY).unwrap_or_else(|_| unreachable!("{RECORD_KEY} is a valid key"))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> Result<String, BrakeError> {
        let path = self.file(name);
        fs::read_to_string(&path).map_err(|source| BrakeError::Cgroupfs {
            action: "reading",
            path,
            source,
        })
    }

    fn read_limit(&self, name: &str) -> Result<MemoryLimit, BrakeError> {
        let text = self.read(name)?;
        parse_memory_limit(&text).ok_or_else(|| BrakeError::Unparsable {
            path: self.file(name),
            text,
        })
    }

    fn write_high(&self, value: &str) -> Result<(), BrakeError> {
        let path = self.file("memory.high");
        fs::write(&path, value).map_err(|source| BrakeError::Cgroupfs {
            action: "writing",
            path,
            source,
        })
    }

    /// Whether the brake holds the kubepods cgroup now.
    pub(super) fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// At start, before any decision: lifts a brake that an agent killed while holding it
    /// left behind, restoring the value it recorded, unless `memory.high` was changed since
    /// (then someone else owns it, and it is left as it is). A record that cannot be trusted
    /// is moved aside, never acted on.
    pub(super) fn recover(&self) {
        let data = match self.store.read(&Self::key()) {
            Ok(data) => data,
            Err(StoreError::NotFound { .. }) => return,
            Err(e) => {
                tracing::error!(
                    "memory brake: {e}; memory.high of {} is left as it is",
                    self.rel
                );
                return;
            }
        };
        let record = match BrakeRecord::decode(&data, &self.rel) {
            Ok(record) => record,
            Err(e) => {
                let aside = self.store.move_aside(&Self::key(), "refused");
                tracing::error!(
                    "memory brake: {e}; memory.high of {} is left as it is (record moved \
                     aside: {aside:?})",
                    self.rel
                );
                return;
            }
        };
        match self.undo(&record) {
            Ok(true) => tracing::warn!(
                "memory brake: a previous agent stopped while holding it; memory.high of {} \
                 restored to {}",
                self.rel,
                record.previous.trim()
            ),
            Ok(false) => tracing::warn!(
                "memory brake: a previous agent stopped while holding it, but memory.high of \
                 {} was changed since; left as it is",
                self.rel
            ),
            Err(e) => {
                tracing::error!(
                    "memory brake: lifting the brake a previous agent left: {e}; tried again \
                     at the next start"
                );
                return;
            }
        }
        if let Err(e) = self.store.remove(&Self::key()) {
            tracing::error!("memory brake: {e}");
        }
    }

    /// Restores the recorded value if `memory.high` still holds the brake's; says whether
    /// it did.
    fn undo(&self, record: &BrakeRecord) -> Result<bool, BrakeError> {
        if !still_ours(&self.read("memory.high")?, record) {
            return Ok(false);
        }
        self.write_high(record.previous.trim())?;
        Ok(true)
    }

    /// Applies the engine's move after a decision step (or a quiet turn of the loop).
    pub(super) fn step(&mut self, inputs: BrakeInputs) {
        if !self.enabled {
            return;
        }
        match brake_move(self.held.as_ref().map(|h| h.since_ns), inputs) {
            BrakeMove::Keep => {}
            BrakeMove::Engage => match self.engage(inputs.now_ns) {
                Ok(()) => {}
                Err(e) => tracing::warn!(
                    "memory brake not set: {e}; the victim's grace period follows the OOM \
                     projection"
                ),
            },
            BrakeMove::Lift(reason) => self.lift(reason.as_str()),
        }
    }

    fn engage(&mut self, now_ns: u64) -> Result<(), BrakeError> {
        let started = Instant::now();
        let previous = self.read("memory.high")?;
        let previous_limit =
            parse_memory_limit(&previous).ok_or_else(|| BrakeError::Unparsable {
                path: self.file("memory.high"),
                text: previous.clone(),
            })?;
        let limit = self.read_limit("memory.max")?;
        let usage = self.read("memory.current")?;
        let usage = usage
            .trim()
            .parse::<u64>()
            .map_err(|_| BrakeError::Unparsable {
                path: self.file("memory.current"),
                text: usage.clone(),
            })?;
        let Some(level) = brake_level(usage, previous_limit, limit) else {
            tracing::info!(
                "memory brake not needed: memory.high of {} is already {} (usage {})",
                self.rel,
                previous.trim(),
                bytes(usage as i64)
            );
            return Ok(());
        };
        let record = BrakeRecord {
            cgroup: self.rel.clone(),
            previous: previous.trim().to_string(),
            set: level,
        };
        // Recorded first: a crash between the two writes leaves a record of a brake that was
        // not set, which the next start recognises (the value is not the brake's) and drops.
        self.store.write(&Self::key(), &record.encode())?;
        let recorded = started.elapsed();
        if let Err(e) = self.write_high(&level.to_string()) {
            if let Err(e) = self.store.remove(&Self::key()) {
                tracing::warn!("memory brake: {e}");
            }
            return Err(e);
        }
        tracing::info!(
            took_us = started.elapsed().as_micros() as u64,
            recorded_us = recorded.as_micros() as u64,
            "memory brake on: memory.high of {} {} -> {} (usage {}), so the pods' growth is \
             throttled while the victim drains",
            self.rel,
            record.previous,
            bytes(level as i64),
            bytes(usage as i64)
        );
        self.held = Some(Held {
            since_ns: now_ns,
            record,
        });
        Ok(())
    }

    /// Lifts a held brake; on failure it stays held and is tried again at the next step.
    pub(super) fn lift(&mut self, why: &str) {
        let Some(held) = &self.held else {
            return;
        };
        match self.undo(&held.record) {
            Ok(restored) => {
                if let Err(e) = self.store.remove(&Self::key()) {
                    tracing::warn!("memory brake: {e}");
                }
                if restored {
                    tracing::info!(
                        "memory brake lifted ({why}): memory.high of {} back to {}",
                        self.rel,
                        held.record.previous
                    );
                } else {
                    tracing::warn!(
                        "memory brake dropped ({why}): memory.high of {} was changed by \
                         someone else meanwhile; left as it is",
                        self.rel
                    );
                }
                self.held = None;
                self.lift_failing = false;
            }
            Err(e) => {
                if !self.lift_failing {
                    tracing::error!(
                        "memory brake: lifting it ({why}): {e}; tried again at each turn, and \
                         at the next start"
                    );
                }
                self.lift_failing = true;
            }
        }
    }
}

impl Drop for KubepodsBrake {
    /// The agent never leaves a brake behind when it stops, whichever way it returns.
    fn drop(&mut self) {
        self.lift(LiftReason::AgentStops.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::memory_brake::HELD_AT_MOST;

    const MIB: u64 = 1 << 20;

    /// A kubepods "cgroup" of regular files and a checkpoint directory.
    struct Fake {
        root: tempfile::TempDir,
    }

    impl Fake {
        fn new(high: &str, current: u64, max: &str) -> Self {
            let root = tempfile::tempdir().unwrap();
            fs::create_dir_all(root.path().join("kubepods")).unwrap();
            fs::create_dir_all(root.path().join("state")).unwrap();
            let fake = Self { root };
            fake.set("memory.high", high);
            fake.set("memory.current", &current.to_string());
            fake.set("memory.max", max);
            fake
        }
        fn set(&self, name: &str, value: &str) {
            fs::write(
                self.root.path().join("kubepods").join(name),
                format!("{value}\n"),
            )
            .unwrap();
        }
        fn high(&self) -> String {
            fs::read_to_string(self.root.path().join("kubepods/memory.high"))
                .unwrap()
                .trim()
                .to_string()
        }
        fn record(&self) -> PathBuf {
            self.root.path().join("state").join(RECORD_KEY)
        }
        fn brake(&self) -> KubepodsBrake {
            KubepodsBrake::new(
                self.root.path().join("kubepods"),
                "kubepods",
                true,
                &self.root.path().join("state"),
            )
        }
    }

    fn at(seconds: u64, hard_memory_eviction: bool, pressure: bool) -> BrakeInputs {
        BrakeInputs {
            hard_memory_eviction,
            pressure,
            now_ns: seconds * 1_000_000_000,
        }
    }

    #[test]
    fn engaged_at_the_eviction_held_under_pressure_lifted_when_recovered() {
        let fake = Fake::new("max", 800 * MIB, &(1024 * MIB).to_string());
        let mut brake = fake.brake();
        brake.step(at(1, true, true));
        assert!(brake.is_held());
        assert_eq!(fake.high(), (804 * MIB).to_string());
        assert!(fake.record().exists(), "recorded before the brake is set");
        brake.step(at(2, false, true));
        assert_eq!(
            fake.high(),
            (804 * MIB).to_string(),
            "held while under pressure"
        );
        brake.step(at(3, false, false));
        assert!(!brake.is_held());
        assert_eq!(fake.high(), "max");
        assert!(!fake.record().exists());
    }

    #[test]
    fn a_brake_is_lifted_after_its_bound_and_when_the_agent_stops() {
        let fake = Fake::new("max", 800 * MIB, "max");
        let mut brake = fake.brake();
        brake.step(at(1, true, true));
        brake.step(at(1 + HELD_AT_MOST.as_secs(), false, true));
        assert_eq!(fake.high(), "max", "lifted after the bound");
        brake.step(at(100, true, true));
        assert_ne!(fake.high(), "max");
        drop(brake);
        assert_eq!(fake.high(), "max", "lifted when the agent stops");
        assert!(!fake.record().exists());
    }

    #[test]
    fn a_kubelet_set_value_is_restored_exactly_and_never_raised() {
        let fake = Fake::new("943718400", 800 * MIB, "max");
        let mut brake = fake.brake();
        brake.step(at(1, true, true));
        assert_eq!(fake.high(), (804 * MIB).to_string());
        brake.step(at(2, false, false));
        assert_eq!(fake.high(), "943718400");

        let lower = Fake::new(&(802 * MIB).to_string(), 800 * MIB, "max");
        let mut brake = lower.brake();
        brake.step(at(1, true, true));
        assert!(!brake.is_held(), "a lower memory.high already holds");
        assert_eq!(lower.high(), (802 * MIB).to_string());
    }

    #[test]
    fn a_brake_left_by_a_killed_agent_is_lifted_at_the_next_start() {
        let fake = Fake::new("943718400", 800 * MIB, "max");
        let mut brake = fake.brake();
        brake.step(at(1, true, true));
        // Killed: no drop, no lift.
        std::mem::forget(brake);
        assert_eq!(fake.high(), (804 * MIB).to_string());
        fake.brake().recover();
        assert_eq!(fake.high(), "943718400");
        assert!(!fake.record().exists());
    }

    #[test]
    fn a_value_changed_since_the_brake_is_left_alone() {
        let fake = Fake::new("max", 800 * MIB, "max");
        let mut brake = fake.brake();
        brake.step(at(1, true, true));
        std::mem::forget(brake);
        fake.set("memory.high", "123456789");
        fake.brake().recover();
        assert_eq!(fake.high(), "123456789");
        assert!(!fake.record().exists(), "the record is done with");

        let mut brake = fake.brake();
        brake.step(at(1, true, true));
        fake.set("memory.high", "555555555");
        brake.step(at(2, false, false));
        assert!(!brake.is_held());
        assert_eq!(fake.high(), "555555555");
    }

    #[test]
    fn a_record_that_cannot_be_trusted_is_moved_aside_and_nothing_is_written() {
        let fake = Fake::new("4096", 800 * MIB, "max");
        fs::write(
            fake.record(),
            br#"{"cgroup":"kubepods","previous":"-1","set":4096}"#,
        )
        .unwrap();
        fake.brake().recover();
        assert_eq!(fake.high(), "4096");
        assert!(!fake.record().exists());
        assert!(fake.root.path().join("state/memory_brake.refused").exists());
    }

    #[test]
    fn a_refused_write_costs_the_brake_and_leaves_no_record() {
        let fake = Fake::new("max", 800 * MIB, "max");
        // A directory where memory.high should be: the write fails.
        let high = fake.root.path().join("kubepods/memory.high");
        fs::remove_file(&high).unwrap();
        fs::create_dir(&high).unwrap();
        let mut brake = fake.brake();
        brake.step(at(1, true, true));
        assert!(!brake.is_held());
        assert!(!fake.record().exists());
    }

    #[test]
    fn an_unwritable_record_means_no_brake() {
        let fake = Fake::new("max", 800 * MIB, "max");
        let state = fake.root.path().join("state");
        fs::remove_dir(&state).unwrap();
        fs::write(&state, "not a directory").unwrap();
        let mut brake = fake.brake();
        brake.step(at(1, true, true));
        assert!(!brake.is_held());
        assert_eq!(fake.high(), "max", "never set without its record");
    }

    #[test]
    fn a_disabled_brake_never_engages_but_still_recovers() {
        let fake = Fake::new("max", 800 * MIB, "max");
        let mut brake = fake.brake();
        brake.step(at(1, true, true));
        std::mem::forget(brake);
        let mut off = KubepodsBrake::new(
            fake.root.path().join("kubepods"),
            "kubepods",
            false,
            &fake.root.path().join("state"),
        );
        off.recover();
        assert_eq!(fake.high(), "max");
        off.step(at(2, true, true));
        assert!(!off.is_held());
    }
}
