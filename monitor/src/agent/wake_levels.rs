//! When the kernel wakes the agent to read: the agent's rules over the engine's headrooms
//! (`crate::engine::headroom`, how far the signals are from their thresholds). The kernel
//! programs hold records back until the level set here is reached; the intake sets the
//! levels after each turn.

/// The last records (of `--step` bytes each) before a threshold could be met wake the agent
/// too, so it is already running when the crossing record comes: a wake-up from idle costs
/// about a millisecond on a virtual machine's halted vCPU.
const WAKE_MARGIN_STEPS: u64 = 4;

/// With `--predict`, the growth after which the kernel wakes the agent however far the
/// thresholds are: 16 MiB is 8 ms at 2 GiB/s, well inside the 50 ms the rate is taken over.
const PREDICT_WAKE_BYTES: u64 = 16 << 20;

/// How many times in a row the waiting records are read because the lowered wake-up level
/// was already reached, before the loop takes its other inputs again.
pub(super) const REARM_ROUNDS: usize = 8;

/// The working-set growth after which the kernel wakes the agent, from the memory headroom
/// (`None`: no memory threshold, no wake-up level).
pub(super) fn memory_wake_after(
    headroom: Option<u64>,
    step_bytes: u64,
    predicting: bool,
) -> Option<u64> {
    let margin = step_bytes.saturating_mul(WAKE_MARGIN_STEPS);
    let level = headroom.map(|h| h.saturating_sub(margin));
    if predicting {
        // A projection needs the agent running while the growth goes on, not only at the
        // threshold: woken at every step of it.
        return level.map(|h| h.min(PREDICT_WAKE_BYTES));
    }
    level
}

/// What the kernel's fork counter was last told, so it is armed again only when the pid
/// headroom changed or the counter fired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum ForkArming {
    /// Not armed since start, or its record came (the kernel disarms it then).
    #[default]
    Unknown,
    /// Disarmed: no pid threshold to wake for, or one is met.
    Disarmed,
    /// Armed to wake after this many tasks are created.
    ArmedAt(u64),
}

impl ForkArming {
    /// Takes the arming for `headroom` tasks (disarmed without one); true when it differs
    /// from the last, and the kernel must be told.
    pub(super) fn rearm(&mut self, headroom: Option<u64>) -> bool {
        let arming = headroom.map_or(ForkArming::Disarmed, ForkArming::ArmedAt);
        let changed = *self != arming;
        *self = arming;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::{
        ForkArming::{ArmedAt, Disarmed, Unknown},
        PREDICT_WAKE_BYTES, memory_wake_after,
    };

    const MI: u64 = 1 << 20;
    const STEP: u64 = 256 << 10;

    #[test]
    fn memory_wake_levels_by_case() {
        let cases = [
            ("no memory threshold", None, false, None),
            (
                "far: the headroom less four steps",
                Some(100 * MI),
                false,
                Some(99 * MI),
            ),
            ("within the margin: at once", Some(STEP), false, Some(0)),
            ("met: at once", Some(0), false, Some(0)),
            (
                "predicting, far: every 16Mi",
                Some(100 * MI),
                true,
                Some(PREDICT_WAKE_BYTES),
            ),
            (
                "predicting, near: the headroom's level",
                Some(10 * MI),
                true,
                Some(9 * MI),
            ),
            ("predicting, no memory threshold", None, true, None),
        ];
        for (name, headroom, predicting, want) in cases {
            assert_eq!(
                memory_wake_after(headroom, STEP, predicting),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn the_fork_counter_is_told_only_of_a_change() {
        let cases = [
            ("first arming", Unknown, Some(10), true, ArmedAt(10)),
            ("same headroom", ArmedAt(10), Some(10), false, ArmedAt(10)),
            ("headroom moved", ArmedAt(10), Some(7), true, ArmedAt(7)),
            ("threshold gone or met", ArmedAt(7), None, true, Disarmed),
            ("still disarmed", Disarmed, None, false, Disarmed),
            ("after it fired", Unknown, None, true, Disarmed),
        ];
        for (name, last, headroom, told, now) in cases {
            let mut arming = last;
            assert_eq!(arming.rearm(headroom), told, "{name}");
            assert_eq!(arming, now, "{name}");
        }
    }
}
