//! What earlier reclaim steps gave (`--reclaim-first`): the pods whose cache came straight
//! back, left off the next ladder, and the counts the metrics export.
use std::{collections::BTreeMap, time::Duration};

use crate::{
    instant::MonoInstant,
    pod_facts::PodRef,
    reclaim_ladder::{Ladder, Over, StepResult},
};

/// The per-pod byte counts kept for the metrics: the pods reclaimed from most, so a node's
/// pod churn cannot grow them without bound.
const PODS_COUNTED: usize = 256;

/// What the ladders did since the agent started, for the metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReclaimTotals {
    /// Bytes taken from each pod (`namespace/name`), the [`PODS_COUNTED`] largest.
    pub bytes_by_pod: BTreeMap<String, u64>,
    /// Pressure episodes in which a ladder ran.
    pub ladders: u64,
    /// Episodes that ended with no eviction after their ladder took something.
    pub evictions_avoided: u64,
    /// Episodes in which the race came first (the ladder not begun).
    pub skipped_for_race: u64,
    /// Time the ladders ran, in all.
    pub ladder_time: Duration,
}

impl ReclaimTotals {
    /// A step took `taken` bytes from `pod`.
    pub fn took(&mut self, pod: &PodRef, taken: u64) {
        if taken == 0 {
            return;
        }
        *self.bytes_by_pod.entry(pod.to_string()).or_default() += taken;
        if self.bytes_by_pod.len() > PODS_COUNTED
            && let Some(least) = self
                .bytes_by_pod
                .iter()
                .min_by_key(|(_, taken)| **taken)
                .map(|(pod, _)| pod.clone())
        {
            self.bytes_by_pod.remove(&least);
        }
    }

    /// A pressure episode ended with `ladder` last moved at `last_moved`, an eviction in it
    /// or not; whether the ladder spared an eviction (it took something and none followed).
    pub fn episode_ended(
        &mut self,
        ladder: &Ladder,
        last_moved: MonoInstant,
        evicted: bool,
    ) -> bool {
        if ladder.over() == Some(Over::RaceFirst) {
            self.skipped_for_race += 1;
            return false;
        }
        self.ladders += 1;
        self.ladder_time += last_moved.saturating_since(ladder.started());
        let spared = !evicted && ladder.taken().0 > 0;
        if spared {
            self.evictions_avoided += 1;
        }
        spared
    }
}

/// The pods reclaimed from in earlier pressure episodes, to tell cache that comes straight
/// back: a pod whose refaults since its first remembered step exceed half of the cache its
/// steps freed is left off the next ladder (its cache is in use; a refault storm would
/// otherwise reclaim it at every episode and never evict), and its record dropped, so a later
/// ladder may try it again.
#[derive(Clone, Debug, Default)]
pub struct ReclaimHistory {
    given: BTreeMap<String, Given>,
}

#[derive(Clone, Copy, Debug)]
struct Given {
    freed: u64,
    /// The pod's refault counter (bytes) before its first remembered step.
    refaults_before: u64,
}

impl ReclaimHistory {
    /// A step on pod `uid` ended with `result`.
    pub fn gave(&mut self, uid: &str, result: &StepResult) {
        if result.taken == 0 && result.freed == 0 {
            return;
        }
        let given = self.given.entry(uid.to_string()).or_insert(Given {
            freed: 0,
            refaults_before: result.refaults_after.saturating_sub(result.refaulted),
        });
        given.freed = given.freed.saturating_add(result.freed);
        if self.given.len() > PODS_COUNTED
            && let Some(least) = self
                .given
                .iter()
                .min_by_key(|(_, g)| g.freed)
                .map(|(uid, _)| uid.clone())
        {
            self.given.remove(&least);
        }
    }

    /// Whether `uid` gave before (its refault counter is then worth reading).
    pub fn remembers(&self, uid: &str) -> bool {
        self.given.contains_key(uid)
    }

    /// Whether what `uid` gave came back: its refault counter now (bytes) is more than half
    /// of what its steps freed past the counter before its first step. Forgets the pod
    /// either way.
    pub fn came_back(&mut self, uid: &str, refaults_now: u64) -> bool {
        self.given.remove(uid).is_some_and(|given| {
            refaults_now
                .saturating_sub(given.refaults_before)
                .saturating_mul(2)
                > given.freed
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reclaim_ladder::{
        EPISODE_BUDGET,
        tests::{MI, at, done, pod},
    };

    #[test]
    fn the_totals_count_episodes_and_keep_the_largest_pods() {
        let mut totals = ReclaimTotals::default();
        let mut ladder = Ladder::new(vec![pod("a")], at(0), EPISODE_BUDGET);
        let step = ladder.next_step(at(0)).unwrap();
        ladder.record(&step, done(32 * MI, 0));
        totals.took(&step.pod, 32 * MI);
        assert!(
            totals.episode_ended(&ladder, at(40), false),
            "took, none evicted"
        );
        assert!(
            !totals.episode_ended(&ladder, at(40), true),
            "evicted after it"
        );
        let idle = Ladder::new(vec![pod("a")], at(0), EPISODE_BUDGET);
        assert!(!totals.episode_ended(&idle, at(0), false), "took nothing");
        assert!(!totals.episode_ended(&Ladder::skipped(at(0), EPISODE_BUDGET), at(0), false));
        assert_eq!(
            (
                totals.ladders,
                totals.evictions_avoided,
                totals.skipped_for_race
            ),
            (3, 1, 1)
        );
        assert_eq!(totals.ladder_time, Duration::from_millis(80));
        for i in 0..PODS_COUNTED as u64 + 10 {
            totals.took(&pod(&format!("p{i}")), (i + 1) * MI);
        }
        assert_eq!(totals.bytes_by_pod.len(), PODS_COUNTED);
        assert_eq!(totals.bytes_by_pod.get("default/a"), Some(&(32 * MI)));
        assert!(
            !totals.bytes_by_pod.contains_key("default/p0"),
            "the least dropped"
        );
    }

    #[test]
    fn a_pod_whose_cache_came_back_since_an_earlier_ladder_is_left_off_the_next() {
        // A step freeing `freed` of the `taken` with the refault counter at `after` (bytes),
        // `refaulted` of it in the step's own window.
        let step = |taken, freed, refaulted, after| StepResult {
            freed,
            refaults_after: after,
            ..done(taken, refaulted)
        };
        let mut history = ReclaimHistory::default();
        history.gave("idle", &step(64 * MI, 64 * MI, 0, 10 * MI));
        // Two steps of 32 MiB less working set, 16 MiB freed each; the counter was at 10 MiB
        // before the first, 2 MiB of which refaulted in its window.
        history.gave("hot", &step(32 * MI, 16 * MI, 2 * MI, 12 * MI));
        history.gave("hot", &step(32 * MI, 16 * MI, 0, 12 * MI));
        history.gave("nothing", &step(0, 0, 0, 50 * MI));
        assert!(
            !history.remembers("nothing"),
            "took nothing: nothing to come back"
        );
        assert!(history.remembers("idle") && history.remembers("hot"));
        assert!(
            !history.came_back("idle", 10 * MI + 32 * MI),
            "half of the 64 MiB freed: not more"
        );
        assert!(
            history.came_back("hot", 10 * MI + 16 * MI + 1),
            "over half of the 32 MiB freed, counted from before its first step"
        );
        assert!(!history.remembers("hot"), "forgotten once asked");
        assert!(
            !history.came_back("hot", u64::MAX),
            "a later ladder may try it again"
        );
    }
}
