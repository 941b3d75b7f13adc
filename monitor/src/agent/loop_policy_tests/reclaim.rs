//! `--reclaim-first` in the loop: a memory eviction waits for reclaim's steps, each followed
//! by a read and a decision; the eviction goes ahead once the ladder is over and the
//! threshold still met; a dry run says what it would reclaim and reclaims nothing.
use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use super::{MI, Mode, Scene, scene_with};
use crate::{
    action::{actuator::ActionOutcome, reclaim_first::Reclaimer},
    agent::input::{Input, Next},
    engine::{
        reclaim_ladder::{StepAnswer, StepResult},
        reclaim_record::PodNow,
    },
};

/// The steps asked for (cgroup, bytes), the results scripted for them in turn (a step beyond
/// the script takes nothing), and each cgroup's file cache.
#[derive(Clone, Default)]
pub(super) struct FakeReclaimer(Arc<Mutex<Script>>);

#[derive(Default)]
pub(super) struct Script {
    asked: Vec<(String, u64)>,
    results: VecDeque<StepResult>,
    /// Each cgroup's file cache the kubelet counts (unscripted: 64 MiB, something to take).
    counted_cache: HashMap<String, u64>,
    /// Each cgroup's refault counter, in bytes (unscripted: 0).
    refaults: HashMap<String, u64>,
    /// Each cgroup's working set (unscripted: 0).
    working_sets: HashMap<String, u64>,
}

impl Reclaimer for FakeReclaimer {
    fn step(&self, rel: &str, bytes: u64) -> StepResult {
        let mut script = self.0.lock().unwrap();
        script.asked.push((rel.to_string(), bytes));
        script
            .results
            .pop_front()
            .unwrap_or(StepResult::nothing(StepAnswer::Done))
    }

    fn now(&self, rel: &str) -> Option<PodNow> {
        let script = self.0.lock().unwrap();
        let get =
            |map: &HashMap<String, u64>, unscripted| map.get(rel).copied().unwrap_or(unscripted);
        Some(PodNow {
            refaults: get(&script.refaults, 0),
            working_set: get(&script.working_sets, 0),
            counted_cache: get(&script.counted_cache, 64 * MI),
        })
    }
}

fn took(bytes: u64) -> StepResult {
    StepResult {
        taken: bytes,
        freed: bytes,
        ..StepResult::nothing(StepAnswer::Done)
    }
}

const HOG: &str = "/kubepods/burstable/poduid-hog";
const STEADY: &str = "/kubepods/burstable/poduid-steady";

/// `hog`, 1,000 MiB over its request, heads the kubelet's order; the node has 392 MiB
/// available, 108 MiB short of `memory.available<500Mi`.
fn pressed(mode: Mode) -> Scene {
    let pods = [("hog", 100, 1100), ("steady", 400, 300)];
    scene_with(mode, None, &["--reclaim-first"], &pods, 7800)
}

fn acting() -> Mode {
    Mode::Acting(|| ActionOutcome::Failed("scripted".into()))
}

impl Scene {
    /// Waits for the reclaim step under way and hands its end to the agent, after `freed`
    /// MiB left the node's working set (what the kernel's reclaim would have freed).
    async fn finish_step(&mut self, freed_mib: u64) {
        let reclaim = self.agent.reclaim_first.as_mut().unwrap();
        assert!(reclaim.running(), "no reclaim step under way");
        let (step, result) = reclaim.next_done().await;
        self.machine.0.borrow_mut().node_working_set -= freed_mib * MI;
        assert_eq!(self.input(Input::ReclaimStepDone(step, result)), Next::Go);
    }

    fn steps_asked(&self) -> Vec<(String, u64)> {
        self.reclaimer.0.lock().unwrap().asked.clone()
    }
}

#[tokio::test]
async fn reclaim_that_relieves_the_node_spares_the_eviction() {
    let mut s = pressed(acting());
    s.reclaimer.0.lock().unwrap().results = VecDeque::from([took(32 * MI), took(32 * MI)]);
    s.poll();
    assert!(s.asked().is_empty(), "the eviction waits for reclaim");
    s.finish_step(32).await;
    assert!(
        s.asked().is_empty(),
        "still 76 MiB short: the next step, no eviction"
    );
    s.finish_step(200).await;
    assert_eq!(
        s.steps_asked(),
        [(HOG.to_string(), 32 * MI), (HOG.to_string(), 32 * MI)],
        "the head of the kubelet's order first, 32 MiB a write"
    );
    assert!(
        s.asked().is_empty(),
        "the threshold no longer met: nobody evicted"
    );
    let reclaim = s.agent.reclaim_first.as_ref().unwrap();
    assert!(!reclaim.running());
    let totals = reclaim.totals();
    assert_eq!((totals.ladders, totals.evictions_avoided), (1, 1));
    assert_eq!(totals.bytes_by_pod.get("default/hog"), Some(&(64 * MI)));
    s.poll();
    assert!(
        s.asked().is_empty() && s.steps_asked().len() == 2,
        "a quiet node"
    );
}

