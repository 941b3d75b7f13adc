//! Reclaim before eviction in the decision step (`--reclaim-first`): a memory eviction
//! decided while the episode's ladder has steps left is taken back and a step runs instead;
//! its end reads the machine again and decides again, so the eviction goes ahead only if the
//! threshold is still met once the ladder is over. A dry run says what it would reclaim.
use crate::{
    action::reclaim_first::{ReclaimFirst, Verdict},
    engine::{
        decide::{Decision, Eviction},
        instant::MonoInstant,
        pod_facts::PodRef,
        reclaim_ladder::{EPISODE_BUDGET, Step, StepResult, rungs},
        reclaim_plan::dry_run_plan,
        signal::{NodeCondition, Signal},
    },
};

use super::components::Agent;
use crate::{engine::eviction_machine::AgentCore, own_process::self_protect::OwnPod};

/// The ladder's rungs for `signal`'s ranking, each with its cgroup; never the agent's own pod,
/// nor a pod without a cgroup (nothing to reclaim from).
fn rungs_with_cgroups(core: &AgentCore, own_pod: &OwnPod, signal: Signal) -> Vec<(PodRef, String)> {
    let ranking = core.ranking(signal);
    let facts: Vec<_> = ranking.iter().map(|(facts, _)| *facts).collect();
    rungs(&facts)
        .into_iter()
        .filter_map(|pod| {
            let rel = core.pod(&pod.uid)?.cgroup.as_ref()?.rel.to_string();
            (!own_pod.holds(&rel)).then_some((pod, rel))
        })
        .collect()
}

/// What reclaim makes of the decision just taken.
pub(super) enum Gate<'d> {
    /// The eviction to carry out now, if any, and what reclaim did before it.
    Goes(Option<&'d Eviction>, Option<String>),
    /// The eviction waits for the reclaim step under way.
    Waits(&'d Eviction),
}

impl Agent {
    /// With `--reclaim-first`, acting: a memory eviction decided at `decided_ns` waits while
    /// the episode's ladder has steps left (the decision taken back). Returns the eviction to
    /// carry out now, if any, and what reclaim did before it; or the one that waits.
    pub(super) fn reclaim_gate<'d>(
        &mut self,
        decision: &'d Decision,
        decided_ns: u64,
        now: MonoInstant,
    ) -> Gate<'d> {
        let Some(eviction) = decision.eviction() else {
            return Gate::Goes(None, None);
        };
        if self.reclaim_first.is_none()
            || self.decisions.dry_run
            || eviction.signal.node_condition() != NodeCondition::MemoryPressure
        {
            return Gate::Goes(Some(eviction), None);
        }
        let until_oom = self
            .core
            .oom_projection(decided_ns)
            .map(|projection| projection.until_oom);
        let (core, own_pod) = (&self.core, &self.own_pod);
        let Some(reclaim) = &mut self.reclaim_first else {
            return Gate::Goes(Some(eviction), None);
        };
        let rungs = || rungs_with_cgroups(core, own_pod, eviction.signal);
        match reclaim.before_eviction(rungs, until_oom, now) {
            Verdict::Evict(said) => Gate::Goes(Some(eviction), Some(said)),
            Verdict::ReclaimFirst => {
                self.core.take_back(&eviction.pod.uid);
                Gate::Waits(eviction)
            }
        }
    }

    /// With `--reclaim-first`, in a dry run: what the ladder would take before `eviction`,
    /// from the page cache the kubelet counts in each pod now (its active file cache), until
    /// the threshold's shortfall is covered.
    pub(super) fn dry_run_reclaim(&self, eviction: &Eviction, threshold: i64) -> Option<String> {
        let reclaim = self.reclaim_first.as_ref()?;
        if eviction.signal.node_condition() != NodeCondition::MemoryPressure {
            return None;
        }
        let shortfall =
            u64::try_from(threshold.saturating_sub(eviction.observed.available)).unwrap_or(0);
        // Read only as far as the plan can go: the shortfall or the budget covered.
        let mut held = Vec::new();
        let mut sum = 0u64;
        for (pod, rel) in rungs_with_cgroups(&self.core, &self.own_pod, eviction.signal) {
            if sum >= shortfall.min(EPISODE_BUDGET.bytes) {
                break;
            }
            let file = reclaim
                .reclaimer()
                .now(&rel)
                .map_or(0, |now| now.counted_cache);
            sum = sum.saturating_add(file);
            held.push((pod, file));
        }
        Some(dry_run_plan(&held, shortfall, EPISODE_BUDGET).text(&eviction.pod))
    }

    /// A step ended: its result to the ladder (the input's handler then reads the machine
    /// again and decides again on what the step left).
    pub(super) fn reclaim_step_done(&mut self, step: &Step, result: StepResult, now: MonoInstant) {
        if let Some(reclaim) = &mut self.reclaim_first {
            reclaim.step_done(step, result, now);
        }
        tracing::debug!(
            pod = %step.pod,
            asked = step.bytes,
            taken = result.taken,
            freed = result.freed,
            refaulted = result.refaulted,
            answer = ?result.answer,
            "reclaim step"
        );
    }

    /// Ends the pressure episode's ladder once no memory threshold is met, saying what it
    /// spared.
    pub(super) fn end_reclaim_episode(&mut self) {
        if self.core.state().memory_threshold_met() {
            return;
        }
        if let Some(said) = self
            .reclaim_first
            .as_mut()
            .and_then(ReclaimFirst::pressure_gone)
        {
            tracing::info!("memory pressure over: {said}");
        }
    }
}
