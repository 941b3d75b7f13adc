//! Time as the decision step sees it: a monotonic instant that is plain, serializable data.
use std::cell::Cell;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Milliseconds on a monotonic clock. The agent uses a system-wide clock (the kernel's
/// boot-time clock), so remembered instants stay meaningful across agent restarts until
/// the next reboot.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct MonoInstant {
    millis: u64,
}

impl MonoInstant {
    /// The instant `millis` milliseconds after the clock's origin.
    pub const fn from_millis(millis: u64) -> MonoInstant {
        MonoInstant { millis }
    }

    /// Milliseconds since the clock's origin.
    pub(crate) const fn as_millis(self) -> u64 {
        self.millis
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: MonoInstant) -> Duration {
        Duration::from_millis(self.millis.saturating_sub(earlier.millis))
    }

    /// This instant plus a duration, saturating.
    pub fn saturating_add(self, duration: Duration) -> MonoInstant {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        MonoInstant {
            millis: self.millis.saturating_add(millis),
        }
    }
}

/// A source of monotonic time.
pub trait Clock {
    /// The current instant.
    fn now(&self) -> MonoInstant;
}

/// A clock that only moves when told to: for tests and replays, and for pinning one decision
/// step to an instant read beforehand.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: Cell<MonoInstant>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: MonoInstant) -> ManualClock {
        ManualClock {
            now: Cell::new(start),
        }
    }

    /// Moves the clock forward.
    #[cfg(test)]
    pub(crate) fn advance(&self, by: Duration) {
        self.now.set(self.now.get().saturating_add(by));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> MonoInstant {
        self.now.get()
    }
}