#[tokio::test]
async fn the_eviction_goes_ahead_as_the_kubelets_once_the_ladder_is_over() {
    let mut s = pressed(acting());
    // Neither pod gives anything: each is passed over in turn, then the ladder is over.
    s.poll();
    s.finish_step(0).await;
    assert!(s.asked().is_empty());
    s.finish_step(0).await;
    assert_eq!(
        s.asked(),
        ["hog"],
        "the kubelet's victim, once the ladder is over"
    );
    assert_eq!(
        s.steps_asked(),
        [(HOG.to_string(), 32 * MI), (STEADY.to_string(), 32 * MI)]
    );
    let decisions = s.agent.visibility.decisions.to_vec();
    let said = decisions.last().unwrap().report.reclaim_first.clone();
    assert_eq!(
        said.as_deref(),
        Some("first reclaimed 0, over: no pod left to reclaim from")
    );
    let totals = s.agent.reclaim_first.as_ref().unwrap().totals();
    assert_eq!(totals.evictions_avoided, 0);
}

#[tokio::test]
async fn a_pod_without_counted_cache_is_left_off_the_ladder_without_a_step() {
    let mut s = pressed(acting());
    {
        let mut script = s.reclaimer.0.lock().unwrap();
        script.counted_cache.insert(HOG.to_string(), MI - 1);
        script.counted_cache.insert(STEADY.to_string(), 0);
    }
    s.poll();
    assert!(s.steps_asked().is_empty(), "nothing to take: no write");
    assert_eq!(s.asked(), ["hog"], "evicted at once, as the kubelet would");
    let decisions = s.agent.visibility.decisions.to_vec();
    assert_eq!(
        decisions.last().unwrap().report.reclaim_first.as_deref(),
        Some("first reclaimed 0, over: no pod left to reclaim from")
    );
}

#[tokio::test]
async fn a_dry_run_says_what_it_would_reclaim_and_reclaims_nothing() {
    let mut s = pressed(Mode::DryRun);
    s.reclaimer
        .0
        .lock()
        .unwrap()
        .counted_cache
        .extend([(HOG.to_string(), 60 * MI), (STEADY.to_string(), 200 * MI)]);
    s.poll();
    let decisions = s.agent.visibility.decisions.to_vec();
    let report = &decisions.last().unwrap().report;
    assert_eq!(report.name, "hog");
    assert_eq!(
        report.reclaim_first.as_deref(),
        Some(
            "would reclaim file cache: 60.0Mi from default/hog, 48.0Mi from default/steady, \
             then evict nobody"
        )
    );
    assert!(s.steps_asked().is_empty(), "a dry run writes nothing");
    assert!(!s.agent.reclaim_first.as_ref().unwrap().running());
}

#[tokio::test]
async fn without_the_flag_nothing_is_reclaimed() {
    let pods = [("hog", 100, 1100), ("steady", 400, 300)];
    let mut s = scene_with(acting(), None, &[], &pods, 7800);
    s.poll();
    assert_eq!(s.asked(), ["hog"]);
    assert!(s.agent.reclaim_first.is_none());
}

/// The hog, spared by a first ladder whose one step ended with `first`, then the node under
/// pressure again with the hog's counters set by `since`: it is left off the second ladder
/// and evicted as the kubelet would.
async fn left_off_the_second_ladder(first: StepResult, since: impl FnOnce(&mut Script)) {
    let mut s = pressed(acting());
    s.reclaimer.0.lock().unwrap().results = VecDeque::from([first]);
    s.poll();
    s.finish_step(200).await;
    assert!(s.asked().is_empty(), "spared the first time");
    since(&mut s.reclaimer.0.lock().unwrap());
    s.machine.0.borrow_mut().node_working_set += 200 * MI;
    s.poll();
    s.finish_step(0).await;
    assert_eq!(
        s.steps_asked(),
        [(HOG.to_string(), 32 * MI), (STEADY.to_string(), 32 * MI)],
        "the hog left off the second ladder"
    );
    assert_eq!(s.asked(), ["hog"], "evicted as the kubelet would");
}

#[tokio::test]
async fn a_pod_whose_cache_came_back_is_left_off_the_next_ladder_and_evicted() {
    // What it gave comes straight back: 20 MiB of refaults, more than half of 32 MiB.
    left_off_the_second_ladder(took(32 * MI), |script| {
        script.refaults.insert(HOG.to_string(), 20 * MI);
    })
    .await;
}

#[tokio::test]
async fn a_pod_whose_working_set_grew_back_is_left_off_the_next_ladder() {
    // 32 MiB less working set, 1,068 MiB after it, the refault counter at 0 MiB; then few
    // refaults (reclaim had mostly deactivated its cache), but its working set back to
    // 1,085 MiB, 17 MiB of the 32 taken.
    let first = StepResult {
        working_set_after: 1068 * MI,
        ..took(32 * MI)
    };
    left_off_the_second_ladder(first, |script| {
        script.refaults.insert(HOG.to_string(), MI);
        script.working_sets.insert(HOG.to_string(), 1085 * MI);
    })
    .await;
}

#[tokio::test]
async fn pressure_gone_while_a_step_runs_ends_the_episode_with_that_step() {
    let mut s = pressed(acting());
    s.reclaimer.0.lock().unwrap().results = VecDeque::from([took(32 * MI)]);
    s.poll();
    // The node is relieved before the step is in (the brake's own reclaim, say).
    s.machine.0.borrow_mut().node_working_set -= 300 * MI;
    s.poll();
    let reclaim = s.agent.reclaim_first.as_ref().unwrap();
    assert_eq!(
        reclaim.totals().ladders,
        0,
        "the episode waits for its step"
    );
    s.finish_step(0).await;
    let totals = s.agent.reclaim_first.as_ref().unwrap().totals();
    assert_eq!((totals.ladders, totals.evictions_avoided), (1, 1));
    assert!(s.asked().is_empty());
}
