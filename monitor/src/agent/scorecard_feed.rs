//! What a dry run feeds its shadow scorecard ([`super::shadow_score`]): each decision with
//! the named pod's ranking keys, each kernel OOM kill attributed to its pod, each of the
//! kubelet's evictions with the keys the agent sees for its pod, and the passing of time.
use std::fs;

use super::components::Agent;
use crate::{
    cgroupfs::procs::memory_cgroup_in_proc,
    engine::{
        decide::Eviction,
        pod_facts::PodRef,
        shadow::{KernelKill, KubeletEviction, Named},
        units::bytes,
    },
    system_clock::{unix_ns_now, unix_ns_of_monotonic},
};

impl Agent {
    /// A dry run's decision, at `decided_unix_ns` (the wall clock).
    pub(super) fn score_decision(&mut self, eviction: &Eviction, decided_unix_ns: u64) {
        if self.shadow.is_none() {
            return;
        }
        let named = Named {
            pod: eviction.pod.clone(),
            at_ns: decided_unix_ns,
            message: eviction.reason.clone(),
            keys: self
                .ranking_keys(&eviction.pod.uid)
                .unwrap_or_else(|| "not ranked".into()),
        };
        if let (Some(shadow), Some(metrics)) =
            (&mut self.shadow, &mut self.visibility.metrics.shadow)
        {
            shadow.decided(named, metrics);
        }
    }

    /// The kernel's OOM killer killed `pid` at `ts_ns` (CLOCK_MONOTONIC): its pod from the
    /// victim's memory cgroup as the kernel recorded it (6.8+), else from /proc while the
    /// victim is still there. Only kills in this node's pods are scored.
    pub(super) fn score_oom_kill(&mut self, pid: u32, comm: String, ts_ns: u64) {
        if self.shadow.is_none() {
            return;
        }
        let by_kernel = self
            .source
            .kernel
            .as_ref()
            .and_then(|kernel| kernel.oom_victim_cgroup(pid))
            .and_then(|cgroup_id| self.core.pods_holding(&[cgroup_id]))
            .and_then(|pods| pods.into_iter().next().map(|(pod, _)| pod));
        // A kill outside the pods (a service at its own limit, another tenant's cgroup) is
        // neither the kubelet's nor the agent's to prevent.
        let Some(pod) = by_kernel.or_else(|| self.pod_of_process(pid)) else {
            tracing::debug!("the kernel killed pid {pid}, in no pod of this node: not scored");
            return;
        };
        let dir = self
            .core
            .pod(&pod.uid)
            .and_then(|row| row.cgroup.as_ref())
            .map(|cgroup| self.hierarchy.dir(cgroup.rel.as_str()));
        let kill = KernelKill {
            pod: Some(pod.clone()),
            pid,
            comm,
            at_ns: unix_ns_of_monotonic(ts_ns),
            own_limit: false,
        };
        let version = self.hierarchy.version;
        if let (Some(shadow), Some(metrics)) =
            (&mut self.shadow, &mut self.visibility.metrics.shadow)
        {
            let pod_dir = dir.as_deref().map(|dir| (&pod, dir, version));
            shadow.kernel_killed(kill, pod_dir, metrics);
            shadow.keep_pods(|uid| self.core.pod(uid).is_some());
        }
    }

    /// The kubelet evicted a pod on this node.
    pub(super) fn score_kubelet_eviction(&mut self, mut eviction: KubeletEviction) {
        eviction.keys = self.ranking_keys(&eviction.pod.uid);
        if let (Some(shadow), Some(metrics)) =
            (&mut self.shadow, &mut self.visibility.metrics.shadow)
        {
            shadow.kubelet_evicted(eviction, metrics);
        }
    }

    /// Time passed: outcomes whose window is over become final.
    pub(super) fn score_time(&mut self) {
        if let (Some(shadow), Some(metrics)) =
            (&mut self.shadow, &mut self.visibility.metrics.shadow)
        {
            shadow.tick(unix_ns_now(), metrics);
        }
    }

    /// A pod's keys in the kubelet's memory order, in words: whether its working set exceeds
    /// its request, its priority, and by how much.
    fn ranking_keys(&self, uid: &str) -> Option<String> {
        let facts = &self.core.pod(uid)?.facts;
        let request = facts.memory_request.ceil_units();
        let keys = match self.core.pod_working_set(uid) {
            Some(working_set) => {
                let working_set = i64::try_from(working_set).unwrap_or(i64::MAX);
                let standing = if working_set > request {
                    "exceeds its request"
                } else {
                    "within its request"
                };
                format!(
                    "{standing} (working set {}, request {}), priority {}",
                    bytes(working_set),
                    bytes(request),
                    facts.priority
                )
            }
            None => format!(
                "no stats (ranked first), request {}, priority {}",
                bytes(request),
                facts.priority
            ),
        };
        Some(keys)
    }

    /// The pod whose cgroup holds the process, from `/proc/PID/cgroup`.
    fn pod_of_process(&self, pid: u32) -> Option<PodRef> {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let path = memory_cgroup_in_proc(&text, self.hierarchy.version)?;
        self.core.pods().find_map(|row| {
            let rel = row.cgroup.as_ref()?.rel.as_str();
            let inside = path == rel
                || path
                    .strip_prefix(rel)
                    .is_some_and(|rest| rest.starts_with('/'));
            inside.then(|| row.facts.pod.clone())
        })
    }
}
