//! The shell of [`StatGate`] (`--attach-within`): takes the kernel's memcg stat programs off
//! while no memory threshold is near, reads the node's memory every [`GUARD_PERIOD`]
//! meanwhile, and puts them back, then reads every pod, once one comes near. How near is the
//! operator's quantity, or by default the
//! [`AttachDistance`](crate::engine::attach_distance::AttachDistance) the agent derives.
use super::{reader::read_node, run::Agent};
use crate::{
    engine::attach_distance::{AttachDistance, AttachWithin, GUARD_PERIOD},
    engine::stat_gate::{GateMove, StatGate},
    engine::units::unsigned_bytes,
};

impl Agent {
    /// True while the stat programs are loaded but off their hooks.
    pub(super) fn stats_detached(&self) -> bool {
        self.source.has_stat_programs() && !self.source.memory_from_kernel()
    }

    /// Reads the node's and the kubepods cgroup's working sets, not the pods'.
    pub(super) fn read_guard(&mut self) {
        read_node(
            self.reader.as_ref(),
            &mut self.core,
            self.kubepods.rel.as_str(),
            &mut self.read_failures,
        );
    }

    /// The distance to a memory threshold within which the stat programs run (`None`: at
    /// all times, or there are none).
    pub(super) fn attach_within(&self) -> Option<u64> {
        if !self.source.has_stat_programs() {
            return None;
        }
        match self.args.attach_within {
            AttachWithin::Always => None,
            AttachWithin::Bytes(bytes) => Some(bytes),
            AttachWithin::Auto => Some(self.attach_distance.distance()),
        }
    }

    /// Attaches or detaches the stat programs as the headroom says. After attaching, every
    /// pod is read: what changed while the programs were off was not counted. When they
    /// cannot be attached, every pod is read at each guard read instead, so a decision is
    /// never taken on old numbers.
    pub(super) fn move_stat_gate(&mut self) {
        if !self.source.has_stat_programs() {
            return;
        }
        let gate = StatGate {
            within: self.attach_within(),
        };
        let headroom = self.core.memory_headroom();
        // Said only when the gate moves: while detached this runs at every guard read.
        let away = || {
            headroom.map_or_else(
                || "no threshold watches memory".to_string(),
                |h| format!("the nearest memory threshold is {} away", unsigned_bytes(h)),
            )
        };
        let distance = || distance_in_force(self.args.attach_within, &self.attach_distance);
        let Some(kernel) = self.source.kernel.as_mut() else {
            return;
        };
        match gate.next(kernel.stats_attached(), headroom) {
            GateMove::Stay => {}
            GateMove::Detach => match kernel.detach_stats() {
                Ok(()) => tracing::info!(
                    "memory stat programs detached: {}; reading node memory every \
                     {GUARD_PERIOD:?} until it is within {}",
                    away(),
                    distance()
                ),
                Err(e) => tracing::warn!(
                    "detaching the memory stat programs: {e}; reading node memory every \
                     {GUARD_PERIOD:?}, the pods at each resync"
                ),
            },
            GateMove::Attach => {
                match kernel.attach_stats() {
                    Ok(()) => {
                        self.stat_attach_failing = false;
                        tracing::info!(
                            "memory stat programs attached: {}, within {}; reading every pod",
                            away(),
                            distance()
                        );
                    }
                    Err(e) if !self.stat_attach_failing => {
                        self.stat_attach_failing = true;
                        tracing::warn!(
                            "attaching the memory stat programs: {e}; {}, so every pod is \
                             read every {GUARD_PERIOD:?} until they attach",
                            away()
                        );
                    }
                    Err(e) => tracing::debug!("attaching the memory stat programs: {e}"),
                }
                self.read_cgroupfs(false);
            }
        }
    }
}

/// The distance in force, said with its reasons when derived.
fn distance_in_force(within: AttachWithin, derived: &AttachDistance) -> String {
    match within {
        AttachWithin::Auto => derived.to_string(),
        AttachWithin::Bytes(bytes) => unsigned_bytes(bytes),
        AttachWithin::Always => "any distance".to_string(),
    }
}
