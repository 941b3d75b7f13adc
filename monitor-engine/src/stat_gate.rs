//! When the memcg stat programs must run: only while a memory threshold is near.
//!
//! Far from every threshold, the programs' records only refresh rankings and metrics, yet
//! every page fault pays for them. With `--attach-within D` the agent takes them off the
//! kernel while the headroom (see [`super::headroom`]) is above twice `D`, reads the node's
//! and the kubepods cgroup's memory at a short interval instead, and puts them back as soon
//! as the headroom is `D` or less, before any threshold can be met. The gap between `D` and
//! `2D` keeps a headroom that wavers around `D` from attaching and detaching at every read.

/// What to do with the stat programs after a reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateMove {
    Attach,
    Detach,
    Stay,
}

/// The rule for `--attach-within`: `None` keeps the programs attached at all times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatGate {
    pub within: Option<u64>,
}

impl StatGate {
    /// The move for programs that are `attached` now, given the headroom in bytes (`None`:
    /// no threshold watches memory).
    pub fn next(self, attached: bool, headroom: Option<u64>) -> GateMove {
        let Some(within) = self.within else {
            return GateMove::Stay;
        };
        match (attached, headroom) {
            (true, None) => GateMove::Detach,
            (true, Some(h)) if h > within.saturating_mul(2) => GateMove::Detach,
            (false, Some(h)) if h <= within => GateMove::Attach,
            _ => GateMove::Stay,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn gate_moves_per_case() {
        struct Case {
            name: &'static str,
            within: Option<u64>,
            attached: bool,
            headroom: Option<u64>,
            expect: GateMove,
        }
        let on = Some(512 * MIB);
        let cases = [
            Case {
                name: "without the flag the programs stay, however far",
                within: None,
                attached: true,
                headroom: Some(100_000 * MIB),
                expect: GateMove::Stay,
            },
            Case {
                name: "far beyond twice the distance: detach",
                within: on,
                attached: true,
                headroom: Some(1025 * MIB),
                expect: GateMove::Detach,
            },
            Case {
                name: "exactly twice the distance: stay attached",
                within: on,
                attached: true,
                headroom: Some(1024 * MIB),
                expect: GateMove::Stay,
            },
            Case {
                name: "between the distance and twice it, attached: stay",
                within: on,
                attached: true,
                headroom: Some(700 * MIB),
                expect: GateMove::Stay,
            },
            Case {
                name: "between the distance and twice it, detached: stay",
                within: on,
                attached: false,
                headroom: Some(700 * MIB),
                expect: GateMove::Stay,
            },
            Case {
                name: "at the distance, detached: attach",
                within: on,
                attached: false,
                headroom: Some(512 * MIB),
                expect: GateMove::Attach,
            },
            Case {
                name: "a threshold met (or a signal not observed), detached: attach",
                within: on,
                attached: false,
                headroom: Some(0),
                expect: GateMove::Attach,
            },
            Case {
                name: "no memory threshold at all: nothing to be near",
                within: on,
                attached: true,
                headroom: None,
                expect: GateMove::Detach,
            },
            Case {
                name: "no memory threshold, detached: stay detached",
                within: on,
                attached: false,
                headroom: None,
                expect: GateMove::Stay,
            },
            Case {
                name: "a huge distance does not overflow",
                within: Some(u64::MAX),
                attached: true,
                headroom: Some(u64::MAX),
                expect: GateMove::Stay,
            },
        ];
        for case in cases {
            let gate = StatGate {
                within: case.within,
            };
            assert_eq!(
                gate.next(case.attached, case.headroom),
                case.expect,
                "{}",
                case.name
            );
        }
    }
}
