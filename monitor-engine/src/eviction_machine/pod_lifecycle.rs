//! How the pod set changes and an evicted pod leaves it, apart from the decisions made on it.
use std::collections::HashMap;

use super::AgentCore;
use crate::{
    ids::{CgroupRel, PodUid},
    pod_facts::{PodFacts, PodRef},
    pod_table::{PodCgroup, PodRow},
};

/// How the pod set changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

impl AgentCore {
    /// Replaces the pod set: new pods are added (without stats until read), vanished ones
    /// removed from the rankings, changed specs re-ranked.
    pub fn set_pods(&mut self, pods: Vec<(PodFacts, Option<PodCgroup>)>) -> PodChanges {
        let mut changes = PodChanges::default();
        let incoming: HashMap<PodUid, (PodFacts, Option<PodCgroup>)> = pods
            .into_iter()
            .map(|(f, c)| (f.pod.uid.as_str().into(), (f, c)))
            .collect();
        let gone: Vec<String> = self
            .pods
            .rows()
            .filter(|row| row.listed)
            .map(|row| &row.facts.pod.uid)
            .filter(|uid| !incoming.contains_key(uid.as_str()))
            .cloned()
            .collect();
        for uid in gone {
            if self.in_flight(&uid) {
                // Its processes may still hold their memory: the row stays, out of the
                // rankings, until its cgroup is empty (see `eviction_over`).
                let row = self.pods.by_uid_mut(&uid).expect("listed uid");
                row.listed = false;
                self.rankings.remove(&uid);
                self.unlisted.insert(uid.clone());
            } else {
                self.remove_pod(&uid);
            }
            changes.removed.push(uid);
        }
        for (uid, (facts, cgroup)) in incoming {
            let id = if let Some(id) = self.pods.id(uid.as_str()) {
                let row = self.pods.get_mut(id).expect("listed id");
                let relisted = !row.listed;
                if relisted {
                    // Listed again with the same uid while its eviction is in flight: the
                    // same pod, still being stopped, not a new candidate.
                    row.listed = true;
                    self.unlisted.remove(uid.as_str());
                    changes.added.push(uid.to_string());
                    if row.ranked() {
                        self.rankings.upsert_pod_shared(&row.facts);
                    }
                }
                let row = self.pods.get(id).expect("listed id");
                if *row.facts == facts && row.cgroup == cgroup {
                    if relisted {
                        self.rerank(id);
                    }
                    continue;
                }
                if row.cgroup != cgroup {
                    let row = self.pods.get_mut(id).expect("listed id");
                    if cgroup.is_none() {
                        row.estimate = None;
                    }
                    row.read_failed = false;
                    self.pods.set_cgroup(id, cgroup);
                }
                let row = self.pods.get_mut(id).expect("listed id");
                if *row.facts != facts {
                    row.facts = facts.into();
                    if row.ranked() {
                        self.rankings.upsert_pod_shared(&row.facts);
                    }
                }
                id
            } else {
                changes.added.push(uid.to_string());
                let row = PodRow::new(facts, cgroup);
                self.rankings.upsert_pod_shared(&row.facts);
                self.pods.insert(row)
            };
            self.rerank(id);
        }
        changes.added.sort();
        changes.removed.sort();
        changes
    }

    fn remove_pod(&mut self, uid: &str) {
        if let Some(id) = self.pods.id(uid) {
            self.pods.remove(id);
        }
        self.rankings.remove(uid);
        self.refusals.forget(uid);
        self.unlisted.remove(uid);
        self.stuck.remove(uid);
    }

    /// Whether the eviction of `uid` is in flight: it is the pod the decision step waits
    /// for, or this agent stopped it and has not yet found its cgroup empty.
    fn in_flight(&self, uid: &str) -> bool {
        self.state
            .awaiting_cleanup
            .as_ref()
            .is_some_and(|pending| pending.pod.uid == uid)
            || self
                .pods
                .by_uid(uid)
                .is_some_and(|row| row.evicted && !row.stopped)
    }

    /// The evictions whose end is found by watching the pod's cgroup empty: pods that left
    /// the pod set while their eviction was in flight, and pods whose processes outlived
    /// force; with their cgroups (`None`: gone).
    pub fn evictions_to_settle(&self) -> Vec<(PodRef, Option<CgroupRel>)> {
        self.unlisted
            .union(&self.stuck)
            .filter_map(|uid| self.pods.by_uid(uid))
            .map(|row| {
                let rel = row.cgroup.as_ref().map(|c| c.rel.clone());
                (row.facts.pod.clone(), rel)
            })
            .collect()
    }

