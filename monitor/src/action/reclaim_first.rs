//! Reclaim before eviction on this node (`--reclaim-first`, cgroup v2): the engine's
//! [`Ladder`] carried out one `memory.reclaim` write at a time off the event loop, each
//! result handed back to it, and the pressure episodes counted for the metrics. A step is
//! never undone and needs no undoing: reclaimed cache is read back from disk when used, and no
//! limit was lowered, so an agent killed mid-step leaves nothing behind.
use std::{collections::BTreeMap, path::PathBuf, sync::Arc, time::Duration};

use tokio::task::JoinHandle;

use crate::{
    action::kube_event::{EventReason, EventRecorder},
    cgroupfs::reclaim,
    engine::{
        instant::MonoInstant,
        pod_facts::PodRef,
        reclaim_ladder::{
            COUNTED_CACHE_AT_LEAST, EPISODE_BUDGET, Ladder, Over, Step, StepAnswer, StepResult,
            race_allows,
        },
        reclaim_record::{PodNow, ReclaimHistory, ReclaimTotals},
        units::unsigned_bytes,
    },
};

/// The cgroupfs side of a step, a fake in the loop's unit tests.
pub(crate) trait Reclaimer: Send + Sync {
    /// One write of `bytes` to the `memory.reclaim` of the cgroup at `rel` (relative to the
    /// hierarchy's mount) and what came of it; blocks for the reclaim.
    fn step(&self, rel: &str, bytes: u64) -> StepResult;
    /// The cgroup's refault counter, working set and the page cache the kubelet counts in it
    /// (`None`: unreadable or gone).
    fn now(&self, rel: &str) -> Option<PodNow>;
}

/// [`Reclaimer`] on this machine's cgroup v2 hierarchy.
pub(crate) struct CgroupfsReclaimer {
    pub(crate) mount: PathBuf,
    pub(crate) page_size: u64,
}

impl Reclaimer for CgroupfsReclaimer {
    fn step(&self, rel: &str, bytes: u64) -> StepResult {
        reclaim::step(
            &self.mount.join(rel.trim_start_matches('/')),
            bytes,
            self.page_size,
        )
    }

    fn now(&self, rel: &str) -> Option<PodNow> {
        reclaim::now(&self.dir(rel), self.page_size)
    }
}

impl CgroupfsReclaimer {
    fn dir(&self, rel: &str) -> PathBuf {
        self.mount.join(rel.trim_start_matches('/'))
    }
}

/// What reclaim says of a memory eviction decided now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A step runs or was started: the eviction waits for it and the signal read after it.
    ReclaimFirst,
    /// The ladder is over (or never began): evict as without it; what it did, to be said.
    Evict(String),
}

/// Reclaim before eviction: this pressure episode's ladder and the step under way.
pub(crate) struct ReclaimFirst {
    reclaimer: Arc<dyn Reclaimer>,
    episode: Option<Episode>,
    /// The cgroup of each pod on the episode's ladder, by uid.
    cgroups: BTreeMap<String, String>,
    running: Option<(Step, JoinHandle<StepResult>)>,
    /// What pods gave in earlier episodes, to leave off those whose cache came back.
    history: ReclaimHistory,
    totals: ReclaimTotals,
    /// With `--kube`: an Event on each pod an episode took from when it spared an eviction.
    events: Option<EventRecorder>,
}

struct Episode {
    ladder: Ladder,
    /// When its last step ended or it was found over: the ladder's time.
    last_moved: MonoInstant,
    /// An eviction went ahead in it.
    evicted: bool,
}

impl ReclaimFirst {
    pub(crate) fn new(reclaimer: Arc<dyn Reclaimer>) -> Self {
        Self {
            reclaimer,
            episode: None,
            cgroups: BTreeMap::new(),
            running: None,
            history: ReclaimHistory::default(),
            totals: ReclaimTotals::default(),
            events: None,
        }
    }

    /// Says each spared eviction in Events on the pods reclaimed from.
    pub(crate) fn with_events(mut self, events: Option<EventRecorder>) -> Self {
        self.events = events;
        self
    }

