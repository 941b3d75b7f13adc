//! How near a memory threshold the stat programs must run when no operator says
//! (`--attach-within auto`, the default): as far as memory can grow while the agent is blind
//! to the pods.
//!
//! With the programs detached, the agent sees memory only at the guard read, every
//! [`GUARD_PERIOD`] near the distance; once a read finds the nearest memory threshold within
//! the distance, it attaches them and reads every pod, which takes time of its own. So the
//! distance is the fastest growth times that blind span: the guard period plus the last read
//! of every pod. Farther away the guard reads less often: only as often as the fastest
//! growth could bring the headroom to the distance ([`AttachDistance::guard_wait`]).
//! The fastest growth is the larger of what the node's CPUs can fault in
//! ([`PER_CPU_GROWTH`] each) and the fastest fall of the headroom the agent itself measured
//! over the last hour or two (a working set also grows when page cache turns active, which no
//! fault rate bounds).
use std::{fmt, time::Duration};

use crate::units::unsigned_bytes;

/// How often the node's memory is read while the stat programs are detached and the
/// headroom is near the distance.
pub const GUARD_PERIOD: Duration = Duration::from_millis(100);
/// The longest the guard waits between two reads, however far every threshold is: the node's
/// numbers in `/metrics` and the growth measured stay this fresh.
pub const GUARD_WAIT_MAX: Duration = Duration::from_secs(5);
/// Bytes per second one CPU can add to a working set by faulting anonymous memory. A
/// process writing fresh memory as fast as it can reaches about 2 GiB/s here; more per CPU
/// would need faster memory than any fault path has.
pub(crate) const PER_CPU_GROWTH: u64 = 2 << 30;
/// The read of every pod assumed before one was timed.
const FIRST_READ_ALLOWANCE: Duration = Duration::from_millis(100);
/// Growth is measured over at least this span: shorter ones hold a step or two, not a rate.
const RATE_SPAN_NS: u64 = 100_000_000;
/// The fastest growth seen is remembered for one to two of these.
const SEEN_WINDOW_NS: u64 = 3_600_000_000_000;

/// `--attach-within`: when the stat programs run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachWithin {
    /// Within the distance derived here.
    #[default]
    Auto,
    /// Within this many bytes of working-set growth.
    Bytes(u64),
    /// At all times.
    Always,
}

/// The derived distance and what it is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachDistance {
    cpus: u64,
    read_all: Option<Duration>,
    /// The fastest growth (bytes per second) seen in this window and in the one before.
    seen: [u64; 2],
    window_started_ns: Option<u64>,
    /// Where the last rate was measured from: (nanoseconds, headroom).
    mark: Option<(u64, u64)>,
}

impl AttachDistance {
    pub fn new(cpus: usize) -> Self {
        Self {
            cpus: u64::try_from(cpus.max(1)).unwrap_or(u64::MAX),
            read_all: None,
            seen: [0; 2],
            window_started_ns: None,
            mark: None,
        }
    }

    /// How long the last read of every pod took.
    pub fn read_all_took(&mut self, took: Duration) {
        self.read_all = Some(took);
    }

    /// Takes in the headroom to the nearest memory threshold at `at_ns` (`None`: no threshold
    /// watches memory). Its fall over the last span of at least [`RATE_SPAN_NS`] is growth.
    pub fn observe(&mut self, at_ns: u64, headroom: Option<u64>) {
        let window_start = *self.window_started_ns.get_or_insert(at_ns);
        if at_ns.saturating_sub(window_start) >= SEEN_WINDOW_NS {
            self.seen = [0, self.seen[0]];
            self.window_started_ns = Some(at_ns);
        }
        let Some(headroom) = headroom else {
            self.mark = None;
            return;
        };
        let Some((from_ns, from)) = self.mark else {
            self.mark = Some((at_ns, headroom));
            return;
        };
        let span_ns = at_ns.saturating_sub(from_ns);
        if span_ns < RATE_SPAN_NS {
            return;
        }
        let fell = u128::from(from.saturating_sub(headroom));
        let rate = fell * 1_000_000_000 / u128::from(span_ns);
        self.seen[0] = self.seen[0].max(u64::try_from(rate).unwrap_or(u64::MAX));
        self.mark = Some((at_ns, headroom));
    }

    /// Forgets where growth was measured from: the thresholds or the node's capacity changed,
    /// so the headroom's next move is no growth.
    pub fn forget_mark(&mut self) {
        self.mark = None;
    }

    /// What the node's CPUs can fault in, in bytes per second.
    pub(crate) fn fault_bound(&self) -> u64 {
        self.cpus.saturating_mul(PER_CPU_GROWTH)
    }

