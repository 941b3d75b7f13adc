//! Recent stalls and bursts per cgroup, for linking the agent's decisions to the trace: "which
//! stalls and bursts involving cgroup X happened in the last N seconds". Pure: the caller passes
//! CLOCK_MONOTONIC times.
use std::collections::VecDeque;

/// Which reclaim a task stalled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reclaim {
    /// Global direct reclaim: the node is short of memory.
    Direct,
    /// Reclaim from a memory cgroup at its limit.
    Memcg,
}

/// A stall or burst the trace reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incident {
    /// A task of `cgroup_id` stalled in reclaim from `ts_ns` for `duration_ns`.
    Stall {
        cgroup_id: u64,
        ts_ns: u64,
        duration_ns: u64,
        reclaim: Reclaim,
        reclaimed_bytes: u64,
    },
    /// `cgroup_id` grew by `growth_bytes` in the burst window ending at `ts_ns`.
    Burst {
        cgroup_id: u64,
        ts_ns: u64,
        growth_bytes: i64,
    },
}

impl Incident {
    pub(crate) fn cgroup_id(&self) -> u64 {
        match self {
            Incident::Stall { cgroup_id, .. } | Incident::Burst { cgroup_id, .. } => *cgroup_id,
        }
    }

    /// When it ended: stalls end after their duration, bursts at their last growth.
    pub(crate) fn end_ns(&self) -> u64 {
        match self {
            Incident::Stall {
                ts_ns, duration_ns, ..
            } => ts_ns + duration_ns,
            Incident::Burst { ts_ns, .. } => *ts_ns,
        }
    }
}

/// Incidents of the last `retain_ns`, oldest first.
#[derive(Clone, Debug)]
pub struct RecentIncidents {
    retain_ns: u64,
    incidents: VecDeque<Incident>,
}

impl RecentIncidents {
    /// Keeps incidents that ended at most `retain_ns` before the newest one recorded.
    pub fn new(retain_ns: u64) -> Self {
        Self {
            retain_ns,
            incidents: VecDeque::new(),
        }
    }

    /// Records an incident and forgets those that fell out of the window.
    pub fn record(&mut self, incident: Incident) {
        let newest = incident.end_ns();
        // Stalls arrive when they end, so end times are close to ordered; keep them sorted.
        let at = self.incidents.partition_point(|i| i.end_ns() <= newest);
        self.incidents.insert(at, incident);
        let horizon = self
            .incidents
            .back()
            .map_or(0, Incident::end_ns)
            .saturating_sub(self.retain_ns);
        while self.incidents.front().is_some_and(|i| i.end_ns() < horizon) {
            self.incidents.pop_front();
        }
    }

    /// Incidents of `cgroup_id` that ended within `last_ns` before `now_ns`, oldest first.
    #[cfg(any(test, feature = "test-support"))]
    pub fn involving(&self, cgroup_id: u64, now_ns: u64, last_ns: u64) -> Vec<&Incident> {
        self.within(now_ns, last_ns)
            .filter(|i| i.cgroup_id() == cgroup_id)
            .collect()
    }

    /// Every incident that ended within `last_ns` before `now_ns`, oldest first.
    pub(crate) fn within(&self, now_ns: u64, last_ns: u64) -> impl Iterator<Item = &Incident> {
        let since = now_ns.saturating_sub(last_ns);
        self.incidents
            .iter()
            .filter(move |i| i.end_ns() >= since && i.end_ns() <= now_ns)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.incidents.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn stall(id: u64, ts: u64) -> Incident {
        Incident::Stall {
            cgroup_id: id,
            ts_ns: ts,
            duration_ns: S / 100,
            reclaim: Reclaim::Memcg,
            reclaimed_bytes: 0,
        }
    }

    fn burst(id: u64, ts: u64) -> Incident {
        Incident::Burst {
            cgroup_id: id,
            ts_ns: ts,
            growth_bytes: 1 << 27,
        }
    }

    #[test]
    fn questions_by_case() {
        let mut recent = RecentIncidents::new(60 * S);
        for incident in [
            stall(1, 10 * S),
            burst(2, 11 * S),
            stall(1, 40 * S),
            burst(1, 45 * S),
        ] {
            recent.record(incident);
        }
        let cases: [(&str, u64, u64, u64, Vec<Incident>); 4] = [
            (
                "last 10 s of cgroup 1",
                1,
                50 * S,
                10 * S,
                vec![stall(1, 40 * S), burst(1, 45 * S)],
            ),
            (
                "last minute of cgroup 1",
                1,
                50 * S,
                60 * S,
                vec![stall(1, 10 * S), stall(1, 40 * S), burst(1, 45 * S)],
            ),
            ("other cgroup", 2, 50 * S, 60 * S, vec![burst(2, 11 * S)]),
            ("nothing yet at that time", 1, 5 * S, 60 * S, vec![]),
        ];
        for (name, id, now, last, expected) in cases {
            let got: Vec<Incident> = recent
                .involving(id, now, last)
                .into_iter()
                .cloned()
                .collect();
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn old_incidents_are_forgotten_and_late_ones_sorted_in() {
        let mut recent = RecentIncidents::new(30 * S);
        recent.record(stall(1, 10 * S));
        recent.record(burst(1, 20 * S));
        recent.record(stall(1, 15 * S));
        let ends: Vec<u64> = recent
            .involving(1, 100 * S, 100 * S)
            .iter()
            .map(|i| i.end_ns())
            .collect();
        assert_eq!(ends, [10 * S + S / 100, 15 * S + S / 100, 20 * S]);
        recent.record(burst(3, 45 * S));
        assert_eq!(
            recent.len(),
            3,
            "the stall ending at 10 s is more than 30 s older than 45 s"
        );
        assert!(
            recent
                .involving(1, 45 * S, 60 * S)
                .iter()
                .all(|i| i.end_ns() >= 15 * S)
        );
    }
}