    /// A memory threshold is met and an eviction decided at `now`: the first decision of a
    /// pressure episode begins its ladder (`rungs`, each pod with its cgroup, head first),
    /// unless the OOM point is projected nearer than its time (`until_oom`); then each step
    /// in turn, until the ladder is over and the eviction goes ahead. The OOM point coming
    /// that near ends the ladder at once, a step under way or not.
    pub(crate) fn before_eviction(
        &mut self,
        rungs: impl FnOnce() -> Vec<(PodRef, String)>,
        until_oom: Option<Duration>,
        now: MonoInstant,
    ) -> Verdict {
        let begun = match self.episode.take() {
            Some(episode) => episode,
            None => Episode {
                ladder: if race_allows(until_oom, EPISODE_BUDGET) {
                    Ladder::new(self.climbable(rungs()), now, EPISODE_BUDGET)
                } else {
                    Ladder::skipped(now, EPISODE_BUDGET)
                },
                last_moved: now,
                evicted: false,
            },
        };
        let episode = self.episode.insert(begun);
        // The race comes first, a step under way or not.
        episode.ladder.race(until_oom);
        if episode.ladder.over().is_none() && self.running.is_some() {
            return Verdict::ReclaimFirst;
        }
        let Some(step) = episode.ladder.next_step(now) else {
            episode.evicted = true;
            return Verdict::Evict(said(&episode.ladder));
        };
        let rel = self.cgroups.get(&step.pod.uid).cloned();
        let reclaimer = Arc::clone(&self.reclaimer);
        let bytes = step.bytes;
        let task = tokio::task::spawn_blocking(move || match rel {
            Some(rel) => reclaimer.step(&rel, bytes),
            // A rung always has its cgroup; a step never outlives its episode's map.
            None => StepResult::nothing(StepAnswer::Gone),
        });
        self.running = Some((step, task));
        Verdict::ReclaimFirst
    }

    /// The new episode's rungs with their cgroups noted, less the pods with (almost) no
    /// cache the kubelet counts, or unreadable, which a step would only pass over, and the
    /// pods whose cache came back since they gave it.
    fn climbable(&mut self, rungs: Vec<(PodRef, String)>) -> Vec<PodRef> {
        self.cgroups.clear();
        let mut pods = Vec::new();
        for (pod, rel) in rungs {
            let Some(now) = self.reclaimer.now(&rel) else {
                continue;
            };
            if now.counted_cache < COUNTED_CACHE_AT_LEAST {
                continue;
            }
            if self.history.remembers(&pod.uid)
                && let Some(how) = self.history.came_back(&pod.uid, now)
            {
                tracing::info!(
                    "reclaim leaves {pod} alone: what it gave came back ({}), so its cache is \
                     in use",
                    how.as_str()
                );
                continue;
            }
            self.cgroups.insert(pod.uid.clone(), rel);
            pods.push(pod);
        }
        pods
    }

    /// Whether a step is under way.
    pub(crate) fn running(&self) -> bool {
        self.running.is_some()
    }

    /// The step under way, once it ends (pending while none runs).
    pub(crate) async fn next_done(&mut self) -> (Step, StepResult) {
        let Some((_, task)) = &mut self.running else {
            return std::future::pending().await;
        };
        // A step that panicked took what it took; the pod is passed over.
        let result = task
            .await
            .unwrap_or(StepResult::nothing(StepAnswer::Partial));
        let (step, _) = self.running.take().expect("a step was running");
        (step, result)
    }

    /// A step's result at `now`, to the ladder and the totals.
    pub(crate) fn step_done(&mut self, step: &Step, result: StepResult, now: MonoInstant) {
        self.totals.took(&step.pod, result.taken);
        self.history.gave(&step.pod.uid, &result);
        if let Some(episode) = &mut self.episode {
            episode.ladder.record(step, result);
            episode.last_moved = now;
        }
    }

    /// No memory threshold is met any more: the episode ends, once the step under way is in
    /// (the brake's own reclaim may have ended the pressure first; what the step took is
    /// still the episode's). Says what its ladder did when it spared an eviction.
    pub(crate) fn pressure_gone(&mut self) -> Option<String> {
        if self.running.is_some() {
            return None;
        }
        let episode = self.episode.take()?;
        let ladder = &episode.ladder;
        let spared = self
            .totals
            .episode_ended(ladder, episode.last_moved, episode.evicted);
        if !spared {
            return None;
        }
        if let Some(events) = &self.events {
            for (pod, taken) in ladder.taken().1 {
                events.record(
                    pod,
                    EventReason::ReclaimedBeforeEviction,
                    &format!(
                        "{} of the pod's page cache taken back through memory.reclaim before \
                         an eviction; the memory threshold was no longer met: nobody was evicted",
                        unsigned_bytes(*taken)
                    ),
                );
            }
        }
        Some(format!("{}, then evicted nobody", said(ladder)))
    }

