//! Which pods a timed resync reads.
//!
//! With the kernel's stat records, a pod whose working set moved is known: its records say
//! so. A timed resync then reads only those pods (and the ones never read or whose last read
//! failed); every [`FULL_SWEEP_EVERY`]th resync reads every pod, the safety net for anything
//! the records cannot tell (a change still summed in the kernel below one step). Reads after
//! lost records, rescans and sources without stat records always read every pod.
use crate::engine::eviction_machine::ReadScope;

/// One timed resync in this many reads every pod.
pub(crate) const FULL_SWEEP_EVERY: u32 = 6;

/// Counts timed resyncs to choose each one's [`ReadScope`].
#[derive(Debug, Default)]
pub(crate) struct ResyncSchedule {
    since_full: u32,
    /// Set by a timed resync that may read changed pods only; taken by the read.
    pending: Option<ReadScope>,
    /// The kernel could not count some cgroups' changes (its map was full): their records
    /// are missing, so the next timed resync reads every pod.
    full_due: bool,
}

impl ResyncSchedule {
    /// A timed resync is starting; `records_tell_changes` when the source sends stat records.
    pub(crate) fn tick(&mut self, records_tell_changes: bool) {
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
    pub(crate) fn take_scope(&mut self, classify: bool) -> ReadScope {
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
    pub(crate) fn changes_uncounted(&mut self) {
        self.full_due = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_resyncs_read_changed_pods_with_a_full_sweep_every_few() {
        let mut schedule = ResyncSchedule::default();
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
        type Read = fn(&mut ResyncSchedule) -> ReadScope;
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
            let mut schedule = ResyncSchedule::default();
            assert_eq!(read(&mut schedule), ReadScope::All, "{name}");
        }
    }

    #[test]
    fn a_full_read_restarts_the_count() {
        let mut schedule = ResyncSchedule::default();
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