    /// The fastest growth measured in the last one to two windows.
    pub(crate) fn fastest_seen(&self) -> u64 {
        self.seen[0].max(self.seen[1])
    }

    /// How long the agent is blind to the pods' growth: a guard period and a read of all.
    pub(crate) fn blind_span(&self) -> Duration {
        GUARD_PERIOD + self.read_all.unwrap_or(FIRST_READ_ALLOWANCE)
    }

    /// The fastest growth assumed, in bytes per second: the CPUs' bound or the fastest seen.
    fn rate(&self) -> u64 {
        self.fault_bound().max(self.fastest_seen())
    }

    /// The distance at which the programs attach.
    pub fn distance(&self) -> u64 {
        let bytes = u128::from(self.rate()) * self.blind_span().as_nanos() / 1_000_000_000;
        u64::try_from(bytes).unwrap_or(u64::MAX)
    }

    /// How long after a guard read that found `headroom` the next may wait, the programs
    /// attaching `within` bytes of a threshold: the time the fastest growth needs to bring
    /// the headroom down to `within`, plus the one guard period the distance allows for. A
    /// read every [`GUARD_PERIOD`] finds the headroom at least `within` less one period of
    /// growth when the programs attach; so does this wait, with fewer reads far from every
    /// threshold. At least one guard period, at most [`GUARD_WAIT_MAX`] (also when no
    /// threshold watches memory).
    pub fn guard_wait(&self, headroom: Option<u64>, within: u64) -> Duration {
        let Some(headroom) = headroom else {
            return GUARD_WAIT_MAX;
        };
        let beyond = u128::from(headroom.saturating_sub(within));
        let ns = beyond * 1_000_000_000 / u128::from(self.rate().max(1));
        let until_within = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
        GUARD_PERIOD
            .saturating_add(until_within)
            .min(GUARD_WAIT_MAX)
    }
}

