//! How long the node can afford to give a victim before force.
//!
//! A hard threshold is met moments before the kernel's OOM point when a pod allocates fast,
//! and a victim that handles SIGTERM keeps allocating through its grace period: the kernel's
//! OOM killer then fires first. So the growth the kernel programs report over the last tens
//! of milliseconds is kept here, the time until the OOM point (the kubepods cgroup's limit
//! where it has one, the node's memory either way) is projected from it, and the grace period
//! is cut to what that time affords once an allowance for the kill itself is taken off.
use std::{collections::VecDeque, fmt, time::Duration};

use crate::units::bytes;

/// How far back the growth rate looks: long enough to smooth the steps the kernel programs
/// report in, short enough to follow a pod that just started allocating.
pub(crate) const WINDOW_NS: u64 = 50_000_000;
/// Samples closer than this replace each other, so the window holds at most about 50.
const SAMPLE_SPACING_NS: u64 = 1_000_000;
/// A rate over less than this is a step or two, not a trend.
const MIN_SPAN_NS: u64 = 5_000_000;
/// Taken off the projected time for the kill and the reap of the victim's memory: signal
/// delivery, the exit, and the headroom the rate's error needs when a pod speeds up.
pub const KILL_ALLOWANCE: Duration = Duration::from_millis(100);

/// Working sets at one instant (CLOCK_MONOTONIC nanoseconds of the record that moved them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sample {
    at_ns: u64,
    kubepods: u64,
    node: u64,
}

/// Where the kernel starts killing: the kubepods cgroup's memory limit, when it has one, and
/// the node's memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OomPoints {
    pub(crate) kubepods_limit: Option<u64>,
    pub(crate) node_memory: u64,
}

/// Where the kernel's OOM killer would act first: in the kubepods cgroup (a memory cgroup
/// OOM among the pods' processes) or on the whole node (every process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OomDomain {
    Kubepods,
    Node,
}

impl OomDomain {
    pub fn as_str(self) -> &'static str {
        match self {
            OomDomain::Kubepods => "kubepods",
            OomDomain::Node => "node",
        }
    }
}

impl OomPoints {
    /// The OOM point fewer bytes away for these working sets, and the memory the kernel
    /// scales `oom_score_adj` by there (the cgroup's limit, or the node's memory).
    pub(crate) fn nearest(&self, kubepods: u64, node: u64) -> (OomDomain, u64) {
        let node_left = self.node_memory.saturating_sub(node);
        match self.kubepods_limit {
            Some(limit) if limit.saturating_sub(kubepods) <= node_left => {
                (OomDomain::Kubepods, limit)
            }
            _ => (OomDomain::Node, self.node_memory),
        }
    }
}

/// The last [`WINDOW_NS`] of the node and kubepods working sets.
#[derive(Clone, Debug, Default)]
pub(crate) struct GrowthWindow {
    samples: VecDeque<Sample>,
}

/// How far the nearest OOM point is, in time and bytes, at the rate it is approached.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Projection {
    /// From `now` until the working set reaches the OOM point.
    pub until_oom: Duration,
    pub bytes_left: u64,
    pub bytes_per_s: f64,
}

/// Growth of the working sets over a lead time (see [`GrowthWindow::growth_ahead`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct GrowthAhead {
    pub(crate) kubepods: u64,
    pub(crate) node: u64,
    pub(crate) kubepods_bps: f64,
    pub(crate) node_bps: f64,
}

/// The grace period a victim gets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Grace {
    /// All of it: nothing grows, or the OOM point is far enough.
    Full(Duration),
    /// Cut from `from` to `to`: the OOM point is nearer than the grace period.
    Cut {
        from: Duration,
        to: Duration,
        projection: Projection,
    },
}

impl GrowthWindow {
    /// Records the working sets as they stand after a record sent at `at_ns`.
    pub(crate) fn record(&mut self, at_ns: u64, kubepods: u64, node: u64) {
        let last_ns = self.samples.back().map_or(0, |s| s.at_ns);
        // Records from different CPUs can come a little out of order.
        let at_ns = at_ns.max(last_ns);
        let sample = Sample {
            at_ns,
            kubepods,
            node,
        };
        let len = self.samples.len();
        if len >= 2 && at_ns - self.samples[len - 2].at_ns < SAMPLE_SPACING_NS {
            self.samples[len - 1] = sample;
        } else {
            self.samples.push_back(sample);
        }
        // One sample at or before the window's start stays, so the span covers the window.
        while self
            .samples
            .get(1)
            .is_some_and(|s| s.at_ns + WINDOW_NS <= at_ns)
        {
            self.samples.pop_front();
        }
    }

