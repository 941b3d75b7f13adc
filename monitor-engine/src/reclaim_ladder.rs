//! Reclaim before eviction (`--reclaim-first`, cgroup v2): when a memory threshold is met,
//! the page cache of the pods the kubelet would evict first is written to their
//! `memory.reclaim` in bounded steps, head first, before anyone is evicted; the signal is read
//! again after each step and the eviction goes ahead, exactly as without the ladder, once the
//! ladder is over and the threshold still met.
//!
//! The kubelet counts active file cache in the working set, so it evicts pods whose "usage" is
//! cache the kernel could drop (kubernetes#43916). The ladder never makes the node less safe:
//! * it is skipped when the OOM point is projected nearer than its time budget;
//! * it is bounded per pressure episode, in bytes and in time, and runs once an episode;
//! * it never touches Guaranteed or critical pods, and leaves a pod whose cache comes straight
//!   back (refaults since the step above half of what was taken: the cache is in use);
//! * the kernel refusing `memory.reclaim` ends it at once.
use std::{collections::VecDeque, fmt, time::Duration};

use crate::{
    instant::MonoInstant,
    pod_facts::{PodFacts, PodRef},
    units::unsigned_bytes,
};

/// The most one write to `memory.reclaim` asks for: reclaim holds the cgroup's LRU locks
/// while it runs, and a small step lets the agent read the signal again soon.
pub const STEP_BYTES: u64 = 32 << 20;

/// Less page cache the kubelet counts (`active_file`) than this, and a pod is left off the
/// ladder without a write: there is nothing to take that would move the signal, and reclaim
/// would search its anonymous memory in vain (EAGAIN, after the kernel's retries).
pub const COUNTED_CACHE_AT_LEAST: u64 = 1 << 20;

/// How much one ladder may take and how long it may run, per pressure episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub bytes: u64,
    pub time: Duration,
}

/// The ladder's bound: 32 steps of 32 MiB, and at most a second of the node's time, after
/// which the eviction goes ahead as the kubelet's would.
pub const EPISODE_BUDGET: Budget = Budget {
    bytes: 1 << 30,
    time: Duration::from_secs(1),
};

/// The pods a ladder may reclaim from, in the kubelet's eviction order (head first): never a
/// critical pod, never a Guaranteed one (its memory is what it asked for).
pub fn rungs(ranking: &[&PodFacts]) -> Vec<PodRef> {
    ranking
        .iter()
        .filter(|facts| !facts.critical && !facts.guaranteed)
        .map(|facts| facts.pod.clone())
        .collect()
}

/// Whether the node can afford the ladder: the OOM point projected (`None`: nothing grows)
/// farther than the ladder's time budget.
pub fn race_allows(until_oom: Option<Duration>, budget: Budget) -> bool {
    until_oom.is_none_or(|left| left > budget.time)
}

/// One write to a pod's `memory.reclaim`, to carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub pod: PodRef,
    pub bytes: u64,
}

/// What the kernel answered to a write to `memory.reclaim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepAnswer {
    /// All that was asked was reclaimed.
    Done,
    /// EAGAIN (or EBUSY): the kernel reclaimed less than asked: a partial success, and the
    /// sign this pod has little left to give.
    Partial,
    /// The pod's cgroup is gone.
    Gone,
    /// The pod holds (almost) no page cache the kubelet counts: nothing was written, since
    /// reclaim would only search its anonymous memory in vain (EAGAIN, after the kernel's
    /// retries), which delays the eviction.
    NoCache,
    /// The kernel has no `memory.reclaim` or refuses it (EINVAL, EPERM, EOPNOTSUPP...): no
    /// pod can be reclaimed from this way.
    Refused,
}

/// A step carried out: what it took (the pod's working set in the kubelet's terms, usage less
/// inactive file cache, before less after: reclaim frees cache and deactivates what it
/// scanned), the page cache it freed (`file` before less after), what refaulted in the
/// moments after (`workingset_refault_file` times the page size), and the pod's refault
/// counter (in bytes) and working set after it, for
/// [`ReclaimHistory`](crate::reclaim_record::ReclaimHistory).
///
/// Refaults are weighed against what was freed, not against what was taken: only freed pages
/// can refault, and a page that was only deactivated comes back by a mere reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepResult {
    pub answer: StepAnswer,
    pub taken: u64,
    pub freed: u64,
    pub refaulted: u64,
    pub refaults_after: u64,
    pub working_set_after: u64,
}

