//! The loop's steps around [`StatPrograms`](super::stat_programs::StatPrograms): the guard
//! read of the node's memory while the stat programs are off, and moving them on or off as
//! the headroom says.
use super::components::Agent;
use crate::system_clock::monotonic_ns;

impl Agent {
    /// True while the stat programs are loaded but off their hooks.
    pub(super) fn stats_detached(&self) -> bool {
        self.source.has_stat_programs() && !self.source.memory_from_kernel()
    }

    /// Reads the node's and the kubepods cgroup's working sets, not the pods', and when the
    /// guard reads next.
    pub(super) fn read_guard(&mut self) {
        let read_ns = monotonic_ns();
        let read = self.read_node();
        // A failed read knows no headroom: the next comes one guard period later.
        let headroom = if read {
            self.core.memory_headroom()
        } else {
            Some(0)
        };
        self.stat_programs.guard_read_found(read_ns, headroom);
    }

    /// The distance to a memory threshold within which the stat programs run (`None`: at
    /// all times, or there are none).
    pub(super) fn attach_within(&self) -> Option<u64> {
        if !self.source.has_stat_programs() {
            return None;
        }
        self.stat_programs.within()
    }

    /// Attaches or detaches the stat programs as the headroom says. After attaching, every
    /// pod is read: what changed while the programs were off was not counted. When they
    /// cannot be attached, every pod is read at each guard read instead, so a decision is
    /// never taken on old numbers.
    pub(super) fn move_stat_gate(&mut self) {
        if !self.source.has_stat_programs() {
            return;
        }
        let headroom = self.core.memory_headroom();
        let Some(kernel) = self.source.kernel.as_mut() else {
            return;
        };
        if self.stat_programs.move_gate(kernel.as_mut(), headroom) {
            self.read_cgroupfs(false);
        }
    }
}