    pub(crate) fn totals(&self) -> &ReclaimTotals {
        &self.totals
    }

    pub(crate) fn reclaimer(&self) -> &dyn Reclaimer {
        self.reclaimer.as_ref()
    }
}

/// What a ladder did, as a decision says it.
fn said(ladder: &Ladder) -> String {
    match ladder.over() {
        Some(Over::RaceFirst) => format!("reclaim skipped: {}", Over::RaceFirst.as_str()),
        _ => format!("first {ladder}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    const MI: u64 = 1 << 20;

    /// Every step takes 32 MiB; the steps asked for are kept.
    #[derive(Default)]
    struct Generous(Mutex<Vec<String>>);

    impl Reclaimer for Generous {
        fn step(&self, rel: &str, _bytes: u64) -> StepResult {
            self.0.lock().unwrap().push(rel.to_string());
            StepResult {
                taken: 32 * MI,
                freed: 32 * MI,
                ..StepResult::nothing(StepAnswer::Done)
            }
        }
        fn now(&self, _rel: &str) -> Option<PodNow> {
            Some(PodNow {
                refaults: 0,
                working_set: 0,
                counted_cache: 64 * MI,
            })
        }
    }

    fn rungs() -> Vec<(PodRef, String)> {
        vec![(
            PodRef {
                namespace: "shop".into(),
                name: "cache".into(),
                uid: "u1".into(),
            },
            "/kubepods/pod-u1".into(),
        )]
    }

    const FAR: Option<Duration> = Some(Duration::from_secs(30));
    const NEAR: Option<Duration> = Some(Duration::from_millis(200));

    #[tokio::test]
    async fn the_oom_point_near_at_the_start_skips_the_ladder() {
        let reclaimer = Arc::new(Generous::default());
        let mut reclaim = ReclaimFirst::new(reclaimer.clone());
        let verdict = reclaim.before_eviction(rungs, NEAR, MonoInstant::from_millis(0));
        assert_eq!(
            verdict,
            Verdict::Evict("reclaim skipped: the OOM point nearer than its time".into())
        );
        assert!(!reclaim.running());
        assert_eq!(reclaim.pressure_gone(), None);
        assert_eq!(reclaim.totals().skipped_for_race, 1);
        assert!(reclaimer.0.lock().unwrap().is_empty(), "nothing written");
    }

    #[tokio::test]
    async fn the_oom_point_coming_near_ends_the_ladder_with_a_step_under_way() {
        let reclaimer = Arc::new(Generous::default());
        let mut reclaim = ReclaimFirst::new(reclaimer.clone());
        let at = MonoInstant::from_millis;
        assert_eq!(
            reclaim.before_eviction(rungs, FAR, at(0)),
            Verdict::ReclaimFirst
        );
        assert!(reclaim.running());
        assert_eq!(
            reclaim.before_eviction(rungs, FAR, at(5)),
            Verdict::ReclaimFirst,
            "the step under way is waited for"
        );
        let Verdict::Evict(said) = reclaim.before_eviction(rungs, NEAR, at(10)) else {
            panic!("the race comes first");
        };
        assert_eq!(
            said,
            "first reclaimed 0, over: the OOM point came nearer than its time"
        );
        let (step, result) = reclaim.next_done().await;
        reclaim.step_done(&step, result, at(20));
        assert_eq!(reclaimer.0.lock().unwrap().as_slice(), ["/kubepods/pod-u1"]);
        assert_eq!(
            reclaim.totals().bytes_by_pod.get("shop/cache"),
            Some(&(32 * MI))
        );
        assert_eq!(
            reclaim.pressure_gone(),
            None,
            "an eviction went ahead: none spared"
        );
        assert_eq!(reclaim.totals().ladders, 1);
    }
}
