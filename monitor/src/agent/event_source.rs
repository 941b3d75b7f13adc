//! Where the agent's numbers come from, as the probe names it ([`EventSource`]), with the
//! kernel programs when any are loaded: everything from the kernel, cgroup lifecycle from
//! the kernel and memory by polling, or polling alone.
use std::{io, pin::Pin, time::Duration};

use aya::maps::MapError;

use super::args::{AgentArgs, SourceMode};
use crate::{
    cgroupfs::{CgroupPaths, MemoryHierarchy},
    source::{
        ebpf::{
            CGROUP_MAP_ENTRY_BYTES, Drops, IncidentOptions, KernelSource, LoadOptions,
            StatLinkError, TaskCgroups, cgroup_map_entries_at,
        },
        event::{DecodeError, KernelEvent},
        probe::EventSource,
    },
};

/// Kernel records as one read hands them over.
pub(super) type Batch = Vec<Result<KernelEvent, DecodeError>>;

/// What the loop asks of the loaded kernel programs (see [`KernelSource`] for each), the
/// seam its unit tests fake.
pub(super) trait KernelEvents {
    /// Waits for the kernel's next wake-up, then appends every waiting record. Cancel-safe.
    fn next_batch<'a>(
        &'a mut self,
        out: &'a mut Batch,
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + 'a>>;
    fn read_pending(&mut self, out: &mut Batch) -> usize;
    fn hold_pending(&mut self, out: &mut Batch, limit: usize) -> usize;
    fn wake_after_growth(&mut self, headroom: Option<u64>) -> Result<bool, MapError>;
    fn wake_after_forks(&mut self, tasks: Option<u64>) -> Result<bool, MapError>;
    fn watch_task_cgroups(&mut self, on: bool) -> Result<bool, MapError>;
    fn take_task_cgroups(&mut self) -> TaskCgroups;
    fn new_drops(&mut self) -> Drops;
    fn tracked_cgroups(&self) -> Result<Vec<u64>, MapError>;
    fn remove_stale(&mut self, tracked: Vec<u64>, live: &CgroupPaths) -> Result<usize, MapError>;
    fn stats_attached(&self) -> bool;
    fn attach_stats(&mut self) -> Result<(), StatLinkError>;
    fn detach_stats(&mut self) -> Result<(), StatLinkError>;
    /// Programs attached, and how many were planned.
    fn programs(&self) -> (usize, usize);
    /// The memory cgroup the kernel recorded for OOM victim `pid` (6.8+).
    fn oom_victim_cgroup(&self, pid: u32) -> Option<u64>;
}

impl KernelEvents for KernelSource {
    fn next_batch<'a>(
        &'a mut self,
        out: &'a mut Batch,
    ) -> Pin<Box<dyn Future<Output = io::Result<()>> + 'a>> {
        Box::pin(KernelSource::next_batch(self, out))
    }
    fn read_pending(&mut self, out: &mut Batch) -> usize {
        KernelSource::read_pending(self, out)
    }
    fn hold_pending(&mut self, out: &mut Batch, limit: usize) -> usize {
        KernelSource::hold_pending(self, out, limit)
    }
    fn wake_after_growth(&mut self, headroom: Option<u64>) -> Result<bool, MapError> {
        KernelSource::wake_after_growth(self, headroom)
    }
    fn wake_after_forks(&mut self, tasks: Option<u64>) -> Result<bool, MapError> {
        KernelSource::wake_after_forks(self, tasks)
    }
    fn watch_task_cgroups(&mut self, on: bool) -> Result<bool, MapError> {
        KernelSource::watch_task_cgroups(self, on)
    }
    fn take_task_cgroups(&mut self) -> TaskCgroups {
        KernelSource::take_task_cgroups(self)
    }
    fn new_drops(&mut self) -> Drops {
        KernelSource::new_drops(self)
    }
    fn tracked_cgroups(&self) -> Result<Vec<u64>, MapError> {
        KernelSource::tracked_cgroups(self)
    }
    fn remove_stale(&mut self, tracked: Vec<u64>, live: &CgroupPaths) -> Result<usize, MapError> {
        KernelSource::remove_stale(self, tracked, live)
    }
    fn stats_attached(&self) -> bool {
        KernelSource::stats_attached(self)
    }
    fn attach_stats(&mut self) -> Result<(), StatLinkError> {
        KernelSource::attach_stats(self)
    }
    fn detach_stats(&mut self) -> Result<(), StatLinkError> {
        KernelSource::detach_stats(self)
    }
    fn programs(&self) -> (usize, usize) {
        let attached = self.attached().len();
        (attached, attached + self.skipped().len())
    }
    fn oom_victim_cgroup(&self, pid: u32) -> Option<u64> {
        KernelSource::oom_victim_cgroup(self, pid)
    }
}

/// The agent's event source.
pub(super) struct Source {
    pub kind: EventSource,
    /// The loaded kernel programs; `None` when polling alone.
    pub kernel: Option<Box<dyn KernelEvents>>,
    /// Why `--source auto` polls: the kernel programs could not load.
    pub fallback: Option<String>,
}

