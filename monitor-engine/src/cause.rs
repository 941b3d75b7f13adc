//! What led to a decision: the reclaim stalls and growth bursts of the evicted pod's cgroups in
//! the moments before it, from the same kernel events `monitor trace` shows. Pure: times are
//! CLOCK_MONOTONIC nanoseconds passed in.
use monitor_common::Stat;
use serde::Serialize;

use crate::{
    burst::BurstDetector,
    incident::{Incident, RecentIncidents, Reclaim},
    units::bytes,
};

/// How far back a decision looks for its causes.
pub(crate) const LOOKBACK_NS: u64 = 30_000_000_000;
/// Growth faster than this over one second counts as a burst (the trace's default).
const BURST_BYTES_PER_SEC: u64 = 100 << 20;
const BURST_WINDOW_NS: u64 = 1_000_000_000;

/// The victim's stalls and bursts within [`LOOKBACK_NS`], and stalls anywhere on the node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// Reclaim stalls of the victim's own tasks (it hit its limit or the node's).
    pub stalls: usize,
    pub stall_ns: u64,
    /// Growth bursts of the victim's cgroups.
    pub bursts: usize,
    pub burst_growth_bytes: i64,
    /// Reclaim stalls of any task on the node: the pressure everyone felt.
    pub node_stalls: usize,
    pub node_stall_ns: u64,
}

impl Cause {
    /// `; after 2 growth bursts (+180.0Mi) of this pod and 7 reclaim stalls on the node (412ms)`
    /// or an empty string when the trace saw nothing.
    pub(crate) fn text(&self) -> String {
        let mut parts = Vec::new();
        if self.bursts > 0 {
            parts.push(format!(
                "{} growth burst{} (+{}) of this pod",
                self.bursts,
                plural(self.bursts),
                bytes(self.burst_growth_bytes)
            ));
        }
        if self.stalls > 0 {
            parts.push(format!(
                "{} reclaim stall{} of its own ({}ms)",
                self.stalls,
                plural(self.stalls),
                self.stall_ns / 1_000_000
            ));
        }
        if self.node_stalls > 0 {
            parts.push(format!(
                "{} reclaim stall{} on the node ({}ms)",
                self.node_stalls,
                plural(self.node_stalls),
                self.node_stall_ns / 1_000_000
            ));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("; after {}", parts.join(" and "))
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Stalls and bursts seen recently.
#[derive(Clone, Debug)]
pub struct CauseLog {
    bursts: BurstDetector,
    recent: RecentIncidents,
}

impl Default for CauseLog {
    fn default() -> Self {
        Self {
            bursts: BurstDetector::new(BURST_WINDOW_NS, BURST_BYTES_PER_SEC),
            recent: RecentIncidents::new(LOOKBACK_NS),
        }
    }
}

impl CauseLog {
    /// Feeds a stat event to the burst detector.
    pub fn stat(&mut self, cgroup_id: u64, stat: Stat, ts_ns: u64, delta_bytes: i64) {
        if let Some(burst) = self.bursts.observe(cgroup_id, stat, ts_ns, delta_bytes) {
            self.recent.record(Incident::Burst {
                cgroup_id,
                ts_ns: burst.ts_ns,
                growth_bytes: burst.growth_bytes,
            });
        }
    }

    /// Records a reclaim stall of a task in `cgroup_id`.
    pub fn stall(&mut self, cgroup_id: u64, reclaim: Reclaim, start_ns: u64, duration_ns: u64) {
        self.recent.record(Incident::Stall {
            cgroup_id,
            ts_ns: start_ns,
            duration_ns,
            reclaim,
            reclaimed_bytes: 0,
        });
    }

    /// Forgets a removed cgroup's burst window.
    pub fn forget(&mut self, cgroup_id: u64) {
        self.bursts.forget(cgroup_id);
    }

    /// What involved `cgroups` (a pod's subtree) and the node in the lookback before `now_ns`.
    pub fn explain(&self, cgroups: &[u64], now_ns: u64) -> Cause {
        let mut cause = Cause::default();
        for incident in self.recent.within(now_ns, LOOKBACK_NS) {
            let own = cgroups.contains(&incident.cgroup_id());
            match incident {
                Incident::Stall { duration_ns, .. } => {
                    cause.node_stalls += 1;
                    cause.node_stall_ns += duration_ns;
                    if own {
                        cause.stalls += 1;
                        cause.stall_ns += duration_ns;
                    }
                }
                Incident::Burst { growth_bytes, .. } if own => {
                    cause.bursts += 1;
                    cause.burst_growth_bytes += growth_bytes;
                }
                Incident::Burst { .. } => {}
            }
        }
        cause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const MIB: i64 = 1 << 20;

    #[test]
    fn a_pods_bursts_and_stalls_are_told_apart_from_the_nodes() {
        let mut log = CauseLog::default();
        // Pod cgroups 10 (pod) and 11 (container) grow 150 MiB within 500 ms.
        for i in 0..150 {
            log.stat(11, Stat::Anon, 1_000 * MS + i * 3 * MS, MIB);
        }
        log.stall(11, Reclaim::Memcg, 1_400 * MS, 20 * MS);
        log.stall(99, Reclaim::Direct, 1_450 * MS, 5 * MS);
        let cause = log.explain(&[10, 11], 2_000 * MS);
        assert_eq!((cause.bursts, cause.stalls, cause.node_stalls), (1, 1, 2));
        assert_eq!((cause.stall_ns, cause.node_stall_ns), (20 * MS, 25 * MS));
        assert!(cause.burst_growth_bytes >= 100 * MIB);
        assert_eq!(
            cause.text(),
            format!(
                "; after 1 growth burst (+{}) of this pod and 1 reclaim stall of its own (20ms) \
                 and 2 reclaim stalls on the node (25ms)",
                bytes(cause.burst_growth_bytes)
            )
        );
    }

    #[test]
    fn old_incidents_and_other_pods_do_not_count() {
        let mut log = CauseLog::default();
        log.stall(11, Reclaim::Memcg, 0, 10 * MS);
        let later = LOOKBACK_NS + 5_000 * MS;
        assert_eq!(log.explain(&[11], later), Cause::default());
        assert_eq!(Cause::default().text(), "");
        for i in 0..150 {
            log.stat(50, Stat::Anon, later + i * MS, MIB);
        }
        assert_eq!(log.explain(&[11], later + 200 * MS).bursts, 0);
    }
}
