//! Timers that must survive a restart: a soft threshold's grace period and the minimum interval
//! between evictions.
//!
//! Elapsed time is measured on the boot-time clock when the state has a mark from the current
//! boot, so a wall-clock step while the agent was down changes nothing. Otherwise (after a reboot,
//! or for a state migrated from version 1) it falls back to the wall clock. A wall clock that went
//! backwards counts as no time elapsed: the agent then waits longer rather than evicting early.
use std::time::Duration;

use super::state::{BootMarks, Memory, Now};

/// Where a soft threshold's grace period stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraceStatus {
    /// The signal is not past its soft threshold; no timer runs.
    NotObserved,
    /// The grace period runs for `remaining` more.
    Running { remaining: Duration },
    /// The grace period is over: the soft threshold now counts as met.
    Elapsed,
}

/// Returns the state of `signal`'s grace period of length `grace` at `now`.
pub fn soft_grace_status(state: &Memory, signal: &str, grace: Duration, now: &Now) -> GraceStatus {
    let Some(&first_unix_ms) = state.v1.soft_threshold_first_observed_unix_ms.get(signal) else {
        return GraceStatus::NotObserved;
    };
    let first_boot_ms = current_boot_marks(state, now)
        .and_then(|marks| marks.soft_threshold_first_observed_ms.get(signal).copied());
    let elapsed = elapsed_since(first_unix_ms, first_boot_ms, now);
    match grace.checked_sub(elapsed) {
        Some(remaining) if !remaining.is_zero() => GraceStatus::Running { remaining },
        _ => GraceStatus::Elapsed,
    }
}

/// Returns how much longer the next eviction must wait for `interval` to pass since the last
/// one, or `None` when an eviction is allowed now.
pub fn eviction_blocked_for(state: &Memory, interval: Duration, now: &Now) -> Option<Duration> {
    let last = state.v1.last_eviction.as_ref()?;
    let last_boot_ms = current_boot_marks(state, now).and_then(|marks| marks.last_eviction_ms);
    let elapsed = elapsed_since(last.evicted_at_unix_ms, last_boot_ms, now);
    interval
        .checked_sub(elapsed)
        .filter(|remaining| !remaining.is_zero())
}

fn current_boot_marks<'a>(state: &'a Memory, now: &Now) -> Option<&'a BootMarks> {
    state
        .boot
        .as_ref()
        .filter(|marks| marks.boot_id == now.boot_id)
}

fn elapsed_since(then_unix_ms: u64, then_boot_ms: Option<u64>, now: &Now) -> Duration {
    let elapsed_ms = match then_boot_ms {
        Some(then) => now.boot_ms.saturating_sub(then),
        None => now.unix_ms.saturating_sub(then_unix_ms),
    };
    Duration::from_millis(elapsed_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{SavedPod, migrate_v1_to_v2};

    const SIGNAL: &str = "memory.available";
    const T0: u64 = 1_700_000_000_000;
    const SECOND: u64 = 1_000;

    fn at(unix_ms: u64, boot_id: &str, boot_ms: u64) -> Now {
        Now {
            unix_ms,
            boot_id: boot_id.to_owned(),
            boot_ms,
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A state whose soft threshold was first observed, and whose last eviction happened, at
    /// wall time `T0` and boot time 500 s of boot "boot-a".
    fn observed_state() -> Memory {
        let then = at(T0, "boot-a", 500 * SECOND);
        let mut state = Memory::default();
        state.observe_soft_threshold(SIGNAL, &then);
        let pod = SavedPod {
            namespace: "default".into(),
            name: "web".into(),
            uid: "u1".into(),
        };
        state.record_eviction(pod, SIGNAL, 1 << 20, &then);
        state
    }

    fn without_boot_marks() -> Memory {
        migrate_v1_to_v2(observed_state().v1)
    }

    #[test]
    fn soft_grace_after_restart() {
        let grace = secs(30);
        let cases = [
            (
                "restart 10 s into the grace period keeps the timer",
                observed_state(),
                at(T0 + 10 * SECOND, "boot-a", 510 * SECOND),
                GraceStatus::Running {
                    remaining: secs(20),
                },
            ),
            (
                "wall clock stepped an hour ahead during the restart",
                observed_state(),
                at(T0 + 3_600 * SECOND, "boot-a", 510 * SECOND),
                GraceStatus::Running {
                    remaining: secs(20),
                },
            ),
            (
                "wall clock stepped back during the restart",
                observed_state(),
                at(T0 - 3_600 * SECOND, "boot-a", 525 * SECOND),
                GraceStatus::Running { remaining: secs(5) },
            ),
            (
                "grace period exactly over",
                observed_state(),
                at(T0 + 30 * SECOND, "boot-a", 530 * SECOND),
                GraceStatus::Elapsed,
            ),
            (
                "after a reboot the wall clock measures",
                observed_state(),
                at(T0 + 12 * SECOND, "boot-b", 3 * SECOND),
                GraceStatus::Running {
                    remaining: secs(18),
                },
            ),
            (
                "migrated version-1 state uses the wall clock",
                without_boot_marks(),
                at(T0 + 31 * SECOND, "boot-a", 501 * SECOND),
                GraceStatus::Elapsed,
            ),
            (
                "wall clock behind the observation counts as no time elapsed",
                without_boot_marks(),
                at(T0 - 5 * SECOND, "boot-a", 600 * SECOND),
                GraceStatus::Running {
                    remaining: secs(30),
                },
            ),
            (
                "signal never observed",
                Memory::default(),
                at(T0, "boot-a", 500 * SECOND),
                GraceStatus::NotObserved,
            ),
        ];
        for (name, state, now, expected) in cases {
            assert_eq!(
                soft_grace_status(&state, SIGNAL, grace, &now),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn eviction_interval_after_restart() {
        let interval = secs(60);
        let cases = [
            (
                "restart 5 s after an eviction still blocks",
                observed_state(),
                at(T0 + 5 * SECOND, "boot-a", 505 * SECOND),
                Some(secs(55)),
            ),
            (
                "wall clock stepped ahead does not unblock early",
                observed_state(),
                at(T0 + 3_600 * SECOND, "boot-a", 505 * SECOND),
                Some(secs(55)),
            ),
            (
                "interval exactly over",
                observed_state(),
                at(T0 + 60 * SECOND, "boot-a", 560 * SECOND),
                None,
            ),
            (
                "after a reboot the wall clock measures",
                observed_state(),
                at(T0 + 50 * SECOND, "boot-b", 2 * SECOND),
                Some(secs(10)),
            ),
            (
                "wall clock behind the eviction blocks for the whole interval",
                without_boot_marks(),
                at(T0 - SECOND, "boot-a", 900 * SECOND),
                Some(secs(60)),
            ),
            (
                "no eviction yet",
                Memory::default(),
                at(T0, "boot-a", 500 * SECOND),
                None,
            ),
        ];
        for (name, state, now, expected) in cases {
            assert_eq!(
                eviction_blocked_for(&state, interval, &now),
                expected,
                "{name}"
            );
        }
    }
}