/// The distance with its reasons, for the log and `monitor doctor`.
impl fmt::Display for AttachDistance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (rate, why) = if self.fastest_seen() > self.fault_bound() {
            (self.fastest_seen(), "the fastest growth seen".to_string())
        } else {
            (
                self.fault_bound(),
                format!("{} CPUs at {}/s", self.cpus, unsigned_bytes(PER_CPU_GROWTH)),
            )
        };
        let read = match self.read_all {
            Some(took) => format!("{took:.0?} to read every pod"),
            None => format!("{FIRST_READ_ALLOWANCE:?} allowed to read every pod"),
        };
        write!(
            f,
            "{} ({}/s: {why}, for {:.0?}: the {GUARD_PERIOD:?} guard read and {read})",
            unsigned_bytes(self.distance()),
            unsigned_bytes(rate),
            self.blind_span(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const MS: u64 = 1_000_000;

    #[test]
    fn the_distance_is_the_cpus_fault_rate_over_the_blind_span() {
        struct Case {
            name: &'static str,
            cpus: usize,
            read_all: Option<Duration>,
            expect: u64,
        }
        let cases = [
            Case {
                name: "2 CPUs, no read timed yet: 4 GiB/s for 200ms",
                cpus: 2,
                read_all: None,
                expect: 4 * GIB / 5,
            },
            Case {
                name: "2 CPUs, every pod read in 150ms: 4 GiB/s for 250ms",
                cpus: 2,
                read_all: Some(Duration::from_millis(150)),
                expect: GIB,
            },
            Case {
                name: "64 CPUs, a 400ms read: 128 GiB/s for 500ms",
                cpus: 64,
                read_all: Some(Duration::from_millis(400)),
                expect: 64 * GIB,
            },
            Case {
                name: "no CPU reported counts as one",
                cpus: 0,
                read_all: Some(Duration::from_millis(100)),
                expect: 2 * GIB / 5,
            },
        ];
        for case in cases {
            let mut d = AttachDistance::new(case.cpus);
            if let Some(took) = case.read_all {
                d.read_all_took(took);
            }
            let got = d.distance();
            // Nanosecond rounding of the spans aside.
            assert!(got.abs_diff(case.expect) < 16, "{}: {got}", case.name);
        }
    }

    #[test]
    fn growth_faster_than_the_cpus_fault_widens_the_distance_for_an_hour_or_two() {
        let mut d = AttachDistance::new(1);
        d.read_all_took(Duration::from_millis(100));
        let base = d.distance();
        // Page cache turning active: 1 GiB of working set in 100ms, 10 GiB/s.
        d.observe(0, Some(8 * GIB));
        d.observe(100 * MS, Some(7 * GIB));
        assert_eq!(d.fastest_seen(), 10 * GIB);
        assert_eq!(d.distance(), 2 * GIB, "10 GiB/s over 200ms");
        assert!(d.to_string().contains("the fastest growth seen"), "{d}");
        // Still remembered in the next window, forgotten in the one after.
        d.observe(SEEN_WINDOW_NS + 200 * MS, Some(7 * GIB));
        assert_eq!(d.distance(), 2 * GIB);
        d.observe(2 * SEEN_WINDOW_NS + 300 * MS, Some(7 * GIB));
        assert_eq!(d.distance(), base);
    }

    #[test]
    fn growth_is_measured_over_spans_of_at_least_100ms_and_only_while_memory_is_watched() {
        let mut d = AttachDistance::new(1);
        d.observe(0, Some(4 * GIB));
        // 10 MiB in 1ms would read as 10 GiB/s: too short a span, the mark stays.
        d.observe(MS, Some(4 * GIB - 10 * MIB));
        assert_eq!(d.fastest_seen(), 0);
        d.observe(100 * MS, Some(4 * GIB - 100 * MIB));
        assert_eq!(d.fastest_seen(), GIB - 24 * MIB, "100 MiB in 100ms");
        // Headroom that grows is no growth.
        d.observe(300 * MS, Some(5 * GIB));
        assert_eq!(d.fastest_seen(), GIB - 24 * MIB);
        // No memory threshold, then one again: the jump between is no growth.
        d.observe(400 * MS, None);
        d.observe(500 * MS, Some(GIB));
        d.observe(600 * MS, Some(GIB));
        assert_eq!(d.fastest_seen(), GIB - 24 * MIB);
        // Thresholds changed: the fall to the new headroom is no growth either.
        d.forget_mark();
        d.observe(700 * MS, Some(10 * MIB));
        d.observe(800 * MS, Some(10 * MIB));
        assert_eq!(d.fastest_seen(), GIB - 24 * MIB);
    }

    #[test]
    fn the_guard_waits_as_long_as_the_fastest_growth_needs_to_reach_the_distance() {
        struct Case {
            name: &'static str,
            cpus: usize,
            headroom: Option<u64>,
            within: u64,
            wait_ms: u64,
        }
        let cases = [
            Case {
                name: "within the distance: every guard period",
                cpus: 2,
                headroom: Some(300 * MIB),
                within: 400 * MIB,
                wait_ms: 100,
            },
            Case {
                name: "at the distance: every guard period",
                cpus: 2,
                headroom: Some(400 * MIB),
                within: 400 * MIB,
                wait_ms: 100,
            },
            Case {
                name: "4 GiB beyond it at 4 GiB/s: a second and a period",
                cpus: 2,
                headroom: Some(4 * GIB + 400 * MIB),
                within: 400 * MIB,
                wait_ms: 1100,
            },
            Case {
                name: "the same on 8 CPUs: a quarter of the time",
                cpus: 8,
                headroom: Some(4 * GIB + 400 * MIB),
                within: 400 * MIB,
                wait_ms: 350,
            },
            Case {
                name: "far beyond it: at most five seconds",
                cpus: 2,
                headroom: Some(64 * GIB),
                within: 400 * MIB,
                wait_ms: 5000,
            },
            Case {
                name: "no threshold watches memory: at most five seconds",
                cpus: 2,
                headroom: None,
                within: 400 * MIB,
                wait_ms: 5000,
            },
        ];
        for c in cases {
            let d = AttachDistance::new(c.cpus);
            assert_eq!(
                d.guard_wait(c.headroom, c.within),
                Duration::from_millis(c.wait_ms),
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn a_faster_growth_seen_shortens_the_guards_wait() {
        let mut d = AttachDistance::new(1);
        let within = 400 * MIB;
        let far = Some(2 * GIB + within);
        assert_eq!(d.guard_wait(far, within), Duration::from_millis(1100));
        // 4 GiB fell in a second: twice the one CPU's bound.
        d.observe(0, Some(10 * GIB));
        d.observe(1000 * MS, Some(6 * GIB));
        assert_eq!(d.guard_wait(far, within), Duration::from_millis(600));
    }

    #[test]
    fn the_reasons_name_the_cpus_and_the_read() {
        let mut d = AttachDistance::new(2);
        assert_eq!(
            d.to_string(),
            "819.2Mi (4.0Gi/s: 2 CPUs at 2.0Gi/s, for 200ms: the 100ms guard read and 100ms \
             allowed to read every pod)"
        );
        d.read_all_took(Duration::from_millis(150));
        assert_eq!(
            d.to_string(),
            "1.0Gi (4.0Gi/s: 2 CPUs at 2.0Gi/s, for 250ms: the 100ms guard read and 150ms to read \
             every pod)"
        );
    }
}
