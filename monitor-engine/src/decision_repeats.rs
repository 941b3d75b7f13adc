//! A dry run decides on the same pod at every eviction interval, since nothing it decides is
//! carried out: said each time, the log holds little else. This says which of those decisions
//! to say: the first of a series (the same pod and signal, decided again within
//! [`SUMMARY_EVERY`] of the last), then one summary each [`SUMMARY_EVERY`] with how many were
//! held back. What is printed for programs (`--output json`) keeps every decision, numbered.
use std::{collections::HashMap, time::Duration};

use crate::{instant::MonoInstant, signal::Signal};

/// How often a series is summed up; a pod not decided on again within it starts a new one.
pub(crate) const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// What to say of one decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    /// The first of its series: said in full.
    First,
    /// A repeat, held back; the `repeat`th decision of its series (2 the first repeat).
    Quiet { repeat: u64 },
    /// A repeat said as a summary: the `repeat`th of its series, which began at `since`;
    /// `held` decisions (this one included) went unsaid since the last line.
    Summary {
        repeat: u64,
        held: u64,
        since: MonoInstant,
    },
}

impl Say {
    /// The decision's number in its series, 1 for the first.
    pub fn repeat(self) -> u64 {
        match self {
            Say::First => 1,
            Say::Quiet { repeat } | Say::Summary { repeat, .. } => repeat,
        }
    }

    /// Whether the decision is said at all.
    pub fn is_said(self) -> bool {
        !matches!(self, Say::Quiet { .. })
    }
}

/// One pod decided on again and again for one signal.
#[derive(Debug, Clone, Copy)]
struct Series {
    began: MonoInstant,
    last_seen: MonoInstant,
    said_at: MonoInstant,
    decisions: u64,
    held: u64,
}

/// The series running now, by pod uid and signal; a series ends when its pod is not decided on
/// for [`SUMMARY_EVERY`], so there are never more than the pods decided on lately.
#[derive(Debug, Default)]
pub struct DecisionRepeats {
    series: HashMap<(String, Signal), Series>,
}

impl DecisionRepeats {
    /// Notes a decision on pod `uid` for `signal` at `now`, and says what to say of it.
    pub fn note(&mut self, uid: &str, signal: Signal, now: MonoInstant) -> Say {
        self.series
            .retain(|_, s| now.saturating_since(s.last_seen) <= SUMMARY_EVERY);
        let Some(series) = self.series.get_mut(&(uid.to_string(), signal)) else {
            self.series.insert(
                (uid.to_string(), signal),
                Series {
                    began: now,
                    last_seen: now,
                    said_at: now,
                    decisions: 1,
                    held: 0,
                },
            );
            return Say::First;
        };
        series.last_seen = now;
        series.decisions += 1;
        series.held += 1;
        if now.saturating_since(series.said_at) < SUMMARY_EVERY {
            return Say::Quiet {
                repeat: series.decisions,
            };
        }
        let say = Say::Summary {
            repeat: series.decisions,
            held: series.held,
            since: series.began,
        };
        series.said_at = now;
        series.held = 0;
        say
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "00000000-0000-4000-8000-000000000001";
    const OTHER: &str = "00000000-0000-4000-8000-000000000002";
    const MEMORY: Signal = Signal::AllocatableMemoryAvailable;

    fn at(seconds: u64) -> MonoInstant {
        MonoInstant::from_millis(seconds * 1000)
    }

    #[test]
    fn a_repeated_decision_is_said_once_then_summed_up_each_minute() {
        struct Case {
            name: &'static str,
            uid: &'static str,
            signal: Signal,
            at: u64,
            say: Say,
        }
        let case = |name, uid, signal, at, say| Case {
            name,
            uid,
            signal,
            at,
            say,
        };
        let cases = [
            case("the first", POD, MEMORY, 100, Say::First),
            case("5 s later", POD, MEMORY, 105, Say::Quiet { repeat: 2 }),
            case("another pod", OTHER, MEMORY, 106, Say::First),
            case(
                "the same pod, another signal",
                POD,
                Signal::PidAvailable,
                107,
                Say::First,
            ),
            case("10 s later", POD, MEMORY, 110, Say::Quiet { repeat: 3 }),
            case(
                "59 s after said",
                POD,
                MEMORY,
                159,
                Say::Quiet { repeat: 4 },
            ),
            case(
                "a minute after said",
                POD,
                MEMORY,
                160,
                Say::Summary {
                    repeat: 5,
                    held: 4,
                    since: at(100),
                },
            ),
            case(
                "after the summary",
                POD,
                MEMORY,
                165,
                Say::Quiet { repeat: 6 },
            ),
            case(
                "the next minute",
                POD,
                MEMORY,
                220,
                Say::Summary {
                    repeat: 7,
                    held: 2,
                    since: at(100),
                },
            ),
            case(
                "not decided for over a minute",
                POD,
                MEMORY,
                281,
                Say::First,
            ),
            case(
                "the new series repeats",
                POD,
                MEMORY,
                286,
                Say::Quiet { repeat: 2 },
            ),
        ];
        let mut repeats = DecisionRepeats::default();
        for c in cases {
            let say = repeats.note(c.uid, c.signal, at(c.at));
            assert_eq!(say, c.say, "{}", c.name);
            assert_eq!(
                say.is_said(),
                !matches!(c.say, Say::Quiet { .. }),
                "{}",
                c.name
            );
        }
        assert_eq!(
            repeats.series.len(),
            1,
            "series of pods no longer decided on are gone"
        );
    }

    #[test]
    fn every_decision_has_its_number() {
        assert_eq!(Say::First.repeat(), 1);
        assert_eq!(Say::Quiet { repeat: 4 }.repeat(), 4);
        let summary = Say::Summary {
            repeat: 9,
            held: 3,
            since: at(0),
        };
        assert_eq!(summary.repeat(), 9);
        assert!(summary.is_said() && Say::First.is_said());
    }
}