    /// The kubepods and node working sets' growth over the window in bytes per second (0
    /// for one that did not grow), and the last sample; `None` when the window is too short
    /// to tell a rate.
    fn rates(&self) -> Option<(f64, f64, Sample)> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        // No record between the two means nothing moved by a step: a sample older than the
        // window stands for the window's start, so a pod that starts allocating after a quiet
        // spell is measured at its new pace, not averaged with the quiet.
        let span_ns = last.at_ns - first.at_ns.max(last.at_ns.saturating_sub(WINDOW_NS));
        if span_ns < MIN_SPAN_NS {
            return None;
        }
        let rate = |then: u64, now: u64| now.saturating_sub(then) as f64 * 1e9 / span_ns as f64;
        Some((
            rate(first.kubepods, last.kubepods),
            rate(first.node, last.node),
            *last,
        ))
    }

    /// How much the kubepods and node working sets will have grown `lead` after `now_ns`,
    /// counted from the last record at the window's rate; nothing while nothing grows.
    pub(crate) fn growth_ahead(&self, lead: Duration, now_ns: u64) -> GrowthAhead {
        let Some((kubepods_bps, node_bps, last)) = self.rates() else {
            return GrowthAhead::default();
        };
        let ahead = Duration::from_nanos(now_ns.saturating_sub(last.at_ns)) + lead;
        GrowthAhead {
            kubepods: (kubepods_bps * ahead.as_secs_f64()) as u64,
            node: (node_bps * ahead.as_secs_f64()) as u64,
            kubepods_bps,
            node_bps,
        }
    }

    /// The nearest OOM point at the growth over the window, as of `now_ns`; `None` when
    /// nothing that has an OOM point grows (or the window is too short to tell).
    pub(crate) fn project(&self, points: OomPoints, now_ns: u64) -> Option<Projection> {
        let (kubepods_bps, node_bps, last) = self.rates()?;
        let since_last = Duration::from_nanos(now_ns.saturating_sub(last.at_ns));
        let scope = |limit: u64, bytes_per_s: f64, now: u64| {
            if bytes_per_s <= 0.0 {
                return None;
            }
            let bytes_left = limit.saturating_sub(now);
            let until = Duration::from_secs_f64(bytes_left as f64 / bytes_per_s);
            Some(Projection {
                until_oom: until.saturating_sub(since_last),
                bytes_left,
                bytes_per_s,
            })
        };
        let kubepods = points
            .kubepods_limit
            .and_then(|limit| scope(limit, kubepods_bps, last.kubepods));
        let node = scope(points.node_memory, node_bps, last.node);
        [kubepods, node]
            .into_iter()
            .flatten()
            .min_by_key(|p| p.until_oom)
    }
}

/// The grace a victim can be given out of `grace`: cut to the projected time until the OOM
/// point less `allowance`, down to none.
pub fn affordable_grace(
    grace: Duration,
    projection: Option<Projection>,
    allowance: Duration,
) -> Grace {
    match projection {
        Some(projection) if projection.until_oom.saturating_sub(allowance) < grace => Grace::Cut {
            from: grace,
            to: projection.until_oom.saturating_sub(allowance),
            projection,
        },
        _ => Grace::Full(grace),
    }
}

impl Grace {
    /// The time between SIGTERM and force.
    pub fn duration(self) -> Duration {
        match self {
            Grace::Full(grace) => grace,
            Grace::Cut { to, .. } => to,
        }
    }
}

/// `1s`, `350ms`, `0s`.
fn short(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

impl fmt::Display for Projection {
    /// `the OOM point is 23 ms away at 2.1 GiB/s (48.0Mi left)`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the OOM point is {} ms away at {:.1} GiB/s ({} left)",
            self.until_oom.as_millis(),
            self.bytes_per_s / f64::from(1u32 << 30),
            bytes(i64::try_from(self.bytes_left).unwrap_or(i64::MAX))
        )
    }
}

