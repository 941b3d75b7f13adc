//! Evicted pods after the decision: restored after a restart, settled once empty, revived.
use std::{collections::HashSet, io};

use super::components::Agent;
use crate::{cgroupfs::procs::subtree_pids, engine::ids::CgroupRel};

impl Agent {
    /// After a restart: pods an acting agent evicted (the checkpoint's acting memory, whatever
    /// this agent's mode; never a dry run's decisions) that are still in the pod set but have
    /// no process left (or no cgroup) are taken as stopped, as they were before the restart,
    /// so they are not chosen again. A listed pod that runs (started again) ranks as usual.
    pub(super) fn restore_stopped_pods(&mut self) {
        let evicted: HashSet<&str> = self
            .checkpoint
            .saved()
            .acting
            .v1
            .recent_evictions
            .iter()
            .map(|r| r.pod.uid.as_str())
            .collect();
        let stopped: Vec<_> = self
            .core
            .pods()
            .filter(|p| evicted.contains(p.facts.pod.uid.as_str()))
            .filter(|p| match &p.cgroup {
                Some(c) => subtree_pids(&self.hierarchy.dir(&c.rel)).is_ok_and(|p| p.is_empty()),
                None => true,
            })
            .map(|p| p.facts.pod.clone())
            .collect();
        for pod in stopped {
            tracing::info!(
                pod.uid = %pod.uid,
                "pod {pod} was evicted before the restart and has not run since: not a candidate"
            );
            self.core.mark_evicted(&pod.uid);
            self.core.mark_stopped(&pod.uid);
        }
    }

    /// Evictions whose end is the pod's cgroup found empty: pods that left the pod set while
    /// their eviction was in flight (deleted, replaced, force-deleted), not when their
    /// listing went, and pods whose processes outlived force, once their pending SIGKILL
    /// ended them (thawed, woken). Until then a decision waits for an unlisted pod as for a
    /// listed one, and a stuck pod is not chosen again.
    pub(super) fn settle_evictions(&mut self) {
        for (pod, rel) in self.core.evictions_to_settle() {
            if self.no_process_left(rel.as_ref()) {
                tracing::info!(
                    pod.uid = %pod.uid,
                    "pod {pod} has no process left: its eviction is over"
                );
                self.core.eviction_over(&pod.uid);
            }
        }
    }

    /// Whether a pod's cgroup holds no process: it has none, it is gone, or it is empty. An
    /// unreadable cgroup is not taken as empty: its processes may hold memory.
    pub(super) fn no_process_left(&self, rel: Option<&CgroupRel>) -> bool {
        rel.is_none_or(|rel| match self.reader.process_count(rel.as_str()) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        })
    }

    /// Stopped pods whose cgroup holds processes again (the kubelet restarted their
    /// containers, per their restartPolicy) rank again by the kubelet's order.
    pub(super) fn revive_restarted_pods(&mut self) {
        for (uid, rel) in self.core.stopped_pods() {
            if self.reader.process_count(rel.as_str()).is_ok_and(|n| n > 0) {
                tracing::info!(
                    pod.uid = %uid,
                    "pod {uid} runs again after its eviction (containers restarted): a \
                     candidate again"
                );
                self.core.runs_again(&uid);
            }
        }
    }
}
