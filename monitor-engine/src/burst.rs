//! Memory growth bursts: a cgroup whose memory grew faster than `--burst-rate` over the last
//! window, computed from the kernel's stat events (no kernel program of its own). A cgroup is
//! reported once when its rate crosses the threshold, and again only after the rate fell below
//! half of it, so one long burst is one record, not one per stat event.
use std::collections::{HashMap, VecDeque};

use monitor_common::Stat;

/// A cgroup crossed the growth threshold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Burst {
    pub cgroup_id: u64,
    /// Time of the stat event that crossed the threshold.
    pub ts_ns: u64,
    /// Growth within the window.
    pub growth_bytes: i64,
    /// `growth_bytes` per second of window.
    pub rate_bytes_per_sec: u64,
}

/// Per-cgroup sliding windows of charged memory (anon + file + kernel).
#[derive(Clone, Debug)]
pub struct BurstDetector {
    window_ns: u64,
    threshold_bytes_per_sec: u64,
    cgroups: HashMap<u64, Window>,
}

#[derive(Clone, Debug, Default)]
struct Window {
    deltas: VecDeque<(u64, i64)>,
    sum: i64,
    bursting: bool,
}

impl BurstDetector {
    pub fn new(window_ns: u64, threshold_bytes_per_sec: u64) -> Self {
        Self {
            window_ns: window_ns.max(1),
            threshold_bytes_per_sec,
            cgroups: HashMap::new(),
        }
    }

    /// Feeds one stat event; returns a burst when this event took the cgroup over the rate.
    /// Active/inactive file are parts of `File` and are not counted twice.
    pub fn observe(
        &mut self,
        cgroup_id: u64,
        stat: Stat,
        ts_ns: u64,
        delta_bytes: i64,
    ) -> Option<Burst> {
        if !matches!(stat, Stat::Anon | Stat::File | Stat::Kernel) {
            return None;
        }
        let window = self.cgroups.entry(cgroup_id).or_default();
        window.deltas.push_back((ts_ns, delta_bytes));
        window.sum += delta_bytes;
        while let Some(&(ts, delta)) = window.deltas.front()
            && ts + self.window_ns <= ts_ns
        {
            window.deltas.pop_front();
            window.sum -= delta;
        }
        let rate = (window.sum.max(0) as u128 * 1_000_000_000 / u128::from(self.window_ns)) as u64;
        if window.bursting {
            window.bursting = rate * 2 >= self.threshold_bytes_per_sec;
            return None;
        }
        if rate < self.threshold_bytes_per_sec || self.threshold_bytes_per_sec == 0 {
            return None;
        }
        window.bursting = true;
        Some(Burst {
            cgroup_id,
            ts_ns,
            growth_bytes: window.sum,
            rate_bytes_per_sec: rate,
        })
    }

    /// Forgets a removed cgroup.
    pub fn forget(&mut self, cgroup_id: u64) {
        self.cgroups.remove(&cgroup_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const MIB: i64 = 1 << 20;

    /// (ms, stat, MiB) events for cgroup 1 -> times (ms) of the bursts reported.
    fn bursts(events: &[(u64, Stat, i64)]) -> Vec<u64> {
        // 100 MiB/s over a 1 s window.
        let mut detector = BurstDetector::new(1000 * MS, 100 << 20);
        events
            .iter()
            .filter_map(|&(ms, stat, mib)| detector.observe(1, stat, ms * MS, mib * MIB))
            .map(|b| b.ts_ns / MS)
            .collect()
    }

    #[test]
    fn bursts_by_case() {
        use Stat::*;
        let steady: Vec<_> = (0..50).map(|i| (i * 100, Anon, 5)).collect();
        let fast: Vec<_> = (0..30).map(|i| (i * 10, Anon, 4)).collect();
        let mut twice = fast.clone();
        twice.extend((0..5).map(|i| (3000 + i * 100, Anon, -1)));
        twice.extend((0..30).map(|i| (5000 + i * 10, File, 4)));
        // (name, (ms, stat, MiB) events, burst times in ms)
        type Case = (&'static str, Vec<(u64, Stat, i64)>, Vec<u64>);
        let cases: [Case; 6] = [
            ("steady 50 MiB/s stays quiet", steady, vec![]),
            (
                "120 MiB within 300 ms is one burst at 100 MiB",
                fast,
                vec![240],
            ),
            ("a second burst after the rate fell", twice, vec![240, 5240]),
            (
                "inactive/active file moves are not growth",
                (0..30).map(|i| (i * 10, ActiveFile, 10)).collect(),
                vec![],
            ),
            (
                "frees cancel growth in the window",
                (0..40)
                    .map(|i| (i * 10, Anon, if i % 2 == 0 { 8 } else { -8 }))
                    .collect(),
                vec![],
            ),
            (
                "growth spread over 2 s is never 100 MiB in 1 s",
                (0..20).map(|i| (i * 100, Kernel, 9)).collect(),
                vec![],
            ),
        ];
        for (name, events, expected) in cases {
            assert_eq!(bursts(&events), expected, "{name}");
        }
    }

    #[test]
    fn a_burst_carries_its_window_growth() {
        let mut detector = BurstDetector::new(1000 * MS, 10 << 20);
        assert_eq!(detector.observe(7, Stat::Anon, 0, 4 * MIB), None);
        let burst = detector.observe(7, Stat::File, 500 * MS, 8 * MIB).unwrap();
        assert_eq!(
            burst,
            Burst {
                cgroup_id: 7,
                ts_ns: 500 * MS,
                growth_bytes: 12 * MIB,
                rate_bytes_per_sec: 12 << 20
            }
        );
        detector.forget(7);
        assert!(
            detector
                .observe(7, Stat::Anon, 600 * MS, 11 * MIB)
                .is_some(),
            "forgotten cgroups start over"
        );
    }
}
