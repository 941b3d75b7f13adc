//! The memory brake on this node's kubepods tree: the rules of
//! [`crate::engine::memory_brake`] applied to `memory.high`, either of the kubepods cgroup
//! (every pod held together, a pod started meanwhile too) or of each pod's cgroup (each held
//! at its own usage, so a victim's freed memory is not taken by another pod), with the record
//! that lets the next start lift a brake an agent killed mid-eviction left behind. Failures
//! cost the brake, never the eviction: the grace projection stands in.
use std::{
    fs, io,
    path::{Path, PathBuf},
    time::Instant,
};

use crate::{
    checkpoint::{FileStore, Key, StoreError},
    engine::{
        memory_brake::{
            BrakeEntry, BrakeInputs, BrakeMove, BrakeRecord, LiftReason, brake_level, brake_move,
            still_ours,
        },
        memory_signals::{MemoryLimit, parse_memory_limit},
        units::bytes,
    },
};

/// The record's key in the checkpoint directory.
const RECORD_KEY: &str = "memory_brake";

/// Which `memory.high` a brake sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BrakeScope {
    /// The kubepods cgroup's.
    Kubepods,
    /// Each pod's.
    Pods,
}

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

impl BrakeError {
    /// The cgroup is gone (a pod removed meanwhile): nothing of it to hold or restore.
    fn is_gone(&self) -> bool {
        matches!(self, BrakeError::Cgroupfs { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// The brake on the kubepods tree, held or not.
pub(crate) struct KubepodsBrake {
    /// The memory hierarchy's mount and the kubepods cgroup below it.
    mount: PathBuf,
    rel: String,
    /// `None`: brakes are not set (cgroup v1, `--memory-brake off`, dry run); a record is
    /// lifted at start either way.
    scope: Option<BrakeScope>,
    store: FileStore,
    held: Option<Held>,
    /// A lift failed; logged once until one succeeds.
    lift_failing: bool,
}

struct Held {
    since_ns: u64,
    record: BrakeRecord,
}

/// What lifting found, cgroup by cgroup.
#[derive(Default)]
struct Undone {
    restored: usize,
    /// Changed by someone else since the brake: left as they are.
    changed: usize,
    /// Gone (a pod removed): nothing to restore.
    gone: usize,
    /// Could not be restored now: held on, tried again.
    failed: Vec<BrakeEntry>,
    error: Option<BrakeError>,
}

impl Undone {
    fn summary(&self) -> String {
        format!(
            "{} restored, {} changed by someone else meanwhile (left as they are), {} gone",
            self.restored, self.changed, self.gone
        )
    }
}

impl KubepodsBrake {
    pub(crate) fn new(
        mount: PathBuf,
        rel: &str,
        scope: Option<BrakeScope>,
        checkpoint_dir: &Path,
    ) -> Self {
        Self {
            mount,
            rel: rel.to_string(),
            scope,
            store: FileStore::at(checkpoint_dir),
            held: None,
            lift_failing: false,
        }
    }

    fn key() -> Key {
        // A constant that is a valid key.
        Key::new(RECORD_KEY).unwrap_or_else(|_| unreachable!("{RECORD_KEY} is a valid key"))
    }

    fn file(&self, cgroup: &str, name: &str) -> PathBuf {
        self.mount.join(cgroup.trim_start_matches('/')).join(name)
    }

    fn read(&self, cgroup: &str, name: &str) -> Result<String, BrakeError> {
        let path = self.file(cgroup, name);
        fs::read_to_string(&path).map_err(|source| BrakeError::Cgroupfs {
            action: "reading",
            path,
            source,
        })
    }

    fn read_limit(&self, cgroup: &str, name: &str) -> Result<MemoryLimit, BrakeError> {
        let text = self.read(cgroup, name)?;
        parse_memory_limit(&text).ok_or_else(|| BrakeError::Unparsable {
            path: self.file(cgroup, name),
            text,
        })
    }

    fn write_high(&self, cgroup: &str, value: &str) -> Result<(), BrakeError> {
        let path = self.file(cgroup, "memory.high");
        fs::write(&path, value).map_err(|source| BrakeError::Cgroupfs {
            action: "writing",
            path,
            source,
        })
    }

    /// Whether the brake holds now.
    pub(crate) fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// At start, before any decision: lifts a brake that an agent killed while holding it
    /// left behind, restoring the values it recorded, except where `memory.high` was changed
    /// since (then someone else owns it, and it is left as it is). A record that cannot be
    /// trusted is moved aside, never acted on.
    pub(crate) fn recover(&self) {
        let data = match self.store.read(&Self::key()) {
            Ok(data) => data,
            Err(StoreError::NotFound { .. }) => return,
            Err(e) => {
                tracing::error!(
                    "memory brake: {e}; memory.high under {} is left as it is",
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
                    "memory brake: {e}; memory.high under {} is left as it is (record moved \
                     aside: {aside:?})",
                    self.rel
                );
                return;
            }
        };
        let undone = self.undo(&record.entries);
        if let Some(e) = &undone.error {
            tracing::error!(
                "memory brake: lifting the brake a previous agent left: {e} ({}); tried again \
                 at the next start",
                undone.summary()
            );
            // The record on disk already names exactly these when nothing was lifted.
            if undone.failed.len() < record.entries.len() {
                self.rewrite(&undone.failed);
            }
            return;
        }
        tracing::warn!(
            "memory brake: a previous agent stopped while holding it; memory.high {}",
            describe(&record, &undone)
        );
        if let Err(e) = self.store.remove(&Self::key()) {
            tracing::error!("memory brake: {e}");
        }
    }

    /// Restores each recorded value where `memory.high` still holds the brake's.
    fn undo(&self, entries: &[BrakeEntry]) -> Undone {
        let mut undone = Undone::default();
        for entry in entries {
            let result = self.read(&entry.cgroup, "memory.high").and_then(|now| {
                if !still_ours(&now, entry) {
                    return Ok(false);
                }
                self.write_high(&entry.cgroup, entry.previous.trim())?;
                Ok(true)
            });
            match result {
                Ok(true) => undone.restored += 1,
                Ok(false) => undone.changed += 1,
                Err(e) if e.is_gone() => undone.gone += 1,
                Err(e) => {
                    undone.failed.push(entry.clone());
                    undone.error.get_or_insert(e);
                }
            }
        }
        undone
    }

    /// Keeps on disk only the entries still held after a partial lift.
    fn rewrite(&self, failed: &[BrakeEntry]) {
        let record = BrakeRecord {
            entries: failed.to_vec(),
        };
        if let Err(e) = self
            .store
            .write_for_this_boot(&Self::key(), &record.encode())
        {
            tracing::warn!("memory brake: {e}");
        }
    }

    /// Applies the engine's move after a decision step (or a quiet turn of the loop); `pods`
    /// names the pods' cgroups, asked only when a per-pod brake is set.
    pub(crate) fn step(&mut self, inputs: BrakeInputs, pods: impl FnOnce() -> Vec<String>) {
        let Some(scope) = self.scope else {
            return;
        };
        match brake_move(self.held.as_ref().map(|h| h.since_ns), inputs) {
            BrakeMove::Keep => {}
            BrakeMove::Engage => {
                let cgroups = match scope {
                    BrakeScope::Kubepods => vec![self.rel.clone()],
                    BrakeScope::Pods => pods(),
                };
                if let Err(e) = self.engage(scope, &cgroups, inputs.now_ns) {
                    tracing::warn!(
                        "memory brake not set: {e}; the victim's grace period follows the OOM \
                         projection"
                    );
                }
            }
            BrakeMove::Lift(reason) => self.lift(reason.as_str()),
        }
    }

    /// The brake's entry for one cgroup; `None` when a lower `memory.high` already holds it.
    fn entry(&self, cgroup: &str) -> Result<Option<(BrakeEntry, u64)>, BrakeError> {
        let previous = self.read(cgroup, "memory.high")?;
        let previous_limit =
            parse_memory_limit(&previous).ok_or_else(|| BrakeError::Unparsable {
                path: self.file(cgroup, "memory.high"),
                text: previous.clone(),
            })?;
        let limit = self.read_limit(cgroup, "memory.max")?;
        let usage = self.read(cgroup, "memory.current")?;
        let usage = usage
            .trim()
            .parse::<u64>()
            .map_err(|_| BrakeError::Unparsable {
                path: self.file(cgroup, "memory.current"),
                text: usage.clone(),
            })?;
        Ok(brake_level(usage, previous_limit, limit).map(|set| {
            let entry = BrakeEntry {
                cgroup: cgroup.to_string(),
                previous: previous.trim().to_string(),
                set,
            };
            (entry, usage)
        }))
    }

    fn engage(
        &mut self,
        scope: BrakeScope,
        cgroups: &[String],
        now_ns: u64,
    ) -> Result<(), BrakeError> {
        let started = Instant::now();
        let mut entries = Vec::new();
        let mut usage_total = 0u64;
        for cgroup in cgroups {
            match self.entry(cgroup) {
                Ok(Some((entry, usage))) => {
                    usage_total = usage_total.saturating_add(usage);
                    entries.push(entry);
                }
                Ok(None) => {}
                // A pod removed since the agent listed it holds nothing.
                Err(e) if scope == BrakeScope::Pods && e.is_gone() => {}
                Err(e) => return Err(e),
            }
        }
        if entries.is_empty() {
            tracing::info!(
                "memory brake not needed: a lower memory.high already holds {}",
                match scope {
                    BrakeScope::Kubepods => self.rel.clone(),
                    BrakeScope::Pods => format!("each of the {} pods", cgroups.len()),
                }
            );
            return Ok(());
        }
        let record = BrakeRecord { entries };
        // Recorded first: a crash before the writes leaves a record of a brake that was not
        // set, which the next start recognises (the value is not the brake's) and drops. Not
        // fsynced: memory.high dies with the node, so the record need only outlive the agent,
        // and SIGTERM waits behind it.
        self.store
            .write_for_this_boot(&Self::key(), &record.encode())?;
        let recorded = started.elapsed();
        for (written, entry) in record.entries.iter().enumerate() {
            match self.write_high(&entry.cgroup, &entry.set.to_string()) {
                Ok(()) => {}
                Err(e) if scope == BrakeScope::Pods && e.is_gone() => {}
                Err(e) => {
                    // All or nothing: what was set is undone, so no record is needed.
                    let undone = self.undo(&record.entries[..written]);
                    if undone.error.is_none()
                        && let Err(e) = self.store.remove(&Self::key())
                    {
                        tracing::warn!("memory brake: {e}");
                    }
                    return Err(e);
                }
            }
        }
        let took_us = started.elapsed().as_micros() as u64;
        let recorded_us = recorded.as_micros() as u64;
        if let (BrakeScope::Kubepods, [entry]) = (scope, record.entries.as_slice()) {
            tracing::info!(
                took_us,
                recorded_us,
                "memory brake on: memory.high of {} {} -> {} (usage {}), so the pods' growth \
                 is throttled while the victim drains",
                entry.cgroup,
                entry.previous,
                bytes(entry.set as i64),
                bytes(usage_total as i64)
            );
        } else {
            tracing::info!(
                took_us,
                recorded_us,
                "memory brake on: memory.high of {} pods at their usage plus 4Mi (together {}), \
                 so each pod's growth is throttled while the victim drains",
                record.entries.len(),
                bytes(usage_total as i64)
            );
        }
        self.held = Some(Held {
            since_ns: now_ns,
            record,
        });
        Ok(())
    }

    /// Lifts a held brake; what cannot be restored now stays held and is tried again at the
    /// next step.
    pub(crate) fn lift(&mut self, why: &str) {
        let Some(held) = &self.held else {
            return;
        };
        let undone = self.undo(&held.record.entries);
        if let Some(e) = &undone.error {
            if !self.lift_failing {
                tracing::error!(
                    "memory brake: lifting it ({why}): {e} ({}); tried again at each turn, \
                     and at the next start",
                    undone.summary()
                );
            }
            self.lift_failing = true;
            if undone.failed.len() < held.record.entries.len() {
                self.rewrite(&undone.failed);
            }
            if let Some(held) = &mut self.held {
                held.record.entries = undone.failed;
            }
            return;
        }
        if let Err(e) = self.store.remove(&Self::key()) {
            tracing::warn!("memory brake: {e}");
        }
        let text = describe(&held.record, &undone);
        if undone.changed > 0 {
            tracing::warn!("memory brake dropped ({why}): memory.high {text}");
        } else {
            tracing::info!("memory brake lifted ({why}): memory.high {text}");
        }
        self.held = None;
        self.lift_failing = false;
    }
}

/// What lifting did, as the log says it: the cgroup and its value for a single one.
fn describe(record: &BrakeRecord, undone: &Undone) -> String {
    match record.entries.as_slice() {
        [entry] if undone.restored == 1 => {
            format!("of {} back to {}", entry.cgroup, entry.previous.trim())
        }
        [entry] if undone.changed == 1 => format!(
            "of {} was changed by someone else meanwhile; left as it is",
            entry.cgroup
        ),
        [entry] => format!("of {}: the cgroup is gone", entry.cgroup),
        entries => format!("of {} cgroups: {}", entries.len(), undone.summary()),
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
            self.brake_on(Some(BrakeScope::Kubepods))
        }
        fn brake_on(&self, scope: Option<BrakeScope>) -> KubepodsBrake {
            KubepodsBrake::new(
                self.root.path().to_path_buf(),
                "kubepods",
                scope,
                &self.root.path().join("state"),
            )
        }
        /// A pod's cgroup below kubepods, with its three files.
        fn pod(&self, name: &str, high: &str, current: u64) -> String {
            let rel = format!("kubepods/{name}");
            let dir = self.root.path().join(&rel);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("memory.high"), format!("{high}\n")).unwrap();
            fs::write(dir.join("memory.current"), format!("{current}\n")).unwrap();
            fs::write(dir.join("memory.max"), "max\n").unwrap();
            rel
        }
        fn high_of(&self, rel: &str) -> String {
            fs::read_to_string(self.root.path().join(rel).join("memory.high"))
                .unwrap()
                .trim()
                .to_string()
        }
    }

    fn at(seconds: u64, hard_memory_eviction: bool, pressure: bool) -> BrakeInputs {
        BrakeInputs {
            hard_memory_eviction,
            pressure,
            now_ns: seconds * 1_000_000_000,
        }
    }

    /// No pod listed: the kubepods brake never asks.
    fn no_pods() -> Vec<String> {
        Vec::new()
    }

    #[test]
    fn engaged_at_the_eviction_held_under_pressure_lifted_when_recovered() {
        let fake = Fake::new("max", 800 * MIB, &(1024 * MIB).to_string());
        let mut brake = fake.brake();
        brake.step(at(1, true, true), no_pods);
        assert!(brake.is_held());
        assert_eq!(fake.high(), (804 * MIB).to_string());
        assert!(fake.record().exists(), "recorded before the brake is set");
        brake.step(at(2, false, true), no_pods);
        assert_eq!(
            fake.high(),
            (804 * MIB).to_string(),
            "held while under pressure"
        );
        brake.step(at(3, false, false), no_pods);
        assert!(!brake.is_held());
        assert_eq!(fake.high(), "max");
        assert!(!fake.record().exists());
    }

    #[test]
    fn a_brake_is_lifted_after_its_bound_and_when_the_agent_stops() {
        let fake = Fake::new("max", 800 * MIB, "max");
        let mut brake = fake.brake();
        brake.step(at(1, true, true), no_pods);
        brake.step(at(1 + HELD_AT_MOST.as_secs(), false, true), no_pods);
        assert_eq!(fake.high(), "max", "lifted after the bound");
        brake.step(at(100, true, true), no_pods);
        assert_ne!(fake.high(), "max");
        drop(brake);
        assert_eq!(fake.high(), "max", "lifted when the agent stops");
        assert!(!fake.record().exists());
    }

    #[test]
    fn a_kubelet_set_value_is_restored_exactly_and_never_raised() {
        let fake = Fake::new("943718400", 800 * MIB, "max");
        let mut brake = fake.brake();
        brake.step(at(1, true, true), no_pods);
        assert_eq!(fake.high(), (804 * MIB).to_string());
        brake.step(at(2, false, false), no_pods);
        assert_eq!(fake.high(), "943718400");

        let lower = Fake::new(&(802 * MIB).to_string(), 800 * MIB, "max");
        let mut brake = lower.brake();
        brake.step(at(1, true, true), no_pods);
        assert!(!brake.is_held(), "a lower memory.high already holds");
        assert_eq!(lower.high(), (802 * MIB).to_string());
    }

    #[test]
    fn a_brake_left_by_a_killed_agent_is_lifted_at_the_next_start() {
        let fake = Fake::new("943718400", 800 * MIB, "max");
        let mut brake = fake.brake();
        brake.step(at(1, true, true), no_pods);
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
        brake.step(at(1, true, true), no_pods);
        std::mem::forget(brake);
        fake.set("memory.high", "123456789");
        fake.brake().recover();
        assert_eq!(fake.high(), "123456789");
        assert!(!fake.record().exists(), "the record is done with");

        let mut brake = fake.brake();
        brake.step(at(1, true, true), no_pods);
        fake.set("memory.high", "555555555");
        brake.step(at(2, false, false), no_pods);
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
        brake.step(at(1, true, true), no_pods);
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
        brake.step(at(1, true, true), no_pods);
        assert!(!brake.is_held());
        assert_eq!(fake.high(), "max", "never set without its record");
    }

    #[test]
    fn a_disabled_brake_never_engages_but_still_recovers() {
        let fake = Fake::new("max", 800 * MIB, "max");
        let mut brake = fake.brake();
        brake.step(at(1, true, true), no_pods);
        std::mem::forget(brake);
        let mut off = fake.brake_on(None);
        off.recover();
        assert_eq!(fake.high(), "max");
        off.step(at(2, true, true), no_pods);
        assert!(!off.is_held());
    }

    #[test]
    fn a_per_pod_brake_holds_each_pod_at_its_usage_and_lifts_each() {
        let fake = Fake::new("max", 900 * MIB, "max");
        let grower = fake.pod("pod-a", "max", 500 * MIB);
        let kubelet_set = fake.pod("pod-b", "943718400", 300 * MIB);
        let already_lower = fake.pod("pod-c", &(100 * MIB).to_string(), 99 * MIB);
        let listed = vec![
            grower.clone(),
            kubelet_set.clone(),
            already_lower.clone(),
            "kubepods/pod-gone".to_string(),
        ];
        let mut brake = fake.brake_on(Some(BrakeScope::Pods));
        brake.step(at(1, true, true), || listed.clone());
        assert!(brake.is_held());
        assert_eq!(fake.high_of(&grower), (504 * MIB).to_string());
        assert_eq!(fake.high_of(&kubelet_set), (304 * MIB).to_string());
        assert_eq!(fake.high_of(&already_lower), (100 * MIB).to_string());
        assert_eq!(fake.high(), "max", "the kubepods cgroup is left alone");
        // The victim's pod goes meanwhile.
        fs::remove_dir_all(fake.root.path().join(&grower)).unwrap();
        brake.step(at(2, false, false), no_pods);
        assert!(!brake.is_held(), "a pod gone holds nothing");
        assert_eq!(fake.high_of(&kubelet_set), "943718400");
        assert!(!fake.record().exists());
    }

    #[test]
    fn a_per_pod_brake_left_by_a_killed_agent_is_lifted_pod_by_pod() {
        let fake = Fake::new("max", 900 * MIB, "max");
        let a = fake.pod("pod-a", "max", 500 * MIB);
        let b = fake.pod("pod-b", "943718400", 300 * MIB);
        let mut brake = fake.brake_on(Some(BrakeScope::Pods));
        brake.step(at(1, true, true), || vec![a.clone(), b.clone()]);
        std::mem::forget(brake);
        fs::write(fake.root.path().join(&a).join("memory.high"), "123456789\n").unwrap();
        fake.brake_on(None).recover();
        assert_eq!(
            fake.high_of(&a),
            "123456789",
            "changed since: left as it is"
        );
        assert_eq!(fake.high_of(&b), "943718400");
        assert!(!fake.record().exists());
    }

    #[test]
    fn a_pod_that_cannot_be_read_costs_the_whole_brake() {
        let fake = Fake::new("max", 900 * MIB, "max");
        let a = fake.pod("pod-a", "max", 500 * MIB);
        let b = fake.pod("pod-b", "max", 300 * MIB);
        // A directory where memory.high should be: not gone, unreadable.
        let high = fake.root.path().join(&b).join("memory.high");
        fs::remove_file(&high).unwrap();
        fs::create_dir(&high).unwrap();
        let mut brake = fake.brake_on(Some(BrakeScope::Pods));
        brake.step(at(1, true, true), || vec![a.clone(), b.clone()]);
        assert!(!brake.is_held());
        assert_eq!(fake.high_of(&a), "max", "all or nothing");
        assert!(!fake.record().exists());
    }
}
