//! Which pods a timed resync reads, and how fast.
//!
//! With the kernel's stat records, a pod whose working set moved is known: its records say
//! so. A timed resync then reads only those pods (and the ones never read or whose last read
//! failed); every [`FULL_SWEEP_EVERY`]th resync reads every pod, the safety net for anything
//! the records cannot tell (a change still summed in the kernel below one step). Reads after
//! lost records, rescans and sources without stat records always read every pod.
//!
//! With the stat records keeping every working set current, a timed resync is a safety net
//! that no decision waits for, so its pods are read [`CHUNK_PODS`] at a time between the
//! loop's other inputs rather than in one go: read at once, every pod of 10,000 held the
//! loop for 0.4 s of CPU (4 s under the DaemonSet's 100m CPU limit), and a crossing in that
//! time waited for the read's end.
use std::time::Duration;

use crate::eviction_machine::ReadScope;

/// One timed resync in this many reads every pod.
pub(crate) const FULL_SWEEP_EVERY: u32 = 6;

/// How many resyncs pass between sweeps of the kernel's per-cgroup map (a full hierarchy
/// walk, so not at every resync).
const SWEEP_EVERY_RESYNCS: u32 = 6;

/// Counts timed resyncs to choose each one's [`ReadScope`] and when the kernel's map is swept.
#[derive(Debug, Default)]
pub struct ResyncCadence {
    since_full: u32,
    /// Resyncs since the kernel's per-cgroup map was last swept of removed cgroups.
    since_sweep: u32,
    /// Set by a timed resync that may read changed pods only; taken by the read.
    pending: Option<ReadScope>,
    /// The kernel could not count some cgroups' changes (its map was full): their records
    /// are missing, so the next timed resync reads every pod.
    full_due: bool,
}

/// Pods a paced read takes in one turn of the loop: about a millisecond of CPU (a pod's
/// cgroupfs read costs 30-60 µs), the longest a kernel record waits behind it.
pub const CHUNK_PODS: usize = 32;

/// Directories the kernel map's sweep reads in one turn of the loop: about a millisecond of
/// CPU, as [`CHUNK_PODS`].
pub const CHUNK_DIRS: usize = 64;

/// A paced read uses at most one part in this many of a CPU: each chunk is followed by a
/// pause of this many times its CPU time, less the chunk's own. Under a 100m CPU limit that
/// leaves three quarters of the quota to records and decisions; every pod of 10,000 is read
/// in about 16 s, within the minute between full reads.
pub(crate) const CPU_SHARE_DIVISOR: u32 = 40;

/// The shortest pause between chunks, so a read that costs next to nothing still lets the
/// loop's other inputs through.
const MIN_PAUSE: Duration = Duration::from_millis(2);

/// The pause after a chunk that took `cpu`: the read's share of a CPU stays at most
/// 1/[`CPU_SHARE_DIVISOR`].
pub fn pause_after(cpu: Duration) -> Duration {
    (cpu * (CPU_SHARE_DIVISOR - 1)).max(MIN_PAUSE)
}

impl ResyncCadence {
    /// Counts a resync toward the kernel map's next sweep: whether one is due. It stays due
    /// until [`Self::sweep_started`].
    pub fn sweep_due(&mut self) -> bool {
        self.since_sweep += 1;
        self.since_sweep >= SWEEP_EVERY_RESYNCS
    }

    pub fn sweep_started(&mut self) {
        self.since_sweep = 0;
    }

    /// A timed resync is starting; `records_tell_changes` when the source sends stat records.
    pub fn tick(&mut self, records_tell_changes: bool) {
        self.since_full += 1;
        let full = !records_tell_changes || self.full_due || self.since_full >= FULL_SWEEP_EVERY;
        self.pending = Some(if full {
            ReadScope::All
        } else {
            ReadScope::Changed
        });
    }

    /// The scope of the read about to happen: a read that rescans, or any read but a timed
    /// resync's, reads every pod.
    pub fn take_scope(&mut self, classify: bool) -> ReadScope {
        let scope = match self.pending.take() {
            Some(ReadScope::Changed) if !classify => ReadScope::Changed,
            _ => ReadScope::All,
        };
        if scope == ReadScope::All {
            self.since_full = 0;
            self.full_due = false;
        }
        scope
    }

    /// Some changes were not counted by the kernel: the next timed resync reads every pod.
    pub fn changes_uncounted(&mut self) {
        self.full_due = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_map_is_swept_every_few_resyncs_and_stays_due_until_a_sweep_starts() {
        let mut schedule = ResyncCadence::default();
        let due: Vec<bool> = (0..SWEEP_EVERY_RESYNCS)
            .map(|_| schedule.sweep_due())
            .collect();
        assert_eq!(due.iter().filter(|d| **d).count(), 1);
        assert!(due[SWEEP_EVERY_RESYNCS as usize - 1]);
        // No paced read to walk beside: the sweep waits for the next resync.
        assert!(schedule.sweep_due());
        schedule.sweep_started();
        assert!(!schedule.sweep_due());
    }

    #[test]
    fn timed_resyncs_read_changed_pods_with_a_full_sweep_every_few() {
        let mut schedule = ResyncCadence::default();
        let scopes: Vec<ReadScope> = (0..2 * FULL_SWEEP_EVERY)
            .map(|_| {
                schedule.tick(true);
                schedule.take_scope(false)
            })
            .collect();
        let full: Vec<usize> = scopes
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == ReadScope::All)
            .map(|(i, _)| i + 1)
            .collect();
        assert_eq!(
            full,
            [FULL_SWEEP_EVERY as usize, 2 * FULL_SWEEP_EVERY as usize]
        );
    }

    #[test]
    fn every_other_read_is_full() {
        type Read = fn(&mut ResyncCadence) -> ReadScope;
        let cases: [(&str, Read); 4] = [
            ("a read not on the timer", |s| s.take_scope(false)),
            ("a source without stat records", |s| {
                s.tick(false);
                s.take_scope(false)
            }),
            ("a timed resync that rescans", |s| {
                s.tick(true);
                s.take_scope(true)
            }),
            ("after uncounted changes", |s| {
                s.changes_uncounted();
                s.tick(true);
                s.take_scope(false)
            }),
        ];
        for (name, read) in cases {
            let mut schedule = ResyncCadence::default();
            assert_eq!(read(&mut schedule), ReadScope::All, "{name}");
        }
    }

    #[test]
    fn a_paced_read_keeps_its_share_of_a_cpu() {
        let ms = Duration::from_millis;
        assert_eq!(pause_after(ms(1)), ms(39), "1 ms of CPU in 40 ms");
        assert_eq!(pause_after(Duration::ZERO), MIN_PAUSE);
    }

    #[test]
    fn a_full_read_restarts_the_count() {
        let mut schedule = ResyncCadence::default();
        for _ in 0..FULL_SWEEP_EVERY - 1 {
            schedule.tick(true);
            schedule.take_scope(false);
        }
        // Lost records: a rescan between the timed resyncs reads everything.
        schedule.take_scope(true);
        schedule.tick(true);
        assert_eq!(schedule.take_scope(false), ReadScope::Changed);
    }
}