    /// The pending eviction was decided in a dry run: nothing was signalled, so there is no
    /// grace period to wait out, only the cleanup timeout, as for a pod that does not go.
    pub fn nothing_signalled(&mut self) {
        if let Some(pending) = &mut self.state.awaiting_cleanup {
            pending.grace_period_seconds = 0;
        }
    }

    /// The eviction of `uid` failed (it could not be carried out): the wait for its cleanup
    /// ends, so the next decision is not held back by it, and the pod is a candidate again
    /// while listed (it was not stopped), as a pod the kubelet failed to kill stays among its
    /// active pods and is tried again at its next round.
    pub fn eviction_failed(&mut self, uid: &str) {
        self.state.pod_cleaned_up(uid);
        let Some(id) = self.pods.id(uid) else {
            return;
        };
        let row = self.pods.get_mut(id).expect("listed id");
        // An unlisted pod stays in flight until its cgroup is empty.
        if !row.evicted || row.stopped || !row.listed {
            return;
        }
        row.evicted = false;
        self.rankings.upsert_pod_shared(&row.facts);
        self.rerank(id);
    }

    /// Processes of `uid` outlived force (frozen where they could not be thawed, asleep in
    /// the kernel): their SIGKILL is pending, and they end whenever they leave that state.
    /// The wait for its cleanup ends, so the next pod in the kubelet's order goes at the next
    /// eviction interval; this one stays out of the rankings (evicted, not stopped) until its
    /// cgroup is empty ([`Self::evictions_to_settle`]): killing it again would free nothing.
    pub fn eviction_stuck(&mut self, uid: &str) {
        self.state.pod_cleaned_up(uid);
        if self
            .pods
            .by_uid(uid)
            .is_some_and(|row| row.evicted && !row.stopped)
        {
            self.stuck.insert(uid.to_string());
        }
    }

    /// The cgroup of `uid` holds no process (or is gone): its eviction is over. The wait for
    /// its cleanup ends, and a pod no longer listed is forgotten; one still listed stays out
    /// of the rankings as stopped.
    pub fn eviction_over(&mut self, uid: &str) {
        self.state.pod_cleaned_up(uid);
        self.stuck.remove(uid);
        self.mark_stopped(uid);
        if self.pods.by_uid(uid).is_some_and(|row| !row.listed) {
            self.remove_pod(uid);
        }
    }

    /// Forgets unlisted pods whose eviction is no longer in flight (its cleanup wait timed
    /// out and nothing of this agent is stopping it).
    pub(super) fn forget_settled_unlisted(&mut self) {
        let settled: Vec<String> = self
            .unlisted
            .iter()
            .filter(|uid| !self.in_flight(uid))
            .cloned()
            .collect();
        for uid in settled {
            self.remove_pod(&uid);
        }
    }

    /// Marks a pod as stopped by this agent: it leaves the rankings for as long as it stays in
    /// the pod set, as an evicted pod leaves the kubelet's active pods. Its cgroup still
    /// counts towards the node and kubepods working sets.
    pub fn mark_evicted(&mut self, uid: &str) {
        if let Some(row) = self.pods.by_uid_mut(uid) {
            row.evicted = true;
            self.rankings.remove(uid);
        }
    }

    /// Records that an evicted pod's cgroup is empty: from now on, processes in it mean the
    /// pod runs again.
    pub fn mark_stopped(&mut self, uid: &str) {
        if let Some(row) = self.pods.by_uid_mut(uid)
            && row.evicted
        {
            row.stopped = true;
        }
    }

    /// Whether a kernel record of this cgroup may mean a stopped pod runs again.
    pub fn belongs_to_stopped_pod(&self, cgroup_id: u64) -> bool {
        self.usage
            .pod_of(cgroup_id)
            .and_then(|id| self.pods.get(id))
            .is_some_and(|row| row.stopped)
    }

    /// The stopped pods and their cgroups, to look for processes that came back.
    pub fn stopped_pods(&self) -> Vec<(String, CgroupRel)> {
        self.pods
            .rows()
            .filter(|row| row.stopped)
            .filter_map(|row| {
                let rel = row.cgroup.as_ref()?.rel.clone();
                Some((row.facts.pod.uid.clone(), rel))
            })
            .collect()
    }

