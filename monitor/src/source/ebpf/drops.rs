//! Records that did not reach the agent: dropped by the kernel (ring full, map full) or not
//! decodable, summed over CPUs, in totals and as increments since the last ask.
use aya::maps::PerCpuArray;
use monitor_common::DropReason;

use super::KernelSource;

/// Counts of records that did not reach the agent as events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    /// Records the kernel could not send because the ring buffer was full. Any of them may
    /// have been a cgroup creation or removal: the reader should rescan the hierarchy.
    pub ring_full: u64,
    /// Stat updates not counted because `CGROUP_STATS` was full (the cgroup gets no records).
    pub map_full: u64,
    /// Records read from the ring that failed to decode (returned as errors in place; a
    /// kernel object and agent out of step, never a reason to stop).
    pub undecodable: u64,
}

impl Drops {
    /// What was added since `earlier` (counters only rise).
    pub(super) fn since(self, earlier: Drops) -> Drops {
        Drops {
            ring_full: self.ring_full.saturating_sub(earlier.ring_full),
            map_full: self.map_full.saturating_sub(earlier.map_full),
            undecodable: self.undecodable.saturating_sub(earlier.undecodable),
        }
    }
}

impl KernelSource {
    /// What was lost since the previous call (see [`Self::drops`] for the totals): the
    /// agent's cue to rescan cgroups when `ring_full` is not 0, and the increments of its
    /// loss metrics.
    pub fn new_drops(&mut self) -> Drops {
        let now = self.drops();
        let new = now.since(self.drops_reported);
        self.drops_reported = now;
        new
    }

    /// Records lost so far: dropped by the kernel (summed over CPUs) or undecodable.
    pub fn drops(&self) -> Drops {
        let kernel = self.kernel_drops();
        Drops {
            undecodable: self.undecodable,
            ..kernel
        }
    }

    fn kernel_drops(&self) -> Drops {
        let Some(map) = self.ebpf.map("DROPS") else {
            return Drops::default();
        };
        let Ok(counters) = PerCpuArray::<_, u64>::try_from(map) else {
            return Drops::default();
        };
        let sum = |reason: DropReason| {
            counters
                .get(&(reason as u32), 0)
                .map_or(0, |per_cpu| per_cpu.iter().sum())
        };
        Drops {
            ring_full: sum(DropReason::RingFull),
            map_full: sum(DropReason::MapFull),
            undecodable: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_drops_are_the_increase_of_each_counter() {
        let earlier = Drops {
            ring_full: 5,
            map_full: 1,
            undecodable: 0,
        };
        let now = Drops {
            ring_full: 9,
            map_full: 1,
            undecodable: 2,
        };
        let cases = [
            (
                "some counters rose",
                now,
                earlier,
                Drops {
                    ring_full: 4,
                    map_full: 0,
                    undecodable: 2,
                },
            ),
            ("nothing new", now, now, Drops::default()),
            ("first call", now, Drops::default(), now),
        ];
        for (name, now, earlier, want) in cases {
            assert_eq!(now.since(earlier), want, "{name}");
        }
    }
}