impl StepResult {
    /// A step that took nothing.
    pub fn nothing(answer: StepAnswer) -> Self {
        Self {
            answer,
            taken: 0,
            freed: 0,
            refaulted: 0,
            refaults_after: 0,
            working_set_after: 0,
        }
    }

    /// Whether more than half of what the step freed came back at once: the cache is in use.
    pub fn came_straight_back(&self) -> bool {
        self.refaulted.saturating_mul(2) > self.freed
    }
}

/// Why a ladder ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Over {
    /// Every pod it may reclaim from was tried.
    NoPodLeft,
    /// Its bytes were taken.
    BytesSpent,
    /// Its time ran out.
    TimeSpent,
    /// The kernel refused `memory.reclaim`.
    Refused,
    /// The OOM point was projected nearer than its time budget: not begun.
    RaceFirst,
    /// The OOM point came nearer than its time budget while it ran: cut short.
    RaceCut,
}

impl Over {
    pub fn as_str(self) -> &'static str {
        match self {
            Over::NoPodLeft => "no pod left to reclaim from",
            Over::BytesSpent => "its bytes spent",
            Over::TimeSpent => "its time spent",
            Over::Refused => "memory.reclaim refused",
            Over::RaceFirst => "the OOM point nearer than its time",
            Over::RaceCut => "the OOM point came nearer than its time",
        }
    }
}

/// One pressure episode's ladder: the pods in order, what each gave, and whether it is over.
#[derive(Clone, Debug)]
pub struct Ladder {
    rungs: VecDeque<PodRef>,
    started: MonoInstant,
    budget: Budget,
    taken: u64,
    by_pod: Vec<(PodRef, u64)>,
    over: Option<Over>,
}

impl Ladder {
    pub fn new(rungs: Vec<PodRef>, started: MonoInstant, budget: Budget) -> Ladder {
        Ladder {
            rungs: rungs.into(),
            started,
            budget,
            taken: 0,
            by_pod: Vec::new(),
            over: None,
        }
    }

    /// A ladder the race did not let begin.
    pub fn skipped(started: MonoInstant, budget: Budget) -> Ladder {
        Ladder {
            over: Some(Over::RaceFirst),
            ..Ladder::new(Vec::new(), started, budget)
        }
    }

    /// The OOM point is projected `until_oom` away (`None`: nothing grows): a ladder that
    /// runs is cut short once that is no farther than its time budget, so the eviction goes
    /// ahead at once.
    pub fn race(&mut self, until_oom: Option<Duration>) {
        if self.over.is_none() && !race_allows(until_oom, self.budget) {
            self.over = Some(Over::RaceCut);
        }
    }

    /// The next write, or `None` once the ladder is over ([`Self::over`] says why).
    pub fn next_step(&mut self, now: MonoInstant) -> Option<Step> {
        if self.over.is_some() {
            return None;
        }
        let over = if now.saturating_since(self.started) >= self.budget.time {
            Some(Over::TimeSpent)
        } else if self.taken >= self.budget.bytes {
            Some(Over::BytesSpent)
        } else if self.rungs.is_empty() {
            Some(Over::NoPodLeft)
        } else {
            None
        };
        if let Some(over) = over {
            self.over = Some(over);
            return None;
        }
        let pod = self.rungs.front()?.clone();
        let bytes = STEP_BYTES.min(self.budget.bytes - self.taken);
        Some(Step { pod, bytes })
    }

    /// Takes in a step's result: the pod stays on the ladder while it gives all it was asked
    /// and its cache does not come back.
    pub fn record(&mut self, step: &Step, result: StepResult) {
        if self.rungs.front() != Some(&step.pod) {
            return;
        }
        self.taken = self.taken.saturating_add(result.taken);
        if result.taken > 0 {
            match self.by_pod.iter_mut().find(|(pod, _)| *pod == step.pod) {
                Some((_, sum)) => *sum += result.taken,
                None => self.by_pod.push((step.pod.clone(), result.taken)),
            }
        }
        if self.over.is_some() {
            // Cut short while it ran: counted, and the ladder stays over.
            return;
        }
        let in_use = result.came_straight_back();
        match result.answer {
            StepAnswer::Refused => {
                self.over = Some(Over::Refused);
            }
            StepAnswer::Done if result.taken > 0 && !in_use => {}
            StepAnswer::Done | StepAnswer::Partial | StepAnswer::Gone | StepAnswer::NoCache => {
                self.rungs.pop_front();
            }
        }
    }

