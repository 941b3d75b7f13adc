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
use std::{
    collections::{BTreeMap, VecDeque},
    fmt,
    time::Duration,
};

use crate::{
    instant::MonoInstant,
    pod_facts::{PodFacts, PodRef},
    units::unsigned_bytes,
};

/// The most one write to `memory.reclaim` asks for: reclaim holds the cgroup's LRU locks
/// while it runs, and a small step lets the agent read the signal again soon.
pub const STEP_BYTES: u64 = 32 << 20;

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
/// scanned), what refaulted in the moments after (`workingset_refault_file` times the page
/// size), and the pod's refault counter after it, in bytes, for [`ReclaimHistory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepResult {
    pub answer: StepAnswer,
    pub taken: u64,
    pub refaulted: u64,
    pub refaults_after: u64,
}

impl StepResult {
    /// A step that took nothing.
    pub fn nothing(answer: StepAnswer) -> Self {
        Self {
            answer,
            taken: 0,
            refaulted: 0,
            refaults_after: 0,
        }
    }
}

/// The pods reclaimed from in earlier pressure episodes, to tell cache that comes straight
/// back: a pod whose refaults since its last step exceed half of what it gave is left off the
/// next ladder (its cache is in use; a refault storm would otherwise reclaim it at every
/// episode and never evict), and its record dropped, so a later ladder may try it again.
#[derive(Clone, Debug, Default)]
pub struct ReclaimHistory {
    given: BTreeMap<String, Given>,
}

#[derive(Clone, Copy, Debug)]
struct Given {
    taken: u64,
    refaults_after: u64,
}

impl ReclaimHistory {
    /// A step on pod `uid` ended with `result`.
    pub fn gave(&mut self, uid: &str, result: &StepResult) {
        if result.taken == 0 {
            return;
        }
        let given = self.given.entry(uid.to_string()).or_insert(Given {
            taken: 0,
            refaults_after: 0,
        });
        given.taken = given.taken.saturating_add(result.taken);
        given.refaults_after = result.refaults_after;
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

    /// Whether `uid` gave before (its refault counter is then worth reading).
    pub fn remembers(&self, uid: &str) -> bool {
        self.given.contains_key(uid)
    }

    /// Whether what `uid` gave came back: its refault counter now (bytes) is more than half
    /// of what it gave past the counter after its last step. Forgets the pod either way.
    pub fn came_back(&mut self, uid: &str, refaults_now: u64) -> bool {
        self.given.remove(uid).is_some_and(|given| {
            refaults_now
                .saturating_sub(given.refaults_after)
                .saturating_mul(2)
                > given.taken
        })
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
        let in_use = result.refaulted.saturating_mul(2) > result.taken;
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

/// What a dry run would reclaim: each pod's file cache, head first, until the shortfall is
/// covered or the budget's bytes spent; whether an eviction would still follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DryRunPlan {
    pub steps: Vec<(PodRef, u64)>,
    pub then_evict: bool,
}

/// A dry run's ladder from the file cache each rung holds and the bytes the threshold is
/// short of. A guess: the kernel may refuse part of it, and cache in use comes back.
pub fn dry_run_plan(rungs: &[(PodRef, u64)], shortfall: u64, budget: Budget) -> DryRunPlan {
    let mut steps = Vec::new();
    let mut taken = 0u64;
    for (pod, file) in rungs {
        if taken >= shortfall || taken >= budget.bytes {
            break;
        }
        let take = (*file).min(budget.bytes - taken).min(shortfall - taken);
        if take > 0 {
            steps.push((pod.clone(), take));
            taken += take;
        }
    }
    DryRunPlan {
        steps,
        then_evict: taken < shortfall,
    }
}

impl DryRunPlan {
    /// "would reclaim file cache: 412.0Mi from shop/cache, then evict nobody".
    pub fn text(&self, victim: &PodRef) -> String {
        let then = if self.then_evict {
            format!("then evict {victim}")
        } else {
            "then evict nobody".to_string()
        };
        if self.steps.is_empty() {
            return format!("would find no file cache to reclaim, {then}");
        }
        let from = self
            .steps
            .iter()
            .map(|(pod, taken)| format!("{} from {pod}", unsigned_bytes(*taken)))
            .collect::<Vec<_>>()
            .join(", ");
        format!("would reclaim file cache: {from}, {then}")
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

#[cfg(test)]
mod tests {
    use super::*;

    const MI: u64 = 1 << 20;

    fn pod(name: &str) -> PodRef {
        PodFacts::named(name).pod
    }

    fn at(ms: u64) -> MonoInstant {
        MonoInstant::from_millis(ms)
    }

    fn done(taken: u64, refaulted: u64) -> StepResult {
        StepResult {
            answer: StepAnswer::Done,
            taken,
            refaulted,
            refaults_after: 0,
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
        let step = |taken, refaults_after| StepResult {
            refaults_after,
            ..done(taken, 0)
        };
        let mut history = ReclaimHistory::default();
        history.gave("idle", &step(64 * MI, 10 * MI));
        history.gave("hot", &step(32 * MI, 10 * MI));
        history.gave("hot", &step(32 * MI, 12 * MI));
        history.gave("nothing", &step(0, 50 * MI));
        assert!(
            !history.remembers("nothing"),
            "took nothing: nothing to come back"
        );
        assert!(history.remembers("idle") && history.remembers("hot"));
        assert!(
            !history.came_back("idle", 10 * MI + 32 * MI),
            "half of 64 MiB: not more"
        );
        assert!(
            history.came_back("hot", 12 * MI + 32 * MI + 1),
            "over half of 64 MiB"
        );
        assert!(!history.remembers("hot"), "forgotten once asked");
        assert!(
            !history.came_back("hot", u64::MAX),
            "a later ladder may try it again"
        );
    }

    #[test]
    fn a_dry_run_says_what_it_would_reclaim_and_whether_an_eviction_follows() {
        let rungs = [(pod("cache"), 300 * MI), (pod("web"), 200 * MI)];
        for (name, shortfall, budget_bytes, steps, text) in [
            (
                "the head's cache covers it",
                100 * MI,
                1 << 30,
                vec![(pod("cache"), 100 * MI)],
                "would reclaim file cache: 100.0Mi from default/cache, then evict nobody",
            ),
            (
                "two pods cover it",
                412 * MI,
                1 << 30,
                vec![(pod("cache"), 300 * MI), (pod("web"), 112 * MI)],
                "would reclaim file cache: 300.0Mi from default/cache, 112.0Mi from default/web, \
                 then evict nobody",
            ),
            (
                "not enough cache",
                600 * MI,
                1 << 30,
                vec![(pod("cache"), 300 * MI), (pod("web"), 200 * MI)],
                "would reclaim file cache: 300.0Mi from default/cache, 200.0Mi from default/web, \
                 then evict default/victim",
            ),
            (
                "the budget bounds it",
                412 * MI,
                256 * MI,
                vec![(pod("cache"), 256 * MI)],
                "would reclaim file cache: 256.0Mi from default/cache, then evict default/victim",
            ),
        ] {
            let budget = Budget {
                bytes: budget_bytes,
                time: Duration::from_secs(1),
            };
            let plan = dry_run_plan(&rungs, shortfall, budget);
            assert_eq!(plan.steps, steps, "{name}");
            assert_eq!(plan.text(&pod("victim")), text, "{name}");
        }
        let empty = dry_run_plan(&[(pod("cache"), 0)], MI, EPISODE_BUDGET);
        assert_eq!(
            empty.text(&pod("victim")),
            "would find no file cache to reclaim, then evict default/victim"
        );
    }
}
