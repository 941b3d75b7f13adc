//! The shell of [`StatGate`] (`--attach-within`): takes the kernel's memcg stat programs off
//! while no memory threshold is near, reads the node's memory meanwhile (every
//! [`GUARD_PERIOD`] near the distance, less often farther away:
//! [`AttachDistance::guard_wait`]), and puts them back, then reads every pod, once one comes
//! near. How near is the operator's quantity, or by default the [`AttachDistance`] the agent
//! derives.
use super::event_source::KernelEvents;
use crate::{
    engine::attach_distance::{AttachDistance, AttachWithin, GUARD_PERIOD, GUARD_WAIT_MAX},
    engine::stat_gate::{GateMove, StatGate},
    engine::units::unsigned_bytes,
};

/// The gate's own state: the operator's setting, the distance derived from what the agent
/// saw, whether the last attach failed (said once per episode), and the guard's last read.
pub(super) struct StatPrograms {
    within: AttachWithin,
    derived: AttachDistance,
    attach_failing: bool,
    /// When the guard last read the node's memory (CLOCK_MONOTONIC ns), and the headroom it
    /// found.
    guard_read: Option<(u64, Option<u64>)>,
}

impl StatPrograms {
    /// The gate for `--attach-within`, on a node of `cpus` online CPUs.
    pub(super) fn new(within: AttachWithin, cpus: usize) -> Self {
        Self {
            within,
            derived: AttachDistance::new(cpus),
            attach_failing: false,
            guard_read: None,
        }
    }

    /// When the guard reads next (CLOCK_MONOTONIC ns): after its last read, the time the
    /// fastest growth needs to bring that headroom near, by today's distance and rate.
    pub(super) fn guard_due_ns(&self) -> u64 {
        let Some((read_ns, headroom)) = self.guard_read else {
            return 0;
        };
        let wait = self
            .derived
            .guard_wait(headroom, self.within().unwrap_or(0));
        read_ns.saturating_add(u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The guard read the node's memory at `read_ns` (CLOCK_MONOTONIC) and found `headroom`.
    pub(super) fn guard_read_found(&mut self, read_ns: u64, headroom: Option<u64>) {
        self.guard_read = Some((read_ns, headroom));
    }

    /// The distance to a memory threshold within which the programs run (`None`: always).
    pub(super) fn within(&self) -> Option<u64> {
        match self.within {
            AttachWithin::Always => None,
            AttachWithin::Bytes(bytes) => Some(bytes),
            AttachWithin::Auto => Some(self.derived.distance()),
        }
    }

    /// Counts the headroom at `now_ns` towards the fastest fall seen.
    pub(super) fn observe(&mut self, now_ns: u64, headroom: Option<u64>) {
        self.derived.observe(now_ns, headroom);
    }

    /// The time a read of every pod took, part of the derived distance.
    pub(super) fn read_all_took(&mut self, took: std::time::Duration) {
        self.derived.read_all_took(took);
    }

    /// Forgets the last headroom: a change of configuration or capacity is no fall.
    pub(super) fn forget_mark(&mut self) {
        self.derived.forget_mark();
    }

    /// Attaches or detaches the programs of `kernel` as `headroom` says. True when they
    /// were to be attached, whether that worked or not: every pod must then be read, as what
    /// changed while they were off was not counted (and, when they failed, nothing counts).
    pub(super) fn move_gate(
        &mut self,
        kernel: &mut dyn KernelEvents,
        headroom: Option<u64>,
    ) -> bool {
        let gate = StatGate {
            within: self.within(),
        };
        // Said only when the gate moves: while detached this runs at every guard read.
        let away = || {
            headroom.map_or_else(
                || "no threshold watches memory".to_string(),
                |h| format!("the nearest memory threshold is {} away", unsigned_bytes(h)),
            )
        };
        match gate.next(kernel.stats_attached(), headroom) {
            GateMove::Stay => false,
            GateMove::Detach => {
                match kernel.detach_stats() {
                    Ok(()) => tracing::info!(
                        "memory stat programs detached: {}; reading node memory as often as \
                         growth could bring it within {} (every {GUARD_PERIOD:?} near it, at \
                         most every {GUARD_WAIT_MAX:?})",
                        away(),
                        self.distance_in_force()
                    ),
                    Err(e) => tracing::warn!(
                        "detaching the memory stat programs: {e}; reading node memory every \
                         {GUARD_PERIOD:?}, the pods at each resync"
                    ),
                }
                false
            }
            GateMove::Attach => {
                match kernel.attach_stats() {
                    Ok(()) => {
                        self.attach_failing = false;
                        tracing::info!(
                            "memory stat programs attached: {}, within {}; reading every pod",
                            away(),
                            self.distance_in_force()
                        );
                    }
                    Err(e) if !self.attach_failing => {
                        self.attach_failing = true;
                        tracing::warn!(
                            "attaching the memory stat programs: {e}; {}, so every pod is \
                             read every {GUARD_PERIOD:?} until they attach",
                            away()
                        );
                    }
                    Err(e) => tracing::debug!("attaching the memory stat programs: {e}"),
                }
                true
            }
        }
    }

    /// The distance in force, said with its reasons when derived.
    fn distance_in_force(&self) -> String {
        match self.within {
            AttachWithin::Auto => self.derived.to_string(),
            AttachWithin::Bytes(bytes) => unsigned_bytes(bytes),
            AttachWithin::Always => "any distance".to_string(),
        }
    }
}