    pub fn over(&self) -> Option<Over> {
        self.over
    }

    /// Bytes taken in all, and from each pod in the order they gave.
    pub fn taken(&self) -> (u64, &[(PodRef, u64)]) {
        (self.taken, &self.by_pod)
    }

    pub fn started(&self) -> MonoInstant {
        self.started
    }
}
impl fmt::Display for Ladder {
    /// "reclaimed 96.0Mi (shop/cache 64.0Mi, shop/web 32.0Mi), over: its bytes spent".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "reclaimed {}", unsigned_bytes(self.taken))?;
        if !self.by_pod.is_empty() {
            let each = self
                .by_pod
                .iter()
                .map(|(pod, taken)| format!("{pod} {}", unsigned_bytes(*taken)))
                .collect::<Vec<_>>()
                .join(", ");
            write!(f, " ({each})")?;
        }
        if let Some(over) = self.over {
            write!(f, ", over: {}", over.as_str())?;
        }
        Ok(())
    }
}

/// The ladder's tests, and helpers the other reclaim modules' tests share.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const MI: u64 = 1 << 20;

    pub(crate) fn pod(name: &str) -> PodRef {
        PodFacts::named(name).pod
    }

    pub(crate) fn at(ms: u64) -> MonoInstant {
        MonoInstant::from_millis(ms)
    }

    /// A step that gave all it was asked: `taken`, all of it freed, and `refaulted` of it
    /// back at once.
    pub(crate) fn done(taken: u64, refaulted: u64) -> StepResult {
        StepResult {
            answer: StepAnswer::Done,
            taken,
            freed: taken,
            refaulted,
            refaults_after: 0,
            working_set_after: 0,
        }
    }

    #[test]
    fn rungs_keep_the_kubelets_order_without_guaranteed_or_critical_pods() {
        let ranking = [
            PodFacts::named("head"),
            PodFacts::named("critical").with_critical(true),
            PodFacts::named("guaranteed").with_guaranteed(true),
            PodFacts::named("tail"),
        ];
        let ranking: Vec<&PodFacts> = ranking.iter().collect();
        assert_eq!(rungs(&ranking), vec![pod("head"), pod("tail")]);
    }

    #[test]
    fn the_race_skips_the_ladder_only_when_the_oom_point_is_nearer_than_its_time() {
        let budget = EPISODE_BUDGET;
        for (name, until_oom, allows) in [
            ("nothing grows", None, true),
            ("far", Some(Duration::from_secs(5)), true),
            (
                "just beyond",
                Some(budget.time + Duration::from_millis(1)),
                true,
            ),
            ("at its time", Some(budget.time), false),
            ("near", Some(Duration::from_millis(200)), false),
        ] {
            assert_eq!(race_allows(until_oom, budget), allows, "{name}");
        }
    }

    #[test]
    fn a_pod_that_gives_stays_on_the_ladder_until_its_cache_comes_back() {
        let mut ladder = Ladder::new(vec![pod("a"), pod("b")], at(0), EPISODE_BUDGET);
        let step = ladder.next_step(at(1)).unwrap();
        assert_eq!(
            step,
            Step {
                pod: pod("a"),
                bytes: STEP_BYTES
            }
        );
        ladder.record(&step, done(32 * MI, 16 * MI));
        let step = ladder.next_step(at(2)).unwrap();
        assert_eq!(
            step.pod,
            pod("a"),
            "refaults of half what was taken: not yet in use"
        );
        ladder.record(&step, done(32 * MI, 16 * MI + 1));
        let step = ladder.next_step(at(3)).unwrap();
        assert_eq!(
            step.pod,
            pod("b"),
            "more than half came back: the cache is in use"
        );
        assert_eq!(ladder.taken(), (64 * MI, &[(pod("a"), 64 * MI)][..]));
    }

    #[test]
    fn refaults_are_weighed_against_what_was_freed_not_what_was_deactivated() {
        let mut ladder = Ladder::new(vec![pod("a"), pod("b")], at(0), EPISODE_BUDGET);
        let step = ladder.next_step(at(1)).unwrap();
        // 32 MiB less working set, of which 8 MiB freed and 24 MiB moved to the inactive list;
        // 5 MiB of the 8 refaulted at once.
        ladder.record(
            &step,
            StepResult {
                freed: 8 * MI,
                ..done(32 * MI, 5 * MI)
            },
        );
        assert_eq!(ladder.next_step(at(2)).unwrap().pod, pod("b"), "in use");
        assert!(
            !done(32 * MI, 16 * MI).came_straight_back(),
            "half: not more"
        );
        assert!(done(32 * MI, 16 * MI + 1).came_straight_back());
        assert!(
            !StepResult::nothing(StepAnswer::Done).came_straight_back(),
            "nothing freed, nothing back"
        );
    }

    #[test]
    fn each_answer_of_the_kernel_moves_the_ladder() {
        for (name, result, next) in [
            ("all taken", done(32 * MI, 0), Some("a")),
            ("nothing taken", done(0, 0), Some("b")),
            (
                "no cache",
                StepResult::nothing(StepAnswer::NoCache),
                Some("b"),
            ),
            (
                "EAGAIN, a partial success",
                StepResult {
                    taken: 8 * MI,
                    ..StepResult::nothing(StepAnswer::Partial)
                },
                Some("b"),
            ),
            (
                "the pod is gone",
                StepResult::nothing(StepAnswer::Gone),
                Some("b"),
            ),
            (
                "refused: no pod can be reclaimed from",
                StepResult::nothing(StepAnswer::Refused),
                None,
            ),
        ] {
            let mut ladder = Ladder::new(vec![pod("a"), pod("b")], at(0), EPISODE_BUDGET);
            let step = ladder.next_step(at(1)).unwrap();
            ladder.record(&step, result);
            let got = ladder.next_step(at(2)).map(|s| s.pod.name);
            assert_eq!(got.as_deref(), next, "{name}");
        }
    }

    #[test]
    fn the_ladder_ends_with_its_budget() {
        let budget = Budget {
            bytes: 48 * MI,
            time: Duration::from_millis(500),
        };
        let mut ladder = Ladder::new(vec![pod("a")], at(0), budget);
        let first = ladder.next_step(at(0)).unwrap();
        ladder.record(&first, done(32 * MI, 0));
        let second = ladder.next_step(at(10)).unwrap();
        assert_eq!(second.bytes, 16 * MI, "the last step asks for what is left");
        ladder.record(&second, done(16 * MI, 0));
        assert_eq!(ladder.next_step(at(20)), None);
        assert_eq!(ladder.over(), Some(Over::BytesSpent));

        let mut ladder = Ladder::new(vec![pod("a")], at(0), budget);
        assert_eq!(ladder.next_step(at(500)), None);
        assert_eq!(ladder.over(), Some(Over::TimeSpent));

        let mut ladder = Ladder::new(vec![pod("a")], at(0), budget);
        let step = ladder.next_step(at(0)).unwrap();
        ladder.record(&step, done(0, 0));
        assert_eq!(ladder.next_step(at(1)), None);
        assert_eq!(ladder.over(), Some(Over::NoPodLeft));
        assert_eq!(
            ladder.to_string(),
            "reclaimed 0, over: no pod left to reclaim from"
        );
    }

    #[test]
    fn the_race_cuts_a_running_ladder_short() {
        let mut ladder = Ladder::new(vec![pod("a")], at(0), EPISODE_BUDGET);
        let step = ladder.next_step(at(0)).unwrap();
        ladder.race(Some(Duration::from_secs(3)));
        assert_eq!(ladder.over(), None, "far: it goes on");
        ladder.race(Some(Duration::from_millis(300)));
        assert_eq!(ladder.over(), Some(Over::RaceCut));
        ladder.record(&step, done(32 * MI, 0));
        assert_eq!(ladder.next_step(at(1)), None, "over for good");
        assert_eq!(
            ladder.to_string(),
            "reclaimed 32.0Mi (default/a 32.0Mi), over: the OOM point came nearer than its time"
        );
    }

    #[test]
    fn a_skipped_ladder_takes_no_step() {
        let mut ladder = Ladder::skipped(at(0), EPISODE_BUDGET);
        assert_eq!(ladder.next_step(at(0)), None);
        assert_eq!(ladder.over(), Some(Over::RaceFirst));
    }

    #[test]
    fn a_result_for_a_pod_no_longer_at_the_head_is_ignored() {
        let mut ladder = Ladder::new(vec![pod("a"), pod("b")], at(0), EPISODE_BUDGET);
        let stale = Step {
            pod: pod("b"),
            bytes: STEP_BYTES,
        };
        ladder.record(&stale, done(32 * MI, 0));
        assert_eq!(ladder.taken().0, 0);
        assert_eq!(ladder.next_step(at(1)).unwrap().pod, pod("a"));
    }
}
