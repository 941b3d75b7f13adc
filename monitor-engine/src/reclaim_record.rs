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
/// back: a pod is left off the next ladder when its refaults since its first remembered step
/// exceed half of the cache its steps freed, or its working set grew back by more than half of
/// what its steps took (a page reclaim only deactivated comes back by a mere reference,
/// without a refault). Its cache is in use, and a refault storm would otherwise be reclaimed
/// at every episode and never evicted. Its record is dropped either way, so a later ladder
/// may try it again.
#[derive(Clone, Debug, Default)]
pub struct ReclaimHistory {
    given: BTreeMap<String, Given>,
}

#[derive(Clone, Copy, Debug)]
struct Given {
    taken: u64,
    freed: u64,
    /// The pod's refault counter (bytes) before its first remembered step.
    refaults_before: u64,
    /// Its working set after its last step.
    working_set_after: u64,
}

/// A pod's counters read when a new ladder begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodNow {
    /// `workingset_refault_file`, in bytes.
    pub refaults: u64,
    /// The kubelet's working set.
    pub working_set: u64,
    /// `active_file`: the page cache the kubelet's working set counts, what a step can take.
    pub counted_cache: u64,
}

/// How what a pod gave came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CameBack {
    /// Refaults past half of what its steps freed.
    Refaults,
    /// Its working set regrown past half of what its steps took.
    WorkingSet,
}

impl CameBack {
    pub fn as_str(self) -> &'static str {
        match self {
            CameBack::Refaults => "its refaults passed half of what reclaim freed",
            CameBack::WorkingSet => "its working set grew back by more than half of it",
        }
    }
}

impl ReclaimHistory {
    /// A step on pod `uid` ended with `result`.
    pub fn gave(&mut self, uid: &str, result: &StepResult) {
        if result.taken == 0 && result.freed == 0 {
            return;
        }
        let given = self.given.entry(uid.to_string()).or_insert(Given {
            taken: 0,
            freed: 0,
            refaults_before: result.refaults_after.saturating_sub(result.refaulted),
            working_set_after: 0,
        });
        given.taken = given.taken.saturating_add(result.taken);
        given.freed = given.freed.saturating_add(result.freed);
        given.working_set_after = result.working_set_after;
        if self.given.len() > PODS_COUNTED
            && let Some(least) = self
                .given
                .iter()
                .min_by_key(|(_, g)| g.taken)
                .map(|(uid, _)| uid.clone())
        {
            self.given.remove(&least);
        }
    }

    /// Whether `uid` gave before (its counters are then worth reading).
    pub fn remembers(&self, uid: &str) -> bool {
        self.given.contains_key(uid)
    }

    /// Whether and how what `uid` gave came back, from its counters `now`. Forgets the pod
    /// either way.
    pub fn came_back(&mut self, uid: &str, now: PodNow) -> Option<CameBack> {
        let given = self.given.remove(uid)?;
        let more_than_half = |back: u64, gave: u64| back.saturating_mul(2) > gave;
        if more_than_half(
            now.refaults.saturating_sub(given.refaults_before),
            given.freed,
        ) {
            Some(CameBack::Refaults)
        } else if more_than_half(
            now.working_set.saturating_sub(given.working_set_after),
            given.taken,
        ) {
            Some(CameBack::WorkingSet)
        } else {
            None
        }
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
        // A step taking `taken` of the working set (down to `ws_after`) and freeing `freed`,
        // with the refault counter at `after` (bytes), `refaulted` of it in its own window.
        let step = |taken, freed, refaulted, after, ws_after| StepResult {
            freed,
            refaults_after: after,
            working_set_after: ws_after,
            ..done(taken, refaulted)
        };
        let now = |refaults, working_set| PodNow {
            refaults,
            working_set,
            counted_cache: 0,
        };
        let mut history = ReclaimHistory::default();
        history.gave("idle", &step(64 * MI, 64 * MI, 0, 10 * MI, 100 * MI));
        // Two steps of 32 MiB less working set, 16 MiB freed each; the counter was at 10 MiB
        // before the first, 2 MiB of which refaulted in its window.
        history.gave("hot", &step(32 * MI, 16 * MI, 2 * MI, 12 * MI, 200 * MI));
        history.gave("hot", &step(32 * MI, 16 * MI, 0, 12 * MI, 168 * MI));
        history.gave("deactivated", &step(64 * MI, 4 * MI, 0, 0, 50 * MI));
        history.gave("nothing", &step(0, 0, 0, 50 * MI, 0));
        assert!(
            !history.remembers("nothing"),
            "took nothing: nothing to come back"
        );
        assert!(history.remembers("idle") && history.remembers("hot"));
        assert_eq!(
            history.came_back("idle", now(10 * MI + 32 * MI, 132 * MI)),
            None,
            "half of the 64 MiB freed, half of the 64 MiB taken: not more"
        );
        assert_eq!(
            history.came_back("hot", now(10 * MI + 16 * MI + 1, 168 * MI)),
            Some(CameBack::Refaults),
            "over half of the 32 MiB freed, counted from before its first step"
        );
        assert!(!history.remembers("hot"), "forgotten once asked");
        assert_eq!(
            history.came_back("hot", now(u64::MAX, u64::MAX)),
            None,
            "a later ladder may try it again"
        );
        assert_eq!(
            history.came_back("deactivated", now(MI, 50 * MI + 32 * MI + 1)),
            Some(CameBack::WorkingSet),
            "few refaults, but over half of the 64 MiB taken back in the working set"
        );
    }
}