impl Source {
    /// Opens what `--source` asks for; with `auto`, polling when the kernel programs cannot
    /// load.
    pub(super) fn open(args: &AgentArgs, hierarchy: &MemoryHierarchy) -> anyhow::Result<Source> {
        if args.source == SourceMode::Poll {
            return Ok(Source::polling());
        }
        let options = LoadOptions {
            step_bytes: args.step,
            hierarchy_id: hierarchy.hierarchy_id,
            memcg_hook: args.memcg_hook,
            budget_pages: args.per_cpu_budget,
            cgroup_map_entries: cgroup_map_entries_at(&hierarchy.mount),
        };
        // Reclaim stalls of at least 1 ms are kept to explain decisions, as `monitor trace`
        // shows them.
        let incidents = IncidentOptions {
            min_stall: Duration::from_millis(1),
        };
        match KernelSource::load_with_incidents(options, incidents) {
            Ok(kernel) => {
                tracing::info!(
                    "per-cgroup kernel map: {} entries ({} KiB, preallocated), sized to the \
                     cgroups on the node now",
                    options.cgroup_map_entries,
                    u64::from(options.cgroup_map_entries) * CGROUP_MAP_ENTRY_BYTES / 1024
                );
                for skipped in kernel.skipped() {
                    tracing::warn!(
                        "not attached: {} ({}); {}",
                        skipped.program.hook(),
                        skipped.reason,
                        skipped.program.fallback
                    );
                }
                let kind = if kernel.tracks_memory() {
                    EventSource::Ebpf
                } else {
                    EventSource::EbpfPoll
                };
                Ok(Source {
                    kind,
                    kernel: Some(Box::new(kernel)),
                    fallback: None,
                })
            }
            Err(e) if args.source == SourceMode::Auto => {
                if out_of_memory(&e) {
                    tracing::error!(
                        "kernel programs could not load, polling cgroupfs instead: {e}: their \
                         maps are charged to this agent's memory cgroup, whose limit is too \
                         low (docs/operating.md: \"Memory\")"
                    );
                } else {
                    tracing::warn!("kernel programs unavailable, polling cgroupfs instead: {e}");
                }
                Ok(Source {
                    fallback: Some(e.to_string()),
                    ..Source::polling()
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn polling() -> Source {
        Source {
            kind: EventSource::Poll,
            kernel: None,
            fallback: None,
        }
    }

    /// Whether the kernel programs can report memory numbers, attached now or not.
    pub(super) fn has_stat_programs(&self) -> bool {
        self.kind == EventSource::Ebpf
    }

    /// Whether memory numbers come from the kernel between resyncs now: the stat programs
    /// are loaded and attached (`--attach-within` detaches them while no threshold is near).
    pub(super) fn memory_from_kernel(&self) -> bool {
        self.has_stat_programs() && self.kernel.as_ref().is_some_and(|k| k.stats_attached())
    }

    /// The kernel programs, when they report memory numbers now.
    pub(super) fn memory_kernel(&mut self) -> Option<&mut (dyn KernelEvents + 'static)> {
        if !self.memory_from_kernel() {
            return None;
        }
        self.kernel.as_deref_mut()
    }

    /// The next batch of kernel records; never resolves when polling alone. Cancel-safe.
    pub(super) async fn next_batch(&mut self, batch: &mut Batch) -> io::Result<()> {
        match self.kernel.as_mut() {
            Some(kernel) => kernel.next_batch(batch).await,
            None => std::future::pending().await,
        }
    }

    /// In words, for the start-up line and the status endpoint.
    pub(super) fn describe(&self, poll: Duration) -> String {
        let programs = |k: &dyn KernelEvents| {
            let (attached, planned) = k.programs();
            format!("{attached}/{planned} kernel programs")
        };
        match (self.kind, self.kernel.as_deref()) {
            (EventSource::Ebpf, Some(k)) => format!("ebpf ({})", programs(k)),
            (EventSource::EbpfPoll, Some(k)) => {
                format!("ebpf+poll ({}; memory polled every {poll:?})", programs(k))
            }
            _ => match &self.fallback {
                Some(why) => format!(
                    "poll (cgroupfs every {poll:?}; the kernel programs could not load: {why})"
                ),
                None => format!("poll (cgroupfs every {poll:?})"),
            },
        }
    }
}

/// Whether an error comes from the kernel refusing memory (ENOMEM), as map creation does when
/// the agent's memory cgroup is at its limit.
fn out_of_memory(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(libc::ENOMEM))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enomem_anywhere_in_the_chain_is_out_of_memory() {
        #[derive(Debug, thiserror::Error)]
        #[error("creating map CGROUP_STATS")]
        struct Create(#[source] io::Error);
        let enomem = Create(io::Error::from_raw_os_error(libc::ENOMEM));
        assert!(out_of_memory(&enomem));
        let eperm = Create(io::Error::from_raw_os_error(libc::EPERM));
        assert!(!out_of_memory(&eperm));
    }

    #[test]
    fn a_fallback_says_why_the_agent_polls() {
        let source = Source {
            fallback: Some("creating map CGROUP_STATS: Cannot allocate memory".into()),
            ..Source::polling()
        };
        assert_eq!(
            source.describe(Duration::from_secs(1)),
            "poll (cgroupfs every 1s; the kernel programs could not load: creating map \
             CGROUP_STATS: Cannot allocate memory)"
        );
        assert_eq!(
            Source::polling().describe(Duration::from_secs(1)),
            "poll (cgroupfs every 1s)"
        );
    }
}