impl fmt::Display for Grace {
    /// `grace 1s -> 0s: the OOM point is 23 ms away at 2.1 GiB/s (48.0Mi left)`, or
    /// `grace 1s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grace::Full(grace) => write!(f, "grace {}", short(*grace)),
            Grace::Cut {
                from,
                to,
                projection,
            } => write!(f, "grace {} -> {}: {projection}", short(*from), short(*to)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_oom_point_names_the_domain() {
        let gib = 1 << 30;
        let with_limit = OomPoints {
            kubepods_limit: Some(4 * gib),
            node_memory: 8 * gib,
        };
        let cases = [
            (
                "pods near their limit",
                with_limit,
                3 * gib,
                5 * gib,
                OomDomain::Kubepods,
            ),
            (
                "the node nearer",
                with_limit,
                gib,
                7 * gib + gib / 2,
                OomDomain::Node,
            ),
            (
                "no kubepods limit",
                OomPoints {
                    kubepods_limit: None,
                    node_memory: 8 * gib,
                },
                3 * gib,
                5 * gib,
                OomDomain::Node,
            ),
        ];
        for (name, points, kubepods, node, expected) in cases {
            assert_eq!(points.nearest(kubepods, node).0, expected, "{name}");
        }
        assert_eq!(with_limit.nearest(3 * gib, 5 * gib).1, 4 * gib);
    }

    const MS: u64 = 1_000_000;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const SECOND: Duration = Duration::from_secs(1);

    /// Kubepods limited to 248 MiB on an 8 GiB node.
    const POINTS: OomPoints = OomPoints {
        kubepods_limit: Some(248 * MIB),
        node_memory: 8 * GIB,
    };

    /// A window fed every millisecond for `ms` ms, kubepods (and the node with it, 1 GiB
    /// above) growing by `per_ms` bytes from `start`.
    fn grown(start: u64, per_ms: u64, ms: u64) -> GrowthWindow {
        let mut window = GrowthWindow::default();
        for t in 0..=ms {
            let ws = start + per_ms * t;
            window.record(t * MS, ws, ws + GIB);
        }
        window
    }

    #[test]
    fn projections_per_case() {
        struct Case {
            name: &'static str,
            window: GrowthWindow,
            points: OomPoints,
            now_ns: u64,
            /// Expected time until the OOM point, in ms (within 1 ms), or none.
            until_ms: Option<u64>,
        }
        let cases = [
            Case {
                name: "empty window",
                window: GrowthWindow::default(),
                points: POINTS,
                now_ns: 0,
                until_ms: None,
            },
            Case {
                name: "too short a span to tell a rate",
                window: grown(200 * MIB, 2 * MIB, 3),
                points: POINTS,
                now_ns: 3 * MS,
                until_ms: None,
            },
            Case {
                // 2 MiB/ms from 100 MiB for 50 ms: at 200 MiB, 48 MiB from the limit.
                name: "fast growth near the kubepods limit",
                window: grown(100 * MIB, 2 * MIB, 50),
                points: POINTS,
                now_ns: 50 * MS,
                until_ms: Some(24),
            },
            Case {
                name: "time since the last record counts",
                window: grown(100 * MIB, 2 * MIB, 50),
                points: POINTS,
                now_ns: 60 * MS,
                until_ms: Some(14),
            },
            Case {
                name: "only the window counts, not older growth",
                window: {
                    let mut w = grown(0, 4 * MIB, 25);
                    for t in 26..=200 {
                        w.record(t * MS, 100 * MIB, GIB + 100 * MIB);
                    }
                    w
                },
                points: POINTS,
                now_ns: 200 * MS,
                until_ms: None,
            },
            Case {
                // 1 MiB in the 50 ms since a quiet second: 20 MiB/s, 47 MiB away.
                name: "a burst after a quiet spell is measured over the window",
                window: {
                    let mut w = grown(200 * MIB, 0, 10);
                    w.record(1_000 * MS, 200 * MIB, GIB + 200 * MIB);
                    w.record(1_010 * MS, 201 * MIB, GIB + 201 * MIB);
                    w
                },
                points: POINTS,
                now_ns: 1_010 * MS,
                until_ms: Some(47 * 50),
            },
            Case {
                name: "a shrinking working set",
                window: {
                    let mut w = GrowthWindow::default();
                    for t in 0..=50 {
                        w.record(t * MS, 200 * MIB - t * MIB, 2 * GIB);
                    }
                    w
                },
                points: POINTS,
                now_ns: 50 * MS,
                until_ms: None,
            },
            Case {
                // No kubepods limit: the node's memory, 8 GiB - (1 GiB + 200 MiB) away.
                name: "without a kubepods limit the node's memory is the OOM point",
                window: grown(100 * MIB, 2 * MIB, 50),
                points: OomPoints {
                    kubepods_limit: None,
                    node_memory: 8 * GIB,
                },
                now_ns: 50 * MS,
                until_ms: Some((8 * GIB - GIB - 200 * MIB) / (2 * MIB)),
            },
            Case {
                name: "the nearer of the two points",
                window: grown(100 * MIB, 2 * MIB, 50),
                points: OomPoints {
                    kubepods_limit: Some(8 * GIB),
                    node_memory: GIB + 220 * MIB,
                },
                now_ns: 50 * MS,
                until_ms: Some(10),
            },
            Case {
                name: "past the limit already",
                window: grown(100 * MIB, 4 * MIB, 50),
                points: POINTS,
                now_ns: 50 * MS,
                until_ms: Some(0),
            },
        ];
        for case in cases {
            let got = case.window.project(case.points, case.now_ns);
            match (got, case.until_ms) {
                (None, None) => {}
                (Some(p), Some(want)) => {
                    let ms = p.until_oom.as_millis() as u64;
                    assert!(
                        ms.abs_diff(want) <= 1,
                        "{}: {ms} ms, want {want}",
                        case.name
                    );
                }
                (got, want) => panic!("{}: got {got:?}, want {want:?} ms", case.name),
            }
        }
    }

    #[test]
    fn growth_ahead_per_case() {
        // 2 MiB/ms of kubepods and node growth for 50 ms, asked 10 ms after the last record
        // for 40 ms more: 50 ms at 2 GiB/s (2 MiB/ms is 2000 MiB/s).
        let ahead = grown(100 * MIB, 2 * MIB, 50).growth_ahead(Duration::from_millis(40), 60 * MS);
        assert_eq!(ahead.kubepods, 100 * MIB, "{ahead:?}");
        assert_eq!(ahead.node, 100 * MIB, "{ahead:?}");
        assert_eq!(ahead.kubepods_bps, 2000.0 * MIB as f64);
        // Nothing grows: nothing ahead.
        let flat = grown(100 * MIB, 0, 50).growth_ahead(Duration::from_millis(40), 60 * MS);
        assert_eq!(flat, GrowthAhead::default());
        // Too short a window to tell a rate: nothing ahead either.
        let short = grown(100 * MIB, 2 * MIB, 3).growth_ahead(Duration::from_millis(40), 3 * MS);
        assert_eq!(short, GrowthAhead::default());
    }

    #[test]
    fn the_window_stays_short_however_many_records_come() {
        let mut window = GrowthWindow::default();
        for i in 0..100_000u64 {
            window.record(i * 10_000, i, i);
        }
        let most = usize::try_from(WINDOW_NS / SAMPLE_SPACING_NS).unwrap() + 3;
        assert!(window.samples.len() <= most, "{}", window.samples.len());
        let span = window.samples.back().unwrap().at_ns - window.samples[0].at_ns;
        assert!((WINDOW_NS..WINDOW_NS + 2 * MS).contains(&span), "{span}");
    }

    #[test]
    fn out_of_order_records_do_not_go_back_in_time() {
        let mut window = grown(100 * MIB, 2 * MIB, 50);
        window.record(10 * MS, 201 * MIB, GIB + 201 * MIB);
        let p = window.project(POINTS, 50 * MS).expect("growing");
        assert!(p.until_oom < Duration::from_millis(30), "{p:?}");
    }

    #[test]
    fn grace_per_case() {
        let projection = |ms: u64| Projection {
            until_oom: Duration::from_millis(ms),
            bytes_left: 48 * MIB,
            bytes_per_s: 2.0 * GIB as f64,
        };
        let allowance = Duration::from_millis(100);
        let cases = [
            ("nothing grows", None, SECOND),
            ("far from the OOM point", Some(projection(5_000)), SECOND),
            ("just far enough", Some(projection(1_100)), SECOND),
            (
                "near: cut to what is left",
                Some(projection(600)),
                Duration::from_millis(500),
            ),
            (
                "nearer than the allowance: force at once",
                Some(projection(23)),
                Duration::ZERO,
            ),
        ];
        for (name, projected, want) in cases {
            let grace = affordable_grace(SECOND, projected, allowance);
            assert_eq!(grace.duration(), want, "{name}: {grace}");
            assert_eq!(matches!(grace, Grace::Full(_)), want == SECOND, "{name}");
        }
    }

    #[test]
    fn a_cut_says_why_with_its_figures() {
        let grace = affordable_grace(
            SECOND,
            Some(Projection {
                until_oom: Duration::from_millis(23),
                bytes_left: 48 * MIB,
                bytes_per_s: 2.1 * GIB as f64,
            }),
            KILL_ALLOWANCE,
        );
        assert_eq!(
            grace.to_string(),
            "grace 1s -> 0s: the OOM point is 23 ms away at 2.1 GiB/s (48.0Mi left)"
        );
        assert_eq!(Grace::Full(SECOND).to_string(), "grace 1s");
    }
}