    /// A stopped pod runs again (its containers were restarted): it ranks by the kubelet's
    /// order again instead of growing unseen.
    pub fn runs_again(&mut self, uid: &str) {
        let Some(id) = self.pods.id(uid) else {
            return;
        };
        let row = self.pods.get_mut(id).expect("listed id");
        if !row.stopped || !row.evicted {
            return;
        }
        row.stopped = false;
        row.evicted = false;
        self.rankings.upsert_pod_shared(&row.facts);
        self.rerank(id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use monitor_common::Stat;

    use super::*;
    use crate::{
        decide::{Action, Idle},
        eviction_machine::tests::{MI, READ_NS, cgroup, clock, core, facts, read, stats},
        instant::ManualClock,
        signal::Signal,
    };

    #[test]
    fn one_pod_per_interval_and_none_while_cleaning_up() {
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 900 * MI)]));
        let clock = clock();
        assert!(c.decide(&clock).eviction().is_some());
        assert!(matches!(
            c.decide(&clock).action,
            Action::Idle(Idle::WaitingForCleanup(_))
        ));
        c.set_pods(pod_set(false));
        c.apply_stats(&stats(&[(11, Stat::Anon, 900 * MI)]));
        assert!(
            matches!(
                c.decide(&clock).action,
                Action::Idle(Idle::WaitingForCleanup(_))
            ),
            "unlisted is not gone"
        );
        c.eviction_over("uid-over-high");
        assert!(matches!(
            c.decide(&clock).action,
            Action::Idle(Idle::WaitingForInterval)
        ));
        clock.advance(Duration::from_secs(10));
        assert_eq!(
            c.decide(&clock).eviction().map(|e| e.pod.name.clone()),
            Some("big-low".into())
        );
    }

    /// The shell cannot reach into the core's state: it says what happened and the core
    /// changes itself. A dry run leaves no grace period to wait out; a failed eviction ends
    /// the wait for its pod, which stays a candidate.
    #[test]
    fn the_shell_reports_and_the_core_changes_its_own_state() {
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 850 * MI)]));
        let clock = clock();
        let first = c.decide(&clock).eviction().map(|e| e.pod.name.clone());
        assert_eq!(first.as_deref(), Some("over-high"));
        let pending = c
            .state()
            .awaiting_cleanup
            .clone()
            .expect("an eviction in flight");
        assert!(pending.grace_period_seconds > 0, "{pending:?}");
        c.nothing_signalled();
        assert_eq!(
            c.state()
                .awaiting_cleanup
                .as_ref()
                .map(|p| p.grace_period_seconds),
            Some(0)
        );
        c.eviction_failed("uid-other");
        assert!(
            c.state().awaiting_cleanup.is_some(),
            "another pod's failure"
        );
        c.eviction_failed("uid-over-high");
        assert_eq!(c.state().awaiting_cleanup, None);
        assert_eq!(c.actionable("uid-over-high"), Ok(()));
    }

    #[test]
    fn pods_without_a_cgroup_rank_as_missing_stats() {
        let mut c = core();
        c.set_pods(vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (facts("no-cgroup", 0, 600, false), None),
        ]);
        c.apply_stats(&stats(&[(11, Stat::Anon, 900 * MI)]));
        let order: Vec<_> = c
            .ranking(Signal::AllocatableMemoryAvailable)
            .iter()
            .map(|(f, _)| f.pod.name.clone())
            .collect();
        assert_eq!(order, ["no-cgroup", "big-low"]);
    }

    #[test]
    fn a_pod_stopped_by_the_agent_is_not_chosen_again_while_listed() {
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 300 * MI)]));
        c.apply_stats(&stats(&[(11, Stat::Anon, 550 * MI)]));
        let clock = clock();
        let first = c.decide(&clock).eviction().map(|e| e.pod.name.clone());
        assert_eq!(first.as_deref(), Some("over-high"));
        c.mark_evicted("uid-over-high");
        // Killed: its working set is gone, but it stays in the pod set (a manifest).
        c.set_pod_reading("uid-over-high", read(0, 0), READ_NS);
        c.eviction_over("uid-over-high");
        c.set_pods(vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (
                facts("over-high", 1000, 100, false),
                cgroup(20, "over-high"),
            ),
        ]);
        c.apply_stats(&stats(&[(11, Stat::Anon, 300 * MI)]));
        clock.advance(Duration::from_secs(10));
        let names = |c: &AgentCore| -> Vec<String> {
            c.ranking(Signal::AllocatableMemoryAvailable)
                .iter()
                .map(|(f, _)| f.pod.name.clone())
                .collect()
        };
        assert_eq!(names(&c), ["big-low"]);
        assert_eq!(
            c.decide(&clock).eviction().map(|e| e.pod.name.clone()),
            Some("big-low".into())
        );
        assert_eq!(
            c.pod_working_set("uid-over-high"),
            Some(0),
            "still read and counted"
        );
        // Once it leaves the pod set and comes back (a new pod with the same uid), it ranks.
        c.set_pods(vec![(
            facts("big-low", 0, 600, false),
            cgroup(10, "big-low"),
        )]);
        c.set_pods(vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (
                facts("over-high", 1000, 100, false),
                cgroup(20, "over-high"),
            ),
        ]);
        assert_eq!(names(&c).len(), 2);
    }

    /// The three pods of [`core`] but over-high, or all of them.
    fn pod_set(with_over_high: bool) -> Vec<(PodFacts, Option<PodCgroup>)> {
        let mut pods = vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (
                facts("critical", 2_000_000_000, 10, true),
                cgroup(30, "critical"),
            ),
        ];
        if with_over_high {
            pods.push((
                facts("over-high", 1000, 100, false),
                cgroup(20, "over-high"),
            ));
        }
        pods
    }

    /// over-high (300Mi over its 100Mi request) evicted by a cgroup kill, big-low next in
    /// line; the clock at the decision.
    fn over_high_being_killed() -> (AgentCore, ManualClock) {
        let mut c = core();
        c.apply_stats(&stats(&[
            (21, Stat::Anon, 300 * MI),
            (11, Stat::Anon, 550 * MI),
        ]));
        let clock = clock();
        let first = c.decide(&clock).eviction().map(|e| e.pod.name.clone());
        assert_eq!(first.as_deref(), Some("over-high"));
        c.mark_evicted("uid-over-high");
        (c, clock)
    }

    fn decided(c: &mut AgentCore, clock: &ManualClock) -> Option<String> {
        c.decide(clock).eviction().map(|e| e.pod.name.clone())
    }

    #[test]
    fn a_victim_that_leaves_the_listing_holds_the_next_eviction_until_its_cgroup_is_empty() {
        let (mut c, clock) = over_high_being_killed();
        let changes = c.set_pods(pod_set(false));
        assert_eq!(changes.removed, ["uid-over-high"]);
        clock.advance(Duration::from_secs(12));
        assert!(
            matches!(
                c.decide(&clock).action,
                Action::Idle(Idle::WaitingForCleanup(ref pod)) if pod.name == "over-high"
            ),
            "its manifest went, its processes did not"
        );
        assert_eq!(
            c.pod_working_set("uid-over-high"),
            Some(300 << 20),
            "still read"
        );
        let unlisted = c.evictions_to_settle();
        assert_eq!(unlisted.len(), 1);
        assert_eq!(unlisted[0].0.name, "over-high");
        assert_eq!(
            unlisted[0].1,
            Some(CgroupRel::new("/kubepods/burstable/pod-over-high").unwrap()),
            "the cgroup the eviction is keyed by"
        );
        assert!(
            !c.ranking(Signal::AllocatableMemoryAvailable)
                .iter()
                .any(|(f, _)| f.pod.name == "over-high")
        );
        c.eviction_over("uid-over-high");
        assert!(c.pod("uid-over-high").is_none(), "forgotten once empty");
        assert!(c.evictions_to_settle().is_empty());
        assert_eq!(decided(&mut c, &clock), Some("big-low".into()));
    }

    #[test]
    fn a_victim_listed_again_with_its_uid_is_not_decided_on_again() {
        let (mut c, clock) = over_high_being_killed();
        c.set_pods(pod_set(false));
        let changes = c.set_pods(pod_set(true));
        assert_eq!(changes.added, ["uid-over-high"]);
        assert!(c.evictions_to_settle().is_empty(), "listed again");
        clock.advance(Duration::from_secs(12));
        assert!(matches!(
            c.decide(&clock).action,
            Action::Idle(Idle::WaitingForCleanup(_))
        ));
        // Its kill ends: still listed, it stays stopped and out of the rankings.
        c.eviction_over("uid-over-high");
        assert!(c.pod("uid-over-high").is_some_and(|row| row.stopped));
        assert_eq!(decided(&mut c, &clock), Some("big-low".into()));
    }

    #[test]
    fn an_unlisted_pod_whose_wait_timed_out_is_forgotten_unless_still_being_killed() {
        // A dry run: the decision names the pod, nothing stops it. After the grace period
        // and the cleanup timeout the wait ends, and the unlisted pod is forgotten.
        let mut c = core();
        c.apply_stats(&stats(&[
            (21, Stat::Anon, 300 * MI),
            (11, Stat::Anon, 550 * MI),
        ]));
        let clock = clock();
        assert_eq!(decided(&mut c, &clock), Some("over-high".into()));
        c.set_pods(pod_set(false));
        assert_eq!(c.evictions_to_settle().len(), 1);
        clock.advance(Duration::from_secs(32));
        assert_eq!(decided(&mut c, &clock), Some("big-low".into()));
        assert!(c.pod("uid-over-high").is_none());

        // A cgroup kill whose processes survived force: the wait ends, the row stays until
        // its cgroup is empty.
        let (mut c, clock) = over_high_being_killed();
        c.set_pods(pod_set(false));
        c.eviction_stuck("uid-over-high");
        clock.advance(Duration::from_secs(12));
        assert_eq!(decided(&mut c, &clock), Some("big-low".into()));
        assert_eq!(c.evictions_to_settle().len(), 1, "still being killed");
    }

    #[test]
    fn a_listed_pod_whose_processes_outlived_force_is_passed_over_until_its_cgroup_is_empty() {
        let (mut c, clock) = over_high_being_killed();
        c.eviction_stuck("uid-other");
        assert!(c.state().awaiting_cleanup.is_some(), "another pod's kill");
        assert!(c.evictions_to_settle().is_empty());
        // Frozen, its SIGKILL pending: the next pod in the kubelet's order goes at the next
        // interval, never the stuck one again.
        c.eviction_stuck("uid-over-high");
        assert_eq!(c.state().awaiting_cleanup, None);
        assert_eq!(c.evictions_to_settle().len(), 1);
        assert!(
            matches!(
                c.decide(&clock).action,
                Action::Idle(Idle::WaitingForInterval)
            ),
            "one pod per interval"
        );
        clock.advance(Duration::from_secs(10));
        assert_eq!(decided(&mut c, &clock), Some("big-low".into()));
        // Thawed at last, it died of the pending SIGKILL: stopped, and revived if it runs
        // again.
        c.eviction_over("uid-over-high");
        assert!(c.evictions_to_settle().is_empty());
        assert_eq!(c.stopped_pods().len(), 1);
    }

    #[test]
    fn a_stopped_pod_that_runs_again_ranks_again() {
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 300 * MI)]));
        c.mark_evicted("uid-over-high");
        c.runs_again("uid-over-high");
        assert!(
            !c.ranking(Signal::AllocatableMemoryAvailable)
                .iter()
                .any(|(f, _)| f.pod.name == "over-high"),
            "still being killed: not stopped yet, so not back"
        );
        c.mark_stopped("uid-over-high");
        assert_eq!(
            c.stopped_pods(),
            [(
                "uid-over-high".to_string(),
                CgroupRel::new("/kubepods/burstable/pod-over-high").unwrap()
            )]
        );
        c.runs_again("uid-over-high");
        assert!(c.stopped_pods().is_empty());
        c.apply_stats(&stats(&[(21, Stat::Anon, 600 * MI)]));
        assert_eq!(
            c.decide(&clock()).eviction().map(|e| e.pod.name.clone()),
            Some("over-high".into()),
            "back over its request, it is the victim again"
        );
    }

    #[test]
    fn a_pod_whose_kill_failed_is_a_candidate_again_and_a_stopped_one_is_not() {
        let clock = clock();
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 900 * MI)]));
        assert_eq!(decided(&mut c, &clock), Some("over-high".into()));
        c.mark_evicted("uid-over-high");
        // The kill could not start (its cgroup unreadable).
        c.eviction_failed("uid-over-high");
        clock.advance(Duration::from_secs(10));
        assert_eq!(
            decided(&mut c, &clock),
            Some("over-high".into()),
            "still first by the kubelet's order, it is tried again"
        );
        c.mark_evicted("uid-over-high");
        c.mark_stopped("uid-over-high");
        c.eviction_failed("uid-over-high");
        assert!(
            !c.ranking(Signal::AllocatableMemoryAvailable)
                .iter()
                .any(|(f, _)| f.pod.name == "over-high"),
            "a stopped pod stays out until it runs again"
        );
    }
}
