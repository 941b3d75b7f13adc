//! The shell of [`StatGate`] (`--attach-within`): takes the kernel's memcg stat programs off
//! while no memory threshold is near, reads the node's memory every [`GUARD_READ_EVERY`]
//! meanwhile, and puts them back, then reads every pod, once one comes near. How near is the
//! operator's quantity, or by default the
//! [`AttachDistance`](crate::engine::attach_distance::AttachDistance) the agent derives.
use super::{
    reader::read_node,
    run::{Agent, GUARD_READ_EVERY},
};
use crate::{
    engine::attach_distance::AttachWithin,
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

    /// The distance in force, said with its reasons when derived.
    fn distance_in_force(&self) -> String {
        match self.args.attach_within {
            AttachWithin::Auto => self.attach_distance.to_string(),
            _ => unsigned_bytes(self.attach_within().unwrap_or(0)),
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
        let away = headroom.map_or_else(
            || "no threshold watches memory".to_string(),
            |h| format!("the nearest memory threshold is {} away", unsigned_bytes(h)),
        );
        let distance = self.distance_in_force();
        let Some(kernel) = self.source.kernel.as_mut() else {
            return;
        };
        match gate.next(kernel.stats_attached(), headroom) {
            GateMove::Stay => {}
            GateMove::Detach => match kernel.detach_stats() {
                Ok(()) => tracing::info!(
                    "memory stat programs detached: {away}; reading node memory every \
                     {GUARD_READ_EVERY:?} until it is within {distance}"
                ),
                Err(e) => tracing::warn!(
                    "detaching the memory stat programs: {e}; reading node memory every \
                     {GUARD_READ_EVERY:?}, the pods at each resync"
                ),
            },
            GateMove::Attach => {
                match kernel.attach_stats() {
                    Ok(()) => {
                        self.stat_attach_failing = false;
                        tracing::info!(
                            "memory stat programs attached: {away}, within {distance}; \
                             reading every pod"
                        );
                    }
                    Err(e) if !self.stat_attach_failing => {
                        self.stat_attach_failing = true;
                        tracing::warn!(
                            "attaching the memory stat programs: {e}; {away}, so every pod \
                             is read every {GUARD_READ_EVERY:?} until they attach"
                        );
                    }
                    Err(e) => tracing::debug!("attaching the memory stat programs: {e}"),
                }
                self.read_cgroupfs(false);
            }
        }
    }
}
